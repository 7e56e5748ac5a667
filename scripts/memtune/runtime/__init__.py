"""Reading what a run measured and tracing memory regressions (see each module)."""
