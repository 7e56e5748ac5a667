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
from sample_runs import model_and_run  # noqa: E402

#: label -> a run of sample_runs.py (shared with tests/test_estimator.py).
CASES = {
    "llama3-70b TP4 PP4 VPP5 (32 GPUs)": "llama3-70b-32",
    "deepseek-v3 TP2 PP16 EP64 (1024 GPUs)": "deepseek-v3-1024",
    "qwen3-8b LoRA TP2 (2 GPUs)": "qwen3-8b-lora-2",
}


def main() -> int:
    for label, name in CASES.items():
        model, run = model_and_run(name)
        number = 500
        best = min(timeit.repeat(functools.partial(estimate, model, run), number=number, repeat=5)) / number
        print(f"{label:<40} {best * 1e3:7.3f} ms per estimate ({1 / best:,.0f} per second)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
