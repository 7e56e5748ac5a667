"""Megatron-FSDP's sharding strategy when the input names none, per source.

Megatron Bridge's Megatron-FSDP (v1, its default path) keeps ``ddp.data_parallel_sharding_strategy``,
whose default in Megatron-Core's DistributedDataParallelConfig is ``no_shard`` (megatron-core
0.19.2); under it Megatron-FSDP distributes none of its buffers (megatron_fsdp/
param_and_grad_buffer.py), so the memory is that of plain DDP. Bridge's v2 path sets
optim_grads_params itself. Megatron-LM's ``--data-parallel-sharding-strategy`` defaults to
optim_grads_params since core_v0.18.0 (commit 3499efef) and to no_shard before. The readers used to
assume optim_grads_params everywhere: a silent under-estimate for Bridge configs.
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


def test_megatron_flag_unset_is_optim_grads_params_with_a_note():
    fsdp = {**FLAGS, "--use-megatron-fsdp": True, "--use-distributed-optimizer": True}
    _, run, notes = specs_from_megatron_args(fsdp, world_size=8)
    assert run.use_megatron_fsdp and run.data_parallel_sharding_strategy == "optim_grads_params"
    assert any("--data-parallel-sharding-strategy not given" in n and "core_v0.18.0" in n for n in notes)
    # no_shard holds what plain DDP holds; the named strategies shard more and more
    ddp = model_state(FLAGS)
    sizes = {
        strategy: model_state({**fsdp, "--data-parallel-sharding-strategy": strategy})
        for strategy in ("no_shard", "optim", "optim_grads", "optim_grads_params")
    }
    assert sizes["no_shard"] == ddp
    assert model_state(fsdp) == sizes["optim_grads_params"]
    assert sizes["no_shard"] > sizes["optim"] > sizes["optim_grads"] > sizes["optim_grads_params"]
    assert sizes["optim"] == model_state({**FLAGS, "--use-distributed-optimizer": True})
    _, _, named = specs_from_megatron_args({**fsdp, "--data-parallel-sharding-strategy": "optim"}, world_size=8)
    assert not any("--data-parallel-sharding-strategy not given" in n for n in named)
    _, _, plain = specs_from_megatron_args(FLAGS, world_size=8)
    assert not any("sharding-strategy" in n for n in plain)
    # the assumption line says the optimizer is replicated under no_shard
    model, no_shard, _ = specs_from_megatron_args({**fsdp, "--data-parallel-sharding-strategy": "no_shard"}, 8)
    assert any("(replicated), Megatron-FSDP no_shard" in a for a in estimate(model, no_shard).assumptions)


@pytest.mark.parametrize("section", ["ddp", "dist"])
def test_bridge_fsdp_without_strategy_is_no_shard(section):
    base = load_preset("llama3-8b")
    _, run, notes = specs_from_bridge({"model": {}, section: {"use_megatron_fsdp": True}}, world_size=8, base=base)
    assert run.data_parallel_sharding_strategy == "no_shard"
    assert any("ddp.data_parallel_sharding_strategy not given" in n for n in notes)
    _, named, notes = specs_from_bridge(
        {"model": {}, "ddp": {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}},
        world_size=8,
        base=base,
    )
    assert named.data_parallel_sharding_strategy == "optim_grads_params"
    assert not any("sharding_strategy not given" in n for n in notes)
    # Bridge's Megatron-FSDP v2 sets optim_grads_params whatever the config says
    _, v2, notes = specs_from_bridge(
        {"model": {}, "ddp": {"use_megatron_fsdp": True, "megatron_fsdp_version": 2}}, world_size=8, base=base
    )
    assert v2.data_parallel_sharding_strategy == "optim_grads_params"
    assert not any("sharding_strategy not given" in n for n in notes)


def _plan(flags: dict):
    model, run, _ = specs_from_megatron_args(flags, world_size=8)
    peak = estimate(model, run).peak_bytes
    settings = PlanSettings(gpu_memory_bytes=int(peak * 0.9), headroom_bytes=GIB)
    return run, plan(model, run, settings)


def test_planner_offers_sharding_to_a_no_shard_fsdp_run_and_spells_it_out():
    no_shard = {**FLAGS, "--use-megatron-fsdp": True, "--data-parallel-sharding-strategy": "no_shard"}
    base, result = _plan(no_shard)
    rows = [e for e in (*result.ranked, *result.not_fitting) if "was no_shard" in e.candidate.title]
    assert len(rows) == 1
    row = rows[0]
    assert row.candidate.run.data_parallel_sharding_strategy == "optim_grads_params"
    assert row.peak_bytes < result.baseline.peak_bytes
    change = exact_change(base, row.candidate)
    # Megatron-FSDP also wants the distributed-optimizer switch (Megatron-LM's guide lists it)
    assert set(change["bridge_overrides"]) == {
        "ddp.data_parallel_sharding_strategy=optim_grads_params",
        "optimizer.use_distributed_optimizer=true",
    }
    assert set(change["megatron_args"]) == {
        "--data-parallel-sharding-strategy optim_grads_params",
        "--use-distributed-optimizer",
    }


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


def _mt029(tmp_path, text: str, name: str = "train.sh", **inputs) -> list:
    path = tmp_path / name
    path.write_text(text)
    kind = {"configs": [str(path)]} if name.endswith(".yaml") else {"scripts": [str(path)]}
    return [f for f in check_rules.run_all(run_view.build(run_view.Inputs(**kind, **inputs))) if f.rule == "MT029"]


def test_check_env_names_the_default_by_source_and_release(tmp_path):
    script = "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n    --use-megatron-fsdp \\\n    --bf16\n"
    unknown = _mt029(tmp_path, script)
    assert [f.severity for f in unknown] == ["info"] and "core_v0.18.0" in unknown[0].message
    old = _mt029(tmp_path, script, mcore_version="0.17.0")
    assert [f.severity for f in old] == ["warning"] and "no_shard" in old[0].message
    assert "--data-parallel-sharding-strategy optim_grads_params" in old[0].fix
    assert not _mt029(tmp_path, script, mcore_version="0.19.2")
    named = script.replace("--bf16", "--data-parallel-sharding-strategy optim")
    assert not _mt029(tmp_path, named, mcore_version="0.17.0")
    bridge = _mt029(tmp_path, "ddp:\n  use_megatron_fsdp: true\n", "run.yaml")
    assert [f.severity for f in bridge] == ["warning"] and "Megatron Bridge" in bridge[0].message
    assert "ddp.data_parallel_sharding_strategy" in bridge[0].fix
    v2 = "ddp:\n  use_megatron_fsdp: true\n  megatron_fsdp_version: 2\n"
    assert not _mt029(tmp_path, v2, "run.yaml")


def test_sweep_keeps_the_users_strategy_and_turning_fsdp_off_is_runnable():
    from memtune.estimate.planner import _optimizer_options

    model, base, _ = specs_from_megatron_args(
        {**FLAGS, "--use-megatron-fsdp": True, "--data-parallel-sharding-strategy": "optim"}, world_size=8
    )
    strategies = [o.get("data_parallel_sharding_strategy") for o in _optimizer_options(base)]
    assert "optim" in strategies and "optim_grads_params" in strategies
    off = base.with_(use_megatron_fsdp=False, use_distributed_optimizer=True)
    from memtune.estimate.plan_space import Candidate

    change = exact_change(base, Candidate("distributed optimizer", "optimizer", off))
    assert "dist.use_megatron_fsdp=false" in change["bridge_overrides"]
    assert any(f.startswith("--ckpt-format torch_dist") for f in change["megatron_args"])


def test_the_fsdp_option_shards_everything_on_any_source(tmp_path, invoke):
    """--fsdp promises optim_grads_params: a launch line without a strategy must not turn it
    into no_shard."""
    import json

    script = tmp_path / "train.sh"
    words = " ".join(f"{k} {v}" if v is not True else k for k, v in FLAGS.items())
    script.write_text(f"torchrun --nproc-per-node 8 pretrain_gpt.py {words}\n")
    doc = json.loads(invoke("estimate_memory", "--megatron-args", str(script), "--fsdp", "--json").stdout)
    assert any("Megatron-FSDP optim_grads_params" in a for a in doc["assumptions"]), doc["assumptions"]


def test_sweep_tries_a_no_shard_run_before_the_distributed_optimizer():
    """The sweep prunes on 'a later option holds less memory': no_shard holds more than the
    distributed optimizer, so it comes first; a bridge base keeps its distributed optimizer
    explicitly when FSDP is turned off (Bridge switched it on only because FSDP was on)."""
    from memtune.estimate.plan_space import Candidate
    from memtune.estimate.planner import _optimizer_options

    model, base, _ = specs_from_bridge({"model": {}, "ddp": {"use_megatron_fsdp": True}}, 8, load_preset("llama3-8b"))
    options = _optimizer_options(base)
    assert options[0]["data_parallel_sharding_strategy"] == "no_shard"
    peaks = [estimate(model, base.with_(**o)).peak_bytes for o in options]
    assert peaks == sorted(peaks, reverse=True)
    off = base.with_(use_megatron_fsdp=False, use_distributed_optimizer=True)
    change = exact_change(base, Candidate("distributed optimizer", "optimizer", off))
    assert "optimizer.use_distributed_optimizer=true" in change["bridge_overrides"]
    assert "--use-distributed-optimizer" in change["megatron_args"]


def test_mt029_on_a_bridge_config_names_bridge_whatever_the_version(tmp_path):
    found = _mt029(tmp_path, "ddp:\n  use_megatron_fsdp: true\n", "run.yaml", mcore_version="0.19.2")
    assert len(found) == 1 and "Megatron Bridge" in found[0].message and "Megatron-LM" not in found[0].message


@pytest.mark.parametrize("strategy", ["zero3", "full_shard", "7"])
def test_an_unknown_strategy_is_refused_in_one_line(tmp_path, invoke, strategy):
    """Megatron-FSDP knows four strategies (param_and_grad_buffer.py raises on any other)."""
    config = tmp_path / "run.yaml"
    config.write_text(f"ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: {strategy}\n")
    out = invoke("estimate_memory", "--config", str(config), "--preset", "llama3-8b", "--gpus", "8")
    assert out.exit_code == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "must be one of no_shard, optim, optim_grads, optim_grads_params" in out.stderr


@pytest.mark.parametrize(
    "version, strategy, words",
    [
        ("0.17.0", "no_shard", "megatron-core 0.17.0 (optim_grads_params only from core_v0.18.0)"),
        ("0.16", "no_shard", "megatron-core 0.16"),
        ("0.18.0", "optim_grads_params", "default with megatron-core 0.18.0"),
        ("0.19.2", "optim_grads_params", "default with megatron-core 0.19.2"),
    ],
)
def test_the_release_picks_megatron_lms_fsdp_default(tmp_path, invoke, version, strategy, words):
    """--megatron-core-version reads a launch line with that release's flag default: before
    core_v0.18.0 an unnamed strategy is no_shard (everything whole, as plain DDP)."""
    import json

    script = tmp_path / "train.sh"
    flags = {**FLAGS, "--use-megatron-fsdp": True, "--use-distributed-optimizer": True}
    words_ = " ".join(f"{k} {v}" if v is not True else k for k, v in flags.items())
    script.write_text(f"torchrun --nproc-per-node 8 pretrain_gpt.py {words_}\n")
    base = ["estimate_memory", "--megatron-args", str(script), "--gpus", "8", "--json"]
    doc = json.loads(invoke(*base, "--megatron-core-version", version).stdout)
    note = [a for a in doc["assumptions"] if "--data-parallel-sharding-strategy not given" in a]
    assert len(note) == 1 and note[0].split("not given: ")[1].startswith(strategy.split("_")[0]), note
    assert words in note[0]
    unknown = json.loads(invoke(*base).stdout)
    model, run, _ = specs_from_megatron_args(flags, world_size=8, mcore_version=tuple(map(int, version.split("."))))
    assert run.data_parallel_sharding_strategy == strategy
    same = doc["peak_allocated_bytes"] == unknown["peak_allocated_bytes"]
    assert same == (strategy == "optim_grads_params")
    if strategy == "no_shard":  # everything whole: what the line holds without Megatron-FSDP
        assert doc["peak_allocated_bytes"] > unknown["peak_allocated_bytes"]
        assert model_state({**flags, "--data-parallel-sharding-strategy": "no_shard"}) == model_state(FLAGS)


@pytest.mark.parametrize(
    "source",
    [["--preset", "llama3-8b"], ["--example"]],
)
def test_the_release_is_refused_where_it_changes_nothing(invoke, source):
    out = invoke("estimate_memory", *source, "--megatron-core-version", "0.17")
    assert out.exit_code == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "estimate_memory.py: error: --megatron-core-version applies to a --megatron-args launch line "
        "(Megatron-LM's flag defaults); drop it for this source"
    ]


def test_a_release_that_is_not_a_version_is_refused(tmp_path, invoke):
    script = tmp_path / "train.sh"
    script.write_text("torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4\n")
    out = invoke("estimate_memory", "--megatron-args", str(script), "--megatron-core-version", "latest")
    assert out.exit_code == 2 and "--megatron-core-version 'latest' is not a version" in out.stderr


def _fsdp_launch_line(tmp_path):
    """A Megatron-LM launch script with Megatron-FSDP and no sharding strategy named."""
    script = tmp_path / "train.sh"
    flags = {**FLAGS, "--use-megatron-fsdp": True, "--use-distributed-optimizer": True}
    script.write_text(
        "torchrun pretrain_gpt.py " + " ".join(f"{k} {v}" if v is not True else k for k, v in flags.items())
    )
    return script


def test_the_fsdp_option_replaces_the_unnamed_strategy_line(tmp_path, invoke):
    """--fsdp names optim_grads_params, so the reader's 'not given: no_shard' line must go."""
    import json

    script = _fsdp_launch_line(tmp_path)
    base = [
        "estimate_memory",
        "--megatron-args",
        str(script),
        "--gpus",
        "8",
        "--megatron-core-version",
        "0.17",
        "--json",
    ]
    without = json.loads(invoke(*base).stdout)["assumptions"]
    assert any("sharding-strategy not given: no_shard" in a for a in without)
    notes = json.loads(invoke(*base, "--fsdp").stdout)["assumptions"]
    assert not any("sharding-strategy not given" in a for a in notes)
    assert any("Megatron-FSDP optim_grads_params" in a for a in notes)


def test_runtime_memory_refuses_the_release_without_a_launch_line(invoke):
    from pathlib import Path

    smi = str(Path(__file__).resolve().parent.parent / "evals" / "files" / "nvidia_smi_c07_h8192_l4_tied_distopt.txt")
    out = invoke("runtime_memory", smi, "--megatron-core-version", "0.17")
    assert out.exit_code == 2 and "--megatron-core-version applies to a --megatron-args launch line" in out.stderr


def test_the_release_takes_megatron_lms_tag_spelling(tmp_path, invoke):
    """core_v0.17.0 (the tag the FSDP note names) reads as 0.17.0."""
    import json

    script = _fsdp_launch_line(tmp_path)
    base = ["estimate_memory", "--megatron-args", str(script), "--gpus", "8", "--json", "--megatron-core-version"]
    assert json.loads(invoke(*base, "core_v0.17.0").stdout) == json.loads(invoke(*base, "0.17.0").stdout)
