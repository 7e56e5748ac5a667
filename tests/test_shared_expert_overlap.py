"""--moe-shared-expert-overlap under sequence parallelism: the shared expert gathers its input
itself and runs its linears without TP communication (Megatron-Core shared_experts.py), so its
linear_fc1 keeps the whole gathered input instead of the sequence-local shard."""

from __future__ import annotations

import pytest

from memtune.estimate.moe import moe_activation_terms
from memtune.readers.megatron_args import specs_from_megatron_args

FLAGS = {
    "--num-layers": 4,
    "--hidden-size": 2048,
    "--num-attention-heads": 16,
    "--ffn-hidden-size": 1408,
    "--seq-length": 4096,
    "--max-position-embeddings": 4096,
    "--micro-batch-size": 1,
    "--global-batch-size": 8,
    "--vocab-size": 32000,
    "--bf16": True,
    "--swiglu": True,
    "--num-experts": 64,
    "--moe-router-topk": 6,
    "--moe-shared-expert-intermediate-size": 2816,
    "--tensor-model-parallel-size": 2,
    "--sequence-parallel": True,
    "--expert-model-parallel-size": 4,
}


def terms(flags: dict) -> dict[str, float]:
    model, run, _ = specs_from_megatron_args(flags, world_size=8)
    tokens = run.mbs * run.seq_length
    return moe_activation_terms(model, run, tokens, 2, 2)


def test_the_overlap_keeps_the_gathered_input_of_the_shared_fc1():
    plain = terms(FLAGS)
    overlap = terms({**FLAGS, "--moe-shared-expert-overlap": True})
    assert "shared_fc1_in" not in plain
    assert overlap["shared_fc1_in"] == 2 * 4096 * 2048  # bf16, every token of the micro-batch
    assert {k: v for k, v in overlap.items() if k != "shared_fc1_in"} == plain


@pytest.mark.parametrize(
    "change",
    [
        {"--sequence-parallel": False},  # the input is not gathered: the same tensor as the norm output
        {"--tensor-model-parallel-size": 1, "--sequence-parallel": False},
        {"--moe-shared-expert-intermediate-size": None},  # no shared expert
    ],
)
def test_nothing_more_without_a_gather_or_a_shared_expert(change):
    flags = {k: v for k, v in {**FLAGS, **change, "--moe-shared-expert-overlap": True}.items() if v is not None}
    assert "shared_fc1_in" not in terms(flags)


def test_under_fp8_delayed_scaling_te_keeps_its_fp8_copy():
    """shared_experts.py asks TE to save the original input only for the non-delayed FP8 recipes."""
    model, run, _ = specs_from_megatron_args({**FLAGS, "--moe-shared-expert-overlap": True}, world_size=8)
    tokens = run.mbs * run.seq_length
    delayed = moe_activation_terms(model, run.with_(fp8="delayed"), tokens, 2, 1)["shared_fc1_in"]
    tensorwise = moe_activation_terms(model, run.with_(fp8="tensorwise"), tokens, 2, 1)["shared_fc1_in"]
    assert (delayed, tensorwise) == (4096 * 2048, 2 * 4096 * 2048)
