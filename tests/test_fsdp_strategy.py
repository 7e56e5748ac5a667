"""Megatron-FSDP without a sharding strategy runs no_shard, which shards nothing.

``data_parallel_sharding_strategy`` defaults to ``no_shard`` in Megatron-Core's
DistributedDataParallelConfig (megatron-core 0.19.2, distributed_data_parallel_config.py) and in
Megatron-LM's flag; under it Megatron-FSDP distributes none of its buffers
(megatron_fsdp/param_and_grad_buffer.py: weight, main-weight and gradient buffers all
``is_data_distributed=False``), so a run that turns FSDP on and names no strategy keeps the memory
of plain DDP. The readers used to assume optim_grads_params there: a silent under-estimate.
"""

from __future__ import annotations

import pytest

from memtune.check import check_rules
from memtune.estimate.estimator import estimate
from memtune.estimate.plan_space import PlanSettings, exact_change
from memtune.estimate.planner import plan
from memtune.readers import run_view
from memtune.readers.bridge_config import specs_from_bridge
from memtune.readers.megatron_args import specs_from_megatron_args
from memtune.spec.presets import load_preset
from memtune.units import GIB

FLAGS = {
    "--num-layers": 32,
    "--hidden-size": 4096,
    "--num-attention-heads": 32,
    "--group-query-attention": True,
    "--num-query-groups": 8,
    "--ffn-hidden-size": 14336,
    "--swiglu": True,
    "--seq-length": 4096,
    "--micro-batch-size": 1,
    "--global-batch-size": 64,
    "--vocab-size": 128256,
    "--bf16": True,
    "--untie-embeddings-and-output-weights": True,
    "--disable-bias-linear": True,
}


def model_state(flags: dict) -> int:
    model, run, _ = specs_from_megatron_args(flags, world_size=8)
    components = estimate(model, run).stages[0]
    return int(components.weights + components.gradients + components.optimizer)


def test_megatron_flag_unset_is_no_shard_with_a_note():
    fsdp = {**FLAGS, "--use-megatron-fsdp": True, "--use-distributed-optimizer": True}
    _, run, notes = specs_from_megatron_args(fsdp, world_size=8)
    assert run.use_megatron_fsdp and run.data_parallel_sharding_strategy == "no_shard"
    assert any("--data-parallel-sharding-strategy not given" in n and "shards nothing" in n for n in notes)
    # no_shard holds what plain DDP holds; the named strategies shard more and more
    ddp = model_state(FLAGS)
    sizes = {
        strategy: model_state({**fsdp, "--data-parallel-sharding-strategy": strategy})
        for strategy in ("no_shard", "optim", "optim_grads", "optim_grads_params")
    }
    assert sizes["no_shard"] == ddp == model_state(fsdp)
    assert sizes["no_shard"] > sizes["optim"] > sizes["optim_grads"] > sizes["optim_grads_params"]
    assert sizes["optim"] == model_state({**FLAGS, "--use-distributed-optimizer": True})
    _, _, named = specs_from_megatron_args({**fsdp, "--data-parallel-sharding-strategy": "optim"}, world_size=8)
    assert not any("--data-parallel-sharding-strategy not given" in n for n in named)
    _, _, plain = specs_from_megatron_args(FLAGS, world_size=8)
    assert not any("sharding-strategy" in n for n in plain)


@pytest.mark.parametrize("section", ["ddp", "dist"])
def test_bridge_fsdp_without_strategy_is_no_shard(section):
    _, run, notes = specs_from_bridge(
        {"model": {}, section: {"use_megatron_fsdp": True}}, world_size=8, base=load_preset("llama3-8b")
    )
    assert run.data_parallel_sharding_strategy == "no_shard"
    assert any("ddp.data_parallel_sharding_strategy not given" in n for n in notes)
    _, named, notes = specs_from_bridge(
        {"model": {}, "ddp": {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}},
        world_size=8,
        base=load_preset("llama3-8b"),
    )
    assert named.data_parallel_sharding_strategy == "optim_grads_params"
    assert not any("sharding_strategy not given" in n for n in notes)


def _plan(flags: dict):
    model, run, _ = specs_from_megatron_args(flags, world_size=8)
    peak = estimate(model, run).peak_bytes
    settings = PlanSettings(gpu_memory_bytes=int(peak * 0.9), headroom_bytes=GIB)
    return run, plan(model, run, settings)


def test_planner_offers_sharding_to_a_no_shard_fsdp_run_and_spells_it_out():
    base, result = _plan({**FLAGS, "--use-megatron-fsdp": True, "--use-distributed-optimizer": True})
    rows = [e for e in (*result.ranked, *result.not_fitting) if "was no_shard" in e.candidate.title]
    assert len(rows) == 1
    row = rows[0]
    assert row.candidate.run.data_parallel_sharding_strategy == "optim_grads_params"
    assert row.peak_bytes < result.baseline.peak_bytes
    change = exact_change(base, row.candidate)
    assert change["bridge_overrides"] == ["ddp.data_parallel_sharding_strategy=optim_grads_params"]
    assert change["megatron_args"] == ["--data-parallel-sharding-strategy optim_grads_params"]


def test_turning_fsdp_on_shards_everything_and_names_the_strategy_once():
    base, result = _plan(FLAGS)
    row = next(e for e in (*result.ranked, *result.not_fitting) if e.candidate.run.use_megatron_fsdp)
    assert row.candidate.run.data_parallel_sharding_strategy == "optim_grads_params"
    distopt = next(
        e
        for e in (*result.ranked, *result.not_fitting)
        if e.candidate.title == "distributed optimizer" and not e.candidate.run.use_megatron_fsdp
    )
    assert row.peak_bytes < distopt.peak_bytes  # weights and gradients sharded too
    change = exact_change(base, row.candidate)
    assert change["bridge_overrides"].count("ddp.data_parallel_sharding_strategy=optim_grads_params") == 1
    assert change["megatron_args"].count("--data-parallel-sharding-strategy optim_grads_params") == 1


def test_check_env_warns_about_fsdp_without_a_strategy(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py \\\n    --use-megatron-fsdp \\\n    --bf16\n")
    found = [
        f for f in check_rules.run_all(run_view.build(run_view.Inputs(scripts=[str(script)]))) if f.rule == "MT029"
    ]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "no_shard" in found[0].message and "--data-parallel-sharding-strategy optim_grads_params" in found[0].fix
    script.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n    --use-megatron-fsdp \\\n"
        "    --data-parallel-sharding-strategy optim\n"
    )
    assert not [
        f for f in check_rules.run_all(run_view.build(run_view.Inputs(scripts=[str(script)]))) if f.rule == "MT029"
    ]


def test_the_fsdp_option_shards_everything_on_any_source(tmp_path, invoke):
    """--fsdp promises optim_grads_params: a launch line without a strategy must not turn it
    into no_shard."""
    import json

    script = tmp_path / "train.sh"
    words = " ".join(f"{k} {v}" if v is not True else k for k, v in FLAGS.items())
    script.write_text(f"torchrun --nproc-per-node 8 pretrain_gpt.py {words}\n")
    doc = json.loads(invoke("estimate_memory", "--megatron-args", str(script), "--fsdp", "--json").stdout)
    assert any("Megatron-FSDP optim_grads_params" in a for a in doc["assumptions"]), doc["assumptions"]
