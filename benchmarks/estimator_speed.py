#!/usr/bin/env python3
"""How long does one estimate take? (the planner calls estimate() thousands of times)

Prints the best-of-5 mean time per call for a few representative runs. Usage:

    .venv/bin/python benchmarks/estimator_speed.py
"""

from __future__ import annotations

import functools
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from memtune.estimate.estimator import estimate  # noqa: E402
from memtune.spec.presets import load_preset  # noqa: E402
from memtune.spec.run_spec import RunSpec  # noqa: E402

CASES = {
    "llama3-70b TP4 PP4 VPP5 (32 GPUs)": (
        "llama3-70b",
        RunSpec(
            world_size=32,
            tp=4,
            pp=4,
            vpp=5,
            mbs=1,
            gbs=32,
            seq_length=4096,
            sequence_parallel=True,
            recompute_granularity="selective",
            use_distributed_optimizer=True,
        ),
    ),
    "deepseek-v3 TP2 PP16 EP64 (1024 GPUs)": (
        "deepseek-v3",
        RunSpec(
            world_size=1024,
            tp=2,
            pp=16,
            ep=64,
            etp=1,
            mbs=1,
            gbs=4096,
            seq_length=4096,
            sequence_parallel=True,
            use_distributed_optimizer=True,
            recompute_granularity="full",
            num_layers_in_first_pipeline_stage=1,
        ),
    ),
    "qwen3-8b LoRA TP2 (2 GPUs)": (
        "qwen3-8b",
        RunSpec(world_size=2, tp=2, seq_length=8192, sequence_parallel=True, peft="lora"),
    ),
}


def main() -> int:
    for label, (preset, run) in CASES.items():
        model = load_preset(preset)
        number = 500
        best = min(timeit.repeat(functools.partial(estimate, model, run), number=number, repeat=5)) / number
        print(f"{label:<40} {best * 1e3:7.3f} ms per estimate ({1 / best:,.0f} per second)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
