"""Transformer Engine's grouped-GEMM workspaces (estimate/device.py TE_GROUPED_GEMM_WORKSPACE_BYTES).

TE keeps a second set of cuBLAS workspaces, one per compute stream, once an MoE's experts run a
grouped GEMM (TEGroupedMLP with --moe-grouped-gemm): 4 x (32 MiB + 1 KiB) on Hopper. The dense
workspaces were counted; this set was not, and the grouped-GEMM MoE goldens were 3-10% low.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtune.estimate.device import TE_GROUPED_GEMM_WORKSPACE_BYTES
from memtune.estimate.estimator import estimate
from memtune.readers.megatron_args import specs_from_megatron_args
from memtune.units import MIB

DATA = Path(__file__).resolve().parent / "data" / "estimator"

MOE = {
    "--num-layers": 4,
    "--hidden-size": 1024,
    "--num-attention-heads": 16,
    "--ffn-hidden-size": 4096,
    "--seq-length": 2048,
    "--max-position-embeddings": 2048,
    "--micro-batch-size": 1,
    "--global-batch-size": 8,
    "--vocab-size": 32000,
    "--bf16": True,
    "--num-experts": 8,
    "--moe-router-topk": 2,
    "--expert-model-parallel-size": 8,
}


def workspace(flags: dict) -> int:
    model, run, _ = specs_from_megatron_args(flags, world_size=8)
    return estimate(model, run).stages[0].workspace


def test_the_size_is_four_hopper_workspaces():
    assert TE_GROUPED_GEMM_WORKSPACE_BYTES == 4 * (32 * MIB + 1024)


@pytest.mark.parametrize(
    "extra, counted",
    [
        ({"--moe-grouped-gemm": True}, True),
        ({}, False),  # SequentialMLP / TE linears per expert: the ordinary workspaces only
        ({"--moe-grouped-gemm": True, "--transformer-impl": "local"}, False),  # no TE grouped GEMM
    ],
)
def test_only_te_grouped_gemm_experts_hold_the_second_set(extra, counted):
    added = workspace({**MOE, **extra}) - workspace(MOE)
    assert added == (TE_GROUPED_GEMM_WORKSPACE_BYTES if counted else 0)
    model, run, _ = specs_from_megatron_args({**MOE, **extra}, world_size=8)
    said = any("grouped GEMM on Transformer Engine" in a for a in estimate(model, run).assumptions)
    assert said is counted


def test_a_dense_model_with_the_flag_holds_no_second_set():
    dense = {k: v for k, v in MOE.items() if "expert" not in k and "moe" not in k}
    assert workspace({**dense, "--moe-grouped-gemm": True}) == workspace(dense)


def test_the_golden_pair_that_differs_only_in_grouped_gemm_and_the_optimizer():
    """The two frozen-resume goldens peak the same above what stays allocated (their activations
    agree); the grouped one's static part is larger by about the workspace set."""
    rows = {r["case"]: r for r in json.loads((DATA / "megatron-lm-large-models.json").read_text())}
    grouped = rows["gpt3_mcore_te_tp2_pp1_frozen_resume_torch_dist_te_8experts2parallel_groupedGEMM [dgx_h100]"]
    plain = rows["gpt3_mcore_te_tp2_pp1_frozen_resume_torch_dist_te_8experts2parallel_dist_optimizer [dgx_h100]"]

    def transient(row: dict) -> int:
        return row["peak_allocated_bytes"] - row["allocated_after_step_max_bytes"]

    assert abs(transient(grouped) - transient(plain)) < 2 * MIB
    for row in (grouped, plain):
        model, run, _ = specs_from_megatron_args(row["megatron_args"], world_size=row["world_size"])
        err = estimate(model, run).stages[-1].allocated_bytes / row["peak_allocated_bytes"] - 1
        assert abs(err) < 0.03, (row["case"], err)


def test_not_stated_is_megatron_cores_default_and_the_estimate_says_what_it_would_add():
    """Megatron-Core's default is off; Bridge's MoE model bridges set it on. A config, preset or
    HF config that does not say is estimated without the set, with a line naming its size."""
    from memtune.readers.bridge_config import specs_from_bridge
    from memtune.spec.presets import load_preset

    preset = load_preset("qwen3-30b-a3b")
    sizes = {}
    for stated in (None, True, False):
        model_s = {"expert_model_parallel_size": 8} | ({} if stated is None else {"moe_grouped_gemm": stated})
        model, run, _ = specs_from_bridge({"model": model_s}, 8, preset)
        assert run.moe_grouped_gemm is stated
        est = estimate(model, run)
        sizes[stated] = est.stages[0].workspace
        counted = [a for a in est.assumptions if "grouped GEMM on Transformer Engine" in a]
        unstated = [a for a in est.assumptions if a.startswith("moe_grouped_gemm not stated")]
        assert (bool(counted), bool(unstated)) == (stated is True, stated is None)
    assert sizes[True] - sizes[None] == TE_GROUPED_GEMM_WORKSPACE_BYTES and sizes[None] == sizes[False]


def test_only_stages_that_hold_experts_keep_the_set():
    """A pipeline stage of dense layers never runs a grouped GEMM."""
    flags = {**MOE, "--num-layers": 8, "--moe-grouped-gemm": True, "--pipeline-model-parallel-size": 2}
    model, run, _ = specs_from_megatron_args(flags, world_size=16)
    stages = estimate(model, run).stages
    assert [s.workspace for s in stages] == [stages[0].workspace] * 2  # every stage has MoE layers
    dense_first = {**flags, "--moe-layer-freq": "([0]*4+[1]*4)"}
    model, run, _ = specs_from_megatron_args(dense_first, world_size=16)
    first, last = estimate(model, run).stages
    assert last.workspace - first.workspace == TE_GROUPED_GEMM_WORKSPACE_BYTES


def test_a_stage_that_holds_only_the_mtp_block_keeps_the_set(invoke):
    """MTP layers copy the last decoder layer's spec, so on DeepSeek-V3 their experts run the
    grouped GEMM too, even on a last stage with no decoder layer."""
    dump = Path(__file__).resolve().parent / "data" / "real-bridge" / "mb_dump_deepseek_v3_pretrain_h100_fp8_sc_v1.yaml"
    out = invoke(
        "estimate_memory",
        "--config",
        str(dump),
        "model.pipeline_model_parallel_layout=Et*20|t*20|t*21|mL",
        "model.pipeline_model_parallel_size=4",
        "model.virtual_pipeline_model_parallel_size=null",
        "--json",
    )
    stages = json.loads(out.stdout)["stages"]
    assert stages[-1]["layers"] == 0
    assert {s["components"]["workspace"] for s in stages} == {128 * MIB + TE_GROUPED_GEMM_WORKSPACE_BYTES}
