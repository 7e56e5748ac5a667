"""Which stack a pasted text comes from (data/frameworks.yaml)."""

from __future__ import annotations

import pytest

from memtune.diagnose.frameworks import FrameworkHits, load_frameworks
from memtune.diagnose.patterns import load_patterns

FW = load_frameworks()


def decide(*lines: str, kinds: frozenset = frozenset()) -> str | None:
    hits = FrameworkHits()
    for line in lines:
        FW.observe(line, hits)
    return FW.decide(hits, set(kinds))[0].name


@pytest.mark.parametrize(
    "lines, name",
    [
        (
            [
                '  File "/usr/local/lib/python3.12/dist-packages/megatron/core/transformer/transformer_block.py", line 201'
            ],
            "megatron",
        ),
        (["ERROR 08-20 03:10:01 [engine.py:467] CUDA out of memory. Tried to allocate 33.75 GiB."], "vllm"),
        (['  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 934'], "sglang"),
        (["[2023-07-04 17:31:27,755] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 953850"], "deepspeed"),
        (["Got an OOM, unloading all loaded models."], "comfyui"),
        (['  File ".../site-packages/diffusers/pipelines/pipeline_utils.py", line 10'], "diffusers"),
        (['  File ".../torch/distributed/fsdp/fully_sharded_data_parallel.py", line 483, in __init__'], "fsdp"),
        (['  File "/mnt/bn/x/ttcd-ms-swift/swift/cli/rlhf.py", line 5, in <module>'], "ms-swift"),
        (["ms-swift                      2.6.0.dev0"], "ms-swift"),
        # swift's Megatron path shows Megatron frames: the Megatron planner applies
        (
            [
                '  File "/root/ms-swift-main/swift/megatron/train/sft.py", line 79',
                '  File "/root/Megatron-LM/megatron/training/training.py", line 864',
            ],
            "megatron",
        ),
        (["iteration 10 | loss 2.0"], None),
    ],
)
def test_signals_name_the_stack(lines: list[str], name: str | None) -> None:
    assert decide(*lines) == name


def test_rl_trainer_wins_over_the_engine_it_embeds() -> None:
    # verl's rollout runs vLLM: the RL trainer's knobs are the ones to turn
    lines = [
        '  File "/verl/verl/workers/sharding_manager/fsdp_vllm.py", line 79',
        '  File ".../vllm/entrypoints/llm.py", line 1244',
    ]
    assert decide(*lines) == "verl"


def test_megatron_only_kinds_imply_megatron() -> None:
    assert decide("AssertionError: num_layers=60 ...", kinds=frozenset({"pp-divisibility"})) == "megatron"
    assert decide("RuntimeError: CUDA error: out of memory", kinds=frozenset({"cuda-runtime-oom"})) is None


def test_every_signal_line_reaches_the_scanner() -> None:
    # a signal is seen only if the prefilter selects its line: it must contain a trigger
    triggers = load_patterns().triggers
    assert all(any(t in sig.encode() for t in triggers) for sig in FW.literals())


def test_redundant_literals_are_dropped_from_the_prefilter() -> None:
    from memtune.diagnose.patterns import minimal_triggers

    assert minimal_triggers((b"OOM", b"Got an OOM, unloading", b"vllm", b"vllm", b"x")) == (b"OOM", b"vllm", b"x")
    triggers = load_patterns().triggers
    assert not any(a != b and a in b for a in triggers for b in triggers)


def test_every_stack_has_capacity_advice() -> None:
    assert all(fw.advice.capacity for fw in FW.frameworks) and FW.default.advice.capacity
    assert [fw.name for fw in FW.frameworks if fw.in_megatron] == ["megatron"]
