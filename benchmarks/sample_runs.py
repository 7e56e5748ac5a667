"""The runs the speed benchmarks time and the estimator tests check, written once.

The estimator benchmark, the planner benchmark and ``tests/test_estimator.py`` each built
the same Llama3-70B and DeepSeek-V3 runs field by field; a change to one copy (a new field
default, a corrected layer split) silently left the others measuring a different run. Each
run is now data in :data:`RUNS` - a preset name and the ``RunSpec`` fields - and callers
state only how theirs differs (``run_fields("deepseek-v3-1024", recompute_granularity=...)``).

Not part of the skill: nothing under ``scripts/`` imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from memtune.spec.model_spec import ModelSpec  # noqa: E402
from memtune.spec.presets import load_preset  # noqa: E402
from memtune.spec.run_spec import RunSpec  # noqa: E402

#: name -> (preset, RunSpec fields).
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    # The seed's layout (TP4 PP4 VPP5 DP2 on 32 GPUs), selective recompute, distributed optimizer.
    "llama3-70b-32": (
        "llama3-70b",
        {
            "world_size": 32,
            "tp": 4,
            "pp": 4,
            "vpp": 5,
            "mbs": 1,
            "gbs": 32,
            "seq_length": 4096,
            "sequence_parallel": True,
            "recompute_granularity": "selective",
            "use_distributed_optimizer": True,
        },
    ),
    # DeepSeek-V3 on 1024 GPUs: TP2 PP16 EP64, one layer in the first stage (61 = 1 + 15 x 4).
    "deepseek-v3-1024": (
        "deepseek-v3",
        {
            "world_size": 1024,
            "tp": 2,
            "pp": 16,
            "ep": 64,
            "etp": 1,
            "mbs": 1,
            "gbs": 4096,
            "seq_length": 4096,
            "sequence_parallel": True,
            "use_distributed_optimizer": True,
            "recompute_granularity": "full",
            "num_layers_in_first_pipeline_stage": 1,
        },
    ),
    # The seed's LoRA re-gather measurement: Qwen3-8B, TP2 with sequence parallelism, seq 8192.
    "qwen3-8b-lora-2": (
        "qwen3-8b",
        {"world_size": 2, "tp": 2, "seq_length": 8192, "sequence_parallel": True, "peft": "lora"},
    ),
}


def run_fields(name: str, **changes: Any) -> dict[str, Any]:
    """The ``RunSpec`` fields of run ``name`` with ``changes`` applied (a fresh dict)."""
    return {**RUNS[name][1], **changes}


def run_spec(name: str, **changes: Any) -> RunSpec:
    """Run ``name`` as a ``RunSpec``, with ``changes`` applied."""
    return RunSpec(**run_fields(name, **changes))


def model_and_run(name: str, **changes: Any) -> tuple[ModelSpec, RunSpec]:
    """The preset model of run ``name`` and the run itself, with ``changes`` applied."""
    return load_preset(RUNS[name][0]), run_spec(name, **changes)
