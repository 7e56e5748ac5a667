"""What an audit against Megatron Bridge's own perf skills (their measured results and the
Megatron-Core checks they cite) found wrong in the helpers, kept as tests.

Recompute settings Megatron-Core refuses at start-up together with other features
(memtune.spec.run_spec.start_refusals): the planner never proposes one, the estimate of a
user's run that has one leads with a WARNING. Each rule is one assert or ValueError of
Megatron-Core's TransformerConfig (checked at the Megatron-LM commit Megatron Bridge pins,
2a75ac12): EP all-to-all overlap refuses full recompute, the ``moe`` module and shared-expert
overlap; shared-expert overlap refuses the ``shared_experts`` module; Transformer Engine CUDA
graphs with the ``moe_router`` scope refuse ``moe``; fp8 delayed scaling refuses ``moe_act`` and
``layernorm``. Every rule is also tested with the nearest legal run, so a rule that fires on
everything fails here. Then optimizer CPU offload against the Bridge card's four measured points,
and what a second audit (Megatron-LM's own checks) found: moe_act needs grouped GEMM, EP overlap
needs EP > 1 and virtual stages with PP > 1, selective recompute takes no layer count, local
attention takes no context parallelism, and the Megatron-LM reader's loss kernel flag.
"""

from __future__ import annotations

import pytest

from memtune.estimate import planner as pl
from memtune.estimate import throughput_cost as tc
from memtune.estimate.estimator import estimate
from memtune.readers.bridge_config import specs_from_bridge
from memtune.spec.presets import load_preset
from memtune.spec.run_spec import RunSpec, start_refusals
from memtune.units import GIB

MOE_RUN = RunSpec(world_size=16, tp=2, pp=1, ep=4, mbs=1, gbs=8, seq_length=4096, sequence_parallel=True)


def selective(*modules: str, **kw: object) -> RunSpec:
    return MOE_RUN.with_(recompute_granularity="selective", recompute_modules=modules, **kw)


@pytest.mark.parametrize(
    ("run", "refused"),
    [
        (
            MOE_RUN.with_(
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=1,
                overlap_moe_expert_parallel_comm=True,
            ),
            "full recompute",
        ),
        (selective("moe", overlap_moe_expert_parallel_comm=True), "recompute module moe"),
        (
            MOE_RUN.with_(overlap_moe_expert_parallel_comm=True, moe_shared_expert_overlap=True),
            "moe_shared_expert_overlap",
        ),
        (selective("shared_experts", moe_shared_expert_overlap=True), "shared_experts"),
        (selective("moe", cuda_graph_scope=("moe_router", "moe_preprocess")), "moe_router"),
        (selective("moe_act", fp8="delayed"), "fp8 delayed"),
        (selective("layernorm", fp8="delayed"), "fp8 delayed"),
        (MOE_RUN.with_(world_size=32, pp=2, overlap_moe_expert_parallel_comm=True), "virtual pipeline stages"),
        (MOE_RUN.with_(world_size=4, ep=1, overlap_moe_expert_parallel_comm=True), "expert parallelism"),
        (MOE_RUN.with_(overlap_moe_expert_parallel_comm=True, moe_token_dispatcher_type="allgather"), "dispatcher"),
    ],
)
def test_each_refusal_fires_on_its_combination(run: RunSpec, refused: str) -> None:
    found = start_refusals(run)
    assert len(found) == 1 and refused in found[0], found


