"""Read what a run measured (Megatron report_memory lines, Bridge memory logging, memory_summary
tables, memory_stats dumps, nvidia-smi, memory snapshots) and say what it means (the
runtime_memory helper's pipeline; trace_regression builds on :func:`memtune.runtime.read.read_measurements`).
"""
