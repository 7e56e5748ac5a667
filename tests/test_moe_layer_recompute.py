"""--moe-layer-recompute / model.moe_layer_recompute and model.fp8_param, read as Megatron-Core does.

TransformerConfig.__post_init__ (megatron-core 0.19.2) turns moe_layer_recompute into selective
recompute with ``moe`` appended to the modules, after their default ``[core_attn]`` is filled in,
and raises "Do not set --moe-layer-recompute with full recompute granularity."; the readers used to
ignore it (Bridge) or only warn (Megatron-LM). ``fp8_param`` is TransformerConfig's switch for
weights kept in fp8, which Megatron-LM sets from --fp8-param-gather.
"""

from __future__ import annotations

import pytest

from memtune.errors import InputError
from memtune.estimate.estimator import estimate
from memtune.readers.bridge_config import specs_from_bridge
from memtune.readers.megatron_args import specs_from_megatron_args
from memtune.spec.presets import load_preset

FLAGS = {
    "--num-layers": 8,
    "--hidden-size": 2048,
    "--num-attention-heads": 16,
    "--ffn-hidden-size": 5632,
    "--seq-length": 4096,
    "--micro-batch-size": 1,
    "--global-batch-size": 8,
    "--vocab-size": 32000,
    "--bf16": True,
    "--num-experts": 8,
    "--moe-router-topk": 2,
    "--moe-ffn-hidden-size": 1408,
    "--moe-token-dispatcher-type": "alltoall",
}


@pytest.mark.parametrize(
    ("extra", "modules"),
    [
        ({}, ("core_attn", "moe")),
        ({"--recompute-granularity": "selective", "--recompute-modules": "mlp"}, ("mlp", "moe")),
        ({"--recompute-granularity": "selective", "--recompute-modules": "moe"}, ("moe",)),
    ],
)
def test_megatron_flag_is_selective_moe_recompute(extra, modules):
    model, run, notes = specs_from_megatron_args({**FLAGS, **extra, "--moe-layer-recompute": True}, world_size=8)
    assert (run.recompute_granularity, run.recompute_modules) == ("selective", modules)
    assert not any("moe_layer_recompute" in n or "--moe-layer-recompute" in n for n in notes)
    plain_model, plain, _ = specs_from_megatron_args({**FLAGS, **extra}, world_size=8)
    with_flag, without = estimate(model, run).peak_allocated_bytes, estimate(plain_model, plain).peak_allocated_bytes
    if plain.recompute_granularity == "selective" and "moe" in plain.recompute_modules:
        assert with_flag == without  # already recomputed: the deprecated switch adds nothing
    else:
        assert with_flag < without


def test_with_full_recompute_it_is_refused():
    flags = {**FLAGS, "--moe-layer-recompute": True, "--recompute-granularity": "full"}
    with pytest.raises(InputError, match="Do not set --moe-layer-recompute with full recompute"):
        specs_from_megatron_args(flags, world_size=8)
    with pytest.raises(InputError, match="model.moe_layer_recompute"):
        specs_from_bridge(
            {"model": {"recompute_granularity": "full", "moe_layer_recompute": True}},
            world_size=8,
            base=load_preset("qwen3-30b-a3b"),
        )


def test_bridge_key_is_read():
    _, run, _ = specs_from_bridge(
        {"model": {"moe_layer_recompute": True}}, world_size=8, base=load_preset("qwen3-30b-a3b")
    )
    assert (run.recompute_granularity, run.recompute_modules) == ("selective", ("core_attn", "moe"))
    _, off, _ = specs_from_bridge({"model": {}}, world_size=8, base=load_preset("qwen3-30b-a3b"))
    assert off.recompute_granularity is None


def test_bridge_fp8_param_keeps_weights_in_fp8():
    base = load_preset("llama3-8b")
    _, on, _ = specs_from_bridge({"model": {"fp8": "hybrid", "fp8_param": True}}, world_size=8, base=base)
    _, off, _ = specs_from_bridge({"model": {"fp8": "hybrid"}}, world_size=8, base=base)
    assert on.fp8_param_gather and not off.fp8_param_gather