@pytest.mark.parametrize(
    "run",
    [
        MOE_RUN,
        selective("moe_act", "layernorm", overlap_moe_expert_parallel_comm=True),  # the inner modules are fine
        selective("moe"),  # no overlap
        selective("shared_experts"),
        selective("moe", cuda_graph_scope=("attn",)),
        selective("moe_act", fp8="tensorwise"),  # only delayed scaling refuses
        selective("moe", fp8="delayed"),
        MOE_RUN.with_(world_size=32, pp=2, vpp=2, overlap_moe_expert_parallel_comm=True),
        MOE_RUN.with_(overlap_moe_expert_parallel_comm=True, moe_token_dispatcher_type="flex"),
        MOE_RUN.with_(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
        # recompute_modules only counts under selective granularity
        MOE_RUN.with_(recompute_modules=("moe",), overlap_moe_expert_parallel_comm=True),
    ],
)
def test_the_nearest_legal_runs_pass(run: RunSpec) -> None:
    assert start_refusals(run) == []


@pytest.fixture(scope="module")
def table() -> tc.CostTable:
    return tc.load_costs()


def test_the_planner_never_proposes_a_refused_recompute(table: tc.CostTable) -> None:
    """Bridge's Qwen3-30B-A3B recipe turns EP overlap on: every fitting recompute row the
    planner used to offer there (moe, full) was refused by Megatron-Core at start-up."""
    model = load_preset("qwen3-30b-a3b")
    base = MOE_RUN.with_(seq_length=16384, overlap_moe_expert_parallel_comm=True, fp8="delayed")
    plan = pl.plan(model, base, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
    offered = [e.candidate.run for e in (*plan.ranked, *plan.no_saving)]
    assert offered
    assert all(start_refusals(run) == [] for run in offered)
    refused = [e for e in plan.rejected if any("Megatron-Core refuses it" in r for r in e.rejected)]
    assert any(e.candidate.run.recompute_granularity == "full" for e in refused)
    assert any("moe" in e.candidate.run.recompute_modules for e in refused)


def test_the_estimate_of_a_refused_run_leads_with_the_refusal() -> None:
    model = load_preset("qwen3-30b-a3b")
    est = estimate(model, selective("moe_act", fp8="delayed"))
    assert est.assumptions[0].startswith("WARNING: Megatron-Core refuses to start this run: recompute modules")
    assert not any("refuses to start" in a for a in estimate(model, selective("moe_act")).assumptions)


def test_bridge_reader_reads_the_overlaps_and_keeps_an_empty_module_list() -> None:
    base = load_preset("qwen3-30b-a3b")
    common = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 4, "recompute_granularity": "selective"}
    _, run, _ = specs_from_bridge(
        {
            "model": {**common, "recompute_modules": [], "moe_shared_expert_overlap": True},
            "comm_overlap": {"overlap_moe_expert_parallel_comm": True},
        },
        world_size=8,
        base=base,
    )
    assert run.recompute_modules == ()  # an explicit empty list is a control, not [core_attn]
    assert run.overlap_moe_expert_parallel_comm and run.moe_shared_expert_overlap
    _, run, _ = specs_from_bridge({"model": common}, world_size=8, base=base)
    assert run.recompute_modules == ("core_attn",)  # unset: Megatron-Core's default
    assert not run.overlap_moe_expert_parallel_comm and not run.moe_shared_expert_overlap


#: The smallest Megatron-LM flag set the reader builds a model from (tests add what they read).
SMALL_GPT_FLAGS = {
    "--num-layers": 4,
    "--hidden-size": 1024,
    "--num-attention-heads": 8,
    "--seq-length": 2048,
    "--max-position-embeddings": 2048,
    "--micro-batch-size": 1,
}


def test_megatron_args_reader_reads_the_overlaps() -> None:
    from memtune.readers.megatron_args import specs_from_megatron_args

    flags = {
        **SMALL_GPT_FLAGS,
        "--num-experts": 8,
        "--expert-model-parallel-size": 8,
        "--overlap-moe-expert-parallel-comm": True,
        "--moe-token-dispatcher-type": "alltoall",  # Megatron-LM's default, allgather, is refused with it
        "--moe-shared-expert-overlap": True,
        "--recompute-granularity": "selective",
        "--recompute-modules": "moe",
        "--bf16": True,
    }
    _, run, _ = specs_from_megatron_args(flags, world_size=8)
    assert run.overlap_moe_expert_parallel_comm and run.moe_shared_expert_overlap
    assert len(start_refusals(run)) == 2


# ------------------------------------------------------------ optimizer CPU offload (same audit)
#: Megatron Bridge's CPU-offloading card (skills/nemo-mbridge-perf-cpu-offloading/card.yaml,
#: measured_results, added in Bridge a59fb46ad): Qwen3-30B-A3B pretraining, TP2 PP2 EP4 on 16 x H100,
#: seq 4096, full uniform recompute x1, precision-aware optimizer off, fp32 main grads; allocated GB
#: (1e9 bytes) by optimizer_offload_fraction.
BRIDGE_OFFLOAD_CARD_GB = {0.25: 43.4, 0.5: 39.6, 0.75: 35.6, 1.0: 32.0}


def offload_run(fraction: float, precision_aware: bool = False) -> RunSpec:
    return RunSpec(
        world_size=16, tp=2, pp=2, ep=4, etp=1, mbs=1, gbs=8, seq_length=4096, sequence_parallel=True,
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
        use_distributed_optimizer=True, grad_reduce_in_fp32=True, cross_entropy_loss_fusion=True,
        cross_entropy_fusion_impl="te", optimizer_cpu_offload=fraction > 0, optimizer_offload_fraction=fraction,
        use_precision_aware_optimizer=precision_aware,
    )  # fmt: skip


def test_optimizer_offload_moves_only_the_moments_without_the_precision_aware_optimizer() -> None:
    """The fp32 main shard stays on the GPU (HybridDeviceOptimizer steps a host copy): 8 of 12
    bytes leave. The card's four points must then agree within 4%; moving all 12 bytes (the old
    model) put the 100% point 21% low."""
    model = load_preset("qwen3-30b-a3b")
    for fraction, measured_gb in BRIDGE_OFFLOAD_CARD_GB.items():
        ours = estimate(model, offload_run(fraction)).peak_allocated_bytes / 1e9
        assert ours == pytest.approx(measured_gb, rel=0.04), (fraction, ours)
    kept = estimate(model, offload_run(0.0)).stages[0].optimizer
    moments_gone = estimate(model, offload_run(1.0)).stages[0].optimizer
    assert moments_gone == pytest.approx(kept / 3, rel=1e-6)  # the 4-byte main shard of 12 bytes
    # With the precision-aware optimizer the main shard is not built on the GPU: all of it leaves.
    assert estimate(model, offload_run(1.0, precision_aware=True)).stages[0].optimizer == 0


# ------------------------------------------------------------ second audit: Megatron-LM's own checks
def test_moe_act_needs_grouped_gemm_when_the_run_says_it_is_off() -> None:
    """``moe_act in recompute_modules is only supported with moe_grouped_gemm`` (ValueError).
    Megatron-LM's flag is store_true (off unless given); a Bridge config that does not say is
    left unknown, and the check stays quiet."""
    assert "moe_grouped_gemm" in start_refusals(selective("moe_act", moe_grouped_gemm=False))[0]
    assert start_refusals(selective("moe_act", moe_grouped_gemm=True)) == []
    assert start_refusals(selective("moe_act")) == []  # not stated


def test_megatron_args_reader_reads_the_loss_kernel_and_grouped_gemm() -> None:
    from memtune.readers.megatron_args import specs_from_megatron_args

    flags = {**SMALL_GPT_FLAGS, "--bf16": True, "--cross-entropy-loss-fusion": True}
    _, run, _ = specs_from_megatron_args(flags, world_size=1)
    assert run.cross_entropy_fusion_impl == "native" and run.moe_grouped_gemm is False
    _, run, _ = specs_from_megatron_args(
        {**flags, "--cross-entropy-fusion-impl": "te", "--moe-grouped-gemm": True}, world_size=1
    )
    assert run.cross_entropy_fusion_impl == "te" and run.moe_grouped_gemm is True


def test_the_planner_keeps_ep_overlap_startable(table: tc.CostTable) -> None:
    """With EP all-to-all overlap Megatron-Core needs EP > 1 and virtual stages whenever PP > 1:
    a 'PP 1->4, no VPP' rung (the fitting rung before) or 'EP 8->1' would not start."""
    model = load_preset("qwen3-30b-a3b")
    base = RunSpec(
        world_size=32, ep=8, mbs=1, gbs=64, seq_length=8192, overlap_moe_expert_parallel_comm=True,
        moe_grouped_gemm=True, use_distributed_optimizer=True,
    )  # fmt: skip
    plan = pl.plan(model, base, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
    offered = [e.candidate.run for e in (*plan.ranked, *plan.no_saving)]
    assert offered
    assert all(r.ep > 1 and (r.pp == 1 or r.vpp_chunks > 1) for r in offered)
    assert any("needs virtual pipeline stages" in x for e in plan.rejected for x in e.rejected)


def test_switching_full_to_selective_clears_the_layer_count(table: tc.CostTable) -> None:
    """Megatron-Core raises when selective recompute has recompute_num_layers set."""
    model = load_preset("llama3-8b")
    base = RunSpec(
        world_size=8, tp=2, mbs=1, gbs=16, seq_length=8192, sequence_parallel=True,
        recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1,
    )  # fmt: skip
    plan = pl.plan(model, base, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
    selective_runs = [
        e.candidate.run
        for e in (*plan.ranked, *plan.rejected, *plan.no_saving)
        if e.candidate.run.recompute_granularity == "selective"
    ]
    assert selective_runs
    assert all(r.recompute_method is None and r.recompute_num_layers is None for r in selective_runs)


def test_context_parallelism_is_not_offered_to_local_attention(table: tc.CostTable) -> None:
    model = load_preset("llama3-8b")
    base = RunSpec(world_size=8, tp=1, mbs=1, gbs=16, seq_length=32768, transformer_impl="local")
    plan = pl.plan(model, base, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
    assert not any(e.candidate.run.cp > 1 for e in (*plan.ranked, *plan.no_saving))
    cp = [e for e in plan.rejected if e.candidate.run.cp > 1]
    assert cp and all(any("local attention" in r for r in e.rejected) for e in cp)


_SCRIPT = (
    "#!/bin/bash\n{export}"
    "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --num-layers 32 --hidden-size 4096 "
    "--num-attention-heads 32 --num-query-groups 8 --group-query-attention --ffn-hidden-size 14336 --swiglu "
    "--seq-length 32768 --max-position-embeddings 32768 --micro-batch-size 1 --global-batch-size 64 --bf16 "
    "--use-distributed-optimizer --vocab-size 128256\n"
)


def test_a_launch_script_that_exports_expandable_segments_is_estimated_with_it(tmp_path) -> None:
    """The second audit's GB200 run was called DOES NOT FIT partly because the script's
    PYTORCH_CUDA_ALLOC_CONF never reached the estimate: the reserve of the default allocator
    (about 7-12%) was charged where expandable segments keep about 2-3%, and the planner
    told the user to set what the script already sets."""
    from helper_cli import invoke_json

    with_es = tmp_path / "with_es.sh"
    with_es.write_text(_SCRIPT.format(export="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"))
    without = tmp_path / "without.sh"
    without.write_text(_SCRIPT.format(export=""))
    other = tmp_path / "other.sh"
    other.write_text(_SCRIPT.format(export="export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512\n"))
    est = {p.stem: invoke_json("estimate_memory", "--megatron-args", str(p), "--gpu", "H100-80GB", "--json")
           for p in (with_es, without, other)}  # fmt: skip
    assert est["with_es"]["peak_allocated_bytes"] == est["without"]["peak_allocated_bytes"]
    assert est["with_es"]["peak_bytes"] < est["without"]["peak_bytes"] == est["other"]["peak_bytes"]
    assert any("allocator from the script" in a for a in est["with_es"]["assumptions"])
    plans = {p.stem: invoke_json("plan_memory", "--megatron-args", str(p), "--gpu", "H100-80GB", "--json")
             for p in (with_es, without)}  # fmt: skip
    changes = {k: [r["change"] for r in d["ladder"]["rungs"]] for k, d in plans.items()}
    assert changes["without"][0] == "set expandable segments"
    assert "set expandable segments" not in changes["with_es"]


def test_the_megatron_fsdp_change_carries_what_megatron_lm_asserts(table: tc.CostTable) -> None:
    """Megatron-LM asserts the fsdp_dtensor checkpoint format and CUDA_DEVICE_MAX_CONNECTIONS not 1
    when Megatron-FSDP is on; the printed change must include both, and Muon is refused."""
    model = load_preset("llama3-8b")
    base = RunSpec(world_size=8, mbs=1, gbs=64, seq_length=8192)
    plan = pl.plan(model, base, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
    fsdp = [e for e in (*plan.ranked, *plan.no_saving, *plan.rejected) if e.candidate.run.use_megatron_fsdp]
    assert fsdp
    change = pl.exact_change(base, fsdp[0].candidate)
    assert "--ckpt-format fsdp_dtensor" in change["megatron_args"]
    assert any("CUDA_DEVICE_MAX_CONNECTIONS" in line for line in change["env"])
    muon = pl.plan(
        model, base.with_(optimizer="muon"), pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table
    )
    refused = [e for e in muon.rejected if e.candidate.run.use_megatron_fsdp]
    assert refused and all(any("Megatron-FSDP takes only" in r for r in e.rejected) for e in refused)
