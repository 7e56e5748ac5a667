"""Pre-launch checks of a run view against the rules in data/check_rules.yaml (the check_env helper's pipeline)."""
