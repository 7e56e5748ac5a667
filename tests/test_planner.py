"""The planner: legality with reasons, ranking, the seed's measured ordering, nothing-fits."""

from __future__ import annotations

from itertools import pairwise

import pytest

from memtune.estimate import planner as pl
from memtune.estimate import throughput_cost as tc
from memtune.spec import model_spec as ms
from memtune.spec.run_spec import RunSpec
from memtune.units import GIB
from test_throughput_cost import llama8b


# Defined here rather than imported from test_throughput_cost: an imported fixture is shadowed by
# every test parameter of the same name (ruff F811).
@pytest.fixture(scope="module")
def table() -> tc.CostTable:
    return tc.load_costs()


@pytest.fixture(scope="module")
def seed(table: tc.CostTable) -> tuple[ms.ModelSpec, RunSpec]:
    return tc.anchor_workload(table.raw, "llama3_70b_sft_32xh100")


def settings(**kw) -> pl.PlanSettings:
    base = {"gpu_memory_bytes": 80 * GIB, "headroom_bytes": 8 * GIB}
    base.update(kw)
    return pl.PlanSettings(**base)


@pytest.fixture(scope="module")
def seed_plan(seed, table) -> pl.Plan:
    model, run = seed
    return pl.plan(model, run, settings(), table)


def titles(evaluated) -> list[str]:
    return [e.candidate.title for e in evaluated]


def rejected(plan: pl.Plan) -> dict[str, tuple[str, ...]]:
    return {e.candidate.title: e.rejected for e in plan.rejected}


# ------------------------------------------------------------- the seed's measured ordering
def test_seed_expandable_segments_comes_first(seed_plan):
    first = seed_plan.ranked[0]
    assert first.candidate.expandable
    assert first.cost.change == 0.0 and first.cost.kind == "measured"
    assert seed_plan.best is first


def test_seed_pp8_ranks_above_tp8_and_tp8_is_last(seed_plan):
    names = titles(seed_plan.ranked)
    pp8, tp8 = names.index("PP 4->8, VPP 5"), names.index("TP 4->8")
    assert pp8 < tp8
    # TP is the last priced row; only changes without a price (assumed or unknown) follow it
    assert all(not pl.priced(e.cost) for e in seed_plan.ranked[tp8 + 1 :])
    assert all(pl.priced(e.cost) for e in seed_plan.ranked[: tp8 + 1])
    assert seed_plan.ranked[pp8].cost.change == pytest.approx(-0.059)
    assert seed_plan.ranked[tp8].cost.change == pytest.approx(-0.284)


def test_seed_mlp_recompute_sits_between_pp8_and_tp8(seed_plan):
    names = titles(seed_plan.ranked)
    mlp = names.index("recompute selective [core_attn, mlp] (adds mlp to selective [core_attn])")
    assert names.index("PP 4->8, VPP 5") < mlp < names.index("TP 4->8")


def test_seed_cpu_offloading_is_rejected_for_pp(seed_plan):
    offload = [e for e in seed_plan.rejected if e.candidate.category == "offload"]
    assert offload, "CPU offloading must be listed as rejected, not silently dropped"
    for e in offload:
        # Megatron-Core's exact error text, so a user searching for it finds the rejection.
        assert any(
            "Currently there is no support for Pipeline parallelism with CPU offloading" in r
            and "pipeline_model_parallel_size > 1" in r
            for r in e.rejected
        )
    assert not [e for e in seed_plan.ranked if e.candidate.category == "offload"]


def test_seed_rejections_name_the_constraint(seed_plan):
    r = rejected(seed_plan)
    assert any("num_query_groups 8 is not divisible by TP 16" in x for x in r["TP 4->16"])
    assert any("world size 32 is not divisible" in x for x in r["CP 1->4"])
    assert any(
        "full-iteration CUDA graphs" in x for x in r["recompute full uniform x1 (replaces selective [core_attn])"]
    )


def test_every_ranked_row_fits_and_lowers_memory(seed_plan):
    limit = seed_plan.settings.limit_bytes
    for e in seed_plan.ranked:
        assert e.peak_bytes <= limit
        assert e.candidate.expandable or e.peak_bytes < seed_plan.baseline.peak_bytes
    for tier in (0, 1, 2):  # priced, then assumed, then unknown; each cheapest first
        costs = [min(0.0, e.cost.change) for e in seed_plan.ranked if pl.evidence_tier(e.cost) == tier]
        assert all(a >= b - 1e-3 for a, b in pairwise(costs))  # ranked to 0.1%
    tiers = [pl.evidence_tier(e.cost) for e in seed_plan.ranked]
    assert tiers == sorted(tiers)
    assert seed_plan.ranked[-1].candidate.run.use_megatron_fsdp  # no price at all: last, with its reason


def test_a_predicted_speed_up_does_not_outrank_the_free_measured_fix(seed_plan):
    first = seed_plan.ranked[0]
    assert first.candidate.expandable
    faster = pl.Evaluated(
        first.candidate,
        peak_bytes=first.peak_bytes - GIB,
        fits=True,
        reduces_memory=True,
        cost=tc.Cost(change=0.05, kind="calibrated", evidence=("model",)),
    )
    s = seed_plan.settings
    assert pl.rank_key(first, s, cap_gain=True) < pl.rank_key(faster, s, cap_gain=True)
    assert pl.rank_key(faster, s) < pl.rank_key(first, s)  # the sweep ranks true speed


def test_changes_that_raise_memory_are_not_offered(seed_plan):
    assert "TP 4->2" in titles(seed_plan.no_saving)
    assert "TP 4->2" not in titles(seed_plan.ranked)


# ------------------------------------------------------------- environment-dependent answers
def test_expandable_already_set_is_not_offered(seed, table):
    model, run = seed
    plan = pl.plan(model, run, settings(expandable_segments=True), table)
    assert not any(e.candidate.expandable for e in plan.ranked)
    assert plan.best.candidate.title != "set expandable segments"


def test_expandable_with_nccl_user_buffers_is_rejected(seed, table):
    model, run = seed
    plan = pl.plan(model, run.with_(use_nccl_ub=True), settings(), table)
    reasons = rejected(plan)["set expandable segments"]
    assert any("NCCL user-buffer" in x for x in reasons)


def test_exact_change_spells_out_bridge_and_megatron_settings(seed, seed_plan):
    _, run = seed
    pp8 = next(e for e in seed_plan.ranked if e.candidate.title == "PP 4->8, VPP 5")
    change = pl.exact_change(run, pp8.candidate)
    assert change["bridge_overrides"] == ["model.pipeline_model_parallel_size=8"]
    assert change["megatron_args"] == ["--pipeline-model-parallel-size 8"]
    first = pl.exact_change(run, seed_plan.best.candidate)
    assert first["env"][0] == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


# ------------------------------------------------------------- legality on other runs
def test_vpp_divisibility_is_a_rejection_reason(table):
    run = RunSpec(
        world_size=16,
        tp=2,
        pp=2,
        vpp=8,
        mbs=1,
        gbs=64,
        seq_length=4096,
        sequence_parallel=True,
        use_distributed_optimizer=True,
    )
    plan = pl.plan(llama8b(), run, settings(), table, sweep_if_needed=False)
    reasons = rejected(plan)["PP 2->8, VPP 8"]
    assert any("not divisible by virtual_pipeline_model_parallel_size 8" in x for x in reasons)


def test_cpu_offloading_is_legal_at_pp1_and_turns_recompute_off(table):
    run = RunSpec(
        world_size=8, tp=8, pp=1, mbs=1, gbs=8, seq_length=8192, sequence_parallel=True, use_distributed_optimizer=True
    )
    plan = pl.plan(llama8b(), run, settings(), table, sweep_if_needed=False)
    assert "CPU offloading 8 layer(s)" not in rejected(plan)
    offload = [e for e in plan.ranked + plan.not_fitting if e.candidate.category == "offload"]
    assert offload and all(e.cost.change < 0 for e in offload)
    with_recompute = pl.plan(
        llama8b(), run.with_(recompute_granularity="selective"), settings(), table, sweep_if_needed=False
    )
    row = next(e for e in with_recompute.ranked + with_recompute.not_fitting if e.candidate.category == "offload")
    assert row.candidate.run.recompute_granularity is None and "recompute off" in row.candidate.title


def test_offloading_with_recompute_or_cuda_graphs_names_megatrons_reason():
    run = RunSpec(
        world_size=8,
        tp=8,
        pp=1,
        mbs=1,
        gbs=8,
        seq_length=8192,
        cpu_offloading=True,
        cpu_offloading_num_layers=4,
        recompute_granularity="selective",
        cuda_graph_scope=("mlp",),
    )
    reasons = pl.extra_violations(llama8b(), run.with_(cpu_offloading=False), run, settings())
    assert any("activation recomputation" in r for r in reasons)
    assert any("CUDA graphs" in r for r in reasons)


def test_expert_parallel_must_divide_the_experts(table):
    mixtral = ms.ModelSpec(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=32000,
        num_moe_experts=8,
        moe_router_topk=2,
        name="mixtral-like",
    )
    run = RunSpec(
        world_size=64,
        tp=2,
        pp=4,
        ep=4,
        mbs=1,
        gbs=64,
        seq_length=4096,
        sequence_parallel=True,
        use_distributed_optimizer=True,
    )
    plan = pl.plan(mixtral, run, settings(), table, sweep_if_needed=False)
    assert any("does not divide num_moe_experts 8" in x for x in rejected(plan)["EP 4->16"])


def test_lora_regather_without_sequence_parallel_is_rejected(table):
    run = RunSpec(world_size=8, tp=1, pp=1, mbs=1, gbs=8, seq_length=8192, peft="lora")
    plan = pl.plan(llama8b(), run, settings(), table, sweep_if_needed=False)
    assert any("needs sequence parallelism" in x for x in rejected(plan)["LoRA input re-gather"])


def test_lora_regather_is_costed_from_its_memory_saving(table):
    run = RunSpec(world_size=8, tp=2, pp=1, mbs=1, gbs=8, seq_length=8192, peft="lora", sequence_parallel=True)
    plan = pl.plan(llama8b(), run, settings(gpu_memory_bytes=400 * GIB), table, sweep_if_needed=False)
    row = next(e for e in plan.ranked if e.candidate.category == "peft")
    assert -0.0674 - 1e-9 <= row.cost.change <= -0.0034 + 1e-9
    assert row.peak_bytes < plan.baseline.peak_bytes


# ------------------------------------------------------------- nothing fits / combinations
def test_nothing_fits_is_an_answer_with_the_closest_candidates(seed, table):
    model, run = seed
    plan = pl.plan(model, run, settings(gpu_memory_bytes=20 * GIB, headroom_bytes=0), table)
    assert plan.best is None and not plan.ranked and not plan.combined
    assert plan.not_fitting
    peaks = [e.peak_bytes for e in plan.not_fitting]
    assert peaks == sorted(peaks) and peaks[0] > 20 * GIB


def test_when_no_single_step_fits_the_sweep_finds_a_combination(table):
    """Synthetic memory model: only doubling both TP and PP brings the peak down enough."""
    model = llama8b()
    run = RunSpec(
        world_size=64,
        tp=2,
        pp=2,
        mbs=1,
        gbs=64,
        seq_length=4096,
        sequence_parallel=True,
        use_distributed_optimizer=True,
    )

    def fake(m, r, expandable):
        return 15 * GIB if (r.tp >= 4 and r.pp >= 4) else 30 * GIB

    plan = pl.plan(
        model,
        run,
        settings(gpu_memory_bytes=20 * GIB, headroom_bytes=0, expandable_segments=True),
        table,
        estimator=fake,
    )
    assert not plan.ranked
    assert plan.combined, "the sweep must find the TP x PP combination"
    best = plan.combined[0].candidate.run
    assert best.tp >= 4 and best.pp >= 4


def ranked_change(e: pl.Evaluated) -> float:
    """The change the ranking uses: a gain resting on an assumption or unknown counts as 0."""
    unsure = e.cost.kind in ("assumption", "unknown") or e.cost.change < 0.005  # gains under 0.5% tie with free
    return min(0.0, e.cost.change) if unsure else e.cost.change


def test_sweep_ranks_assumed_gains_as_zero_but_shows_them(seed, table):
    model, run = seed
    plan = pl.plan_sweep(model, run, settings(), table)
    unsure = [e for e in plan.ranked if e.cost.kind in ("assumption", "unknown") and e.cost.change > 0.005]
    assert unsure, "the seed sweep offers combinations whose speed-up rests on an assumption"
    free = next(i for i, e in enumerate(plan.ranked) if e.candidate.expandable)
    assert plan.ranked[free].cost.kind == "measured"
    # only priced predicted speed-ups beyond the 0.5% resolution may lead the free measured fix
    assert all(pl.priced(e.cost) and ranked_change(e) > 0 for e in plan.ranked[:free])
    position = {id(e): i for i, e in enumerate(plan.ranked)}
    for e in unsure:
        # every better-evidenced row at >= 0% sits above it, whatever its own predicted gain
        above = [
            o
            for o in plan.ranked
            if o.cost.kind in ("measured", "calibrated", "first-principles") and o.cost.change >= -1e-4
        ]
        assert all(position[id(o)] < position[id(e)] for o in above)
    for tier in (0, 1, 2):
        changes = [ranked_change(e) for e in plan.ranked if pl.evidence_tier(e.cost) == tier]
        assert all(a >= b - 1e-3 for a, b in pairwise(changes))
    from memtune.estimate import plan_report

    text = plan_report.to_text(plan, 60, [])
    assert f"{unsure[0].cost.change * 100:+.1f}%" in text  # the number is still shown


#: Llama3-8B TP2 PP2 DP4 with SP and the distributed optimizer: the sweep tests' starting run.
SWEEP_RUN = RunSpec(
    world_size=16, tp=2, pp=2, mbs=2, gbs=64, seq_length=4096, sequence_parallel=True, use_distributed_optimizer=True
)


def test_sweep_counts_what_it_decides_and_ranks_cheapest_first(table):
    model = llama8b()
    result = pl.sweep(model, SWEEP_RUN, settings(), table)
    assert result.space > 100 and result.layouts > 10
    assert 0 < result.estimates < result.space  # the bound decides part of the space
    assert result.fitting
    for tier in (0, 1, 2):  # priced rows first, then assumed, then unknown; each cheapest first
        costs = [ranked_change(e) for e in result.fitting if pl.evidence_tier(e.cost) == tier]
        assert all(a >= b - 1e-3 for a, b in pairwise(costs))  # ranked to 0.1%
    tiers = [pl.evidence_tier(e.cost) for e in result.fitting]
    assert tiers == sorted(tiers)
    assert all(e.cost.evidence for e in result.fitting)


@pytest.mark.parametrize("extra, memory", [({}, 30), ({"cuda_graph_scope": ("mlp",)}, 30), ({}, 18), ({}, 12)])
def test_sweep_pruning_does_not_change_the_answer(table, extra, memory):
    """Branch-and-bound must find the same best configuration as trying everything
    (also when full recompute is illegal, and when memory is tight)."""
    model = llama8b()
    run = SWEEP_RUN.with_(seq_length=8192, **extra)
    s = settings(gpu_memory_bytes=memory * GIB, headroom_bytes=0)
    result = pl.sweep(model, run, s, table)
    ev = pl.Evaluator(model, run, s, table)
    base_peak = ev.baseline().peak_bytes
    module_cost = {
        m: tc.step_terms(model, run.with_(recompute_granularity="selective", recompute_modules=(m,)), table)[
            "recompute"
        ]
        for m in pl.recompute_modules_for(model, run)
    }
    rcs = [{"recompute_granularity": None}] + pl.recompute_options(model, run, module_cost)
    best = None
    for layout in pl.sweep_layouts(model, run, s):
        for opt in pl._optimizer_options(run):
            for rc in rcs:
                cand = layout.with_(**opt, **rc)
                if cand == run or pl.rs.violations(model, cand) or pl.extra_violations(model, run, cand, s):
                    continue
                peak = ev.peak(cand, False)
                if peak <= s.limit_bytes and (peak < base_peak or base_peak > s.limit_bytes):
                    change = tc.step_time(model, run, table) / tc.step_time(model, cand, table) - 1
                    if best is None or change > best[0] + 1e-9:
                        best = (change, cand)
    if best is None:
        assert not result.fitting
        return
    assert result.fitting
    # the fastest row is found (the ranking may then put a better-evidenced row above it)
    assert max(e.cost.change for e in result.fitting) == pytest.approx(best[0], abs=1e-3)


def test_uneven_split_makes_a_prime_layer_count_pipelineable():
    deep = ms.ModelSpec(num_layers=61, hidden_size=1024, num_attention_heads=8, vocab_size=1000)
    split = pl.stage_split(deep, 16)
    last = split["num_layers_in_last_pipeline_stage"]
    assert last is not None and (61 - last) % 15 == 0
    assert pl.stage_split(deep, 1) == {
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
    }


# ------------------------------------------------------------- unknown costs
def test_seed_megatron_fsdp_cost_is_unknown_not_zero(seed_plan):
    fsdp = next(e for e in seed_plan.ranked if e.candidate.run.use_megatron_fsdp)
    assert fsdp.cost.kind == tc.UNKNOWN and not fsdp.cost.known
    text = " ".join(fsdp.cost.evidence)
    assert "unknown" in text and "Varies" in text
    # Megatron Bridge's FSDP guide lists PP as supported (code-supported, not benchmark-proven):
    # a caveat on the cost, not a rejection
    assert "PP > 1" in text
    assert not any("FSDP" in t for t in rejected(seed_plan))
    # among rows whose (capped) change rounds the same, every known cost ranks first
    same = [e for e in seed_plan.ranked if round(min(0.0, e.cost.change), 3) == round(min(0.0, fsdp.cost.change), 3)]
    assert same[-1] is fsdp and len(same) > 1


def test_unknown_ranks_after_estimates_and_measurements_of_the_same_size(seed_plan):
    e = seed_plan.ranked[0]
    s = seed_plan.settings

    def with_kind(kind):
        return pl.Evaluated(
            e.candidate,
            peak_bytes=e.peak_bytes,
            fits=True,
            reduces_memory=True,
            cost=tc.Cost(change=-0.01, kind=kind, evidence=("x",)),
        )

    keys = [pl.rank_key(with_kind(k), s) for k in ("measured", "first-principles", "assumption", tc.UNKNOWN)]
    assert keys == sorted(keys) and keys[-1] > keys[-2]


def test_a_change_no_factor_prices_is_unknown(table):
    model = llama8b()
    base = RunSpec(world_size=8, tp=2, mbs=1, gbs=8, seq_length=4096, sequence_parallel=True)
    cost = tc.throughput_change(model, base, base.with_(attention_dropout=0.1), table)
    assert cost.kind == tc.UNKNOWN and not cost.known and cost.evidence[0].startswith("unknown")


# ------------------------------------------------------------- issue 25: honest recompute rungs
def test_a_recompute_rung_keeps_what_the_run_already_recomputes(seed_plan, seed):
    """The seed run recomputes [core_attn]: a selective rung adds to it, and says so; a rung
    that drops it (full recompute) says what it replaces. None silently swaps core_attn out."""
    _model, base = seed
    assert base.recompute_modules == ("core_attn",)
    evaluated = [*seed_plan.ranked, *seed_plan.rejected, *seed_plan.no_saving]
    recompute = [e.candidate for e in evaluated if e.candidate.category == "recompute"]
    assert recompute
    for cand in recompute:
        if cand.run.recompute_granularity == "selective":
            assert "core_attn" in cand.run.recompute_modules, cand.title
            assert "(adds " in cand.title and "to selective [core_attn])" in cand.title, cand.title
        else:
            assert cand.title.endswith("(replaces selective [core_attn])"), cand.title
    added = [e for e in seed_plan.ranked if "(adds " in e.candidate.title]
    assert added and all(e.cost is not None and e.cost.change < 0 for e in added)  # never reads as a gain
    # The seed model is dense on the TE spec: its norms are fused, layernorm recompute re-runs nothing.
    assert not any("layernorm" in c.run.recompute_modules for c in recompute), [c.title for c in recompute]


def test_a_change_that_saves_nothing_is_not_offered(table):
    """Flash attention keeps only softmax statistics: core_attn recompute saves < 0.5% and is
    listed as saving nothing, never ranked or climbed."""
    from memtune.estimate import ladder as ld
    from memtune.spec.presets import load_preset

    model = load_preset("llama3-8b")
    run = RunSpec(world_size=8, tp=2, mbs=2, gbs=64, seq_length=8192, sequence_parallel=True)
    s = settings(gpu_memory_bytes=40 * GIB, headroom_bytes=4 * GIB)
    plan = pl.plan(model, run, s, table)
    core_attn = "recompute selective [core_attn]"
    assert core_attn in titles(plan.no_saving)
    assert core_attn not in titles(plan.ranked)
    assert core_attn not in [r.title for r in ld.climb(model, run, s, table).rungs]


# ------------------------------------------------------------- VPP alone is not a memory fix
def test_seed_vpp_changes_alone_are_not_offered_as_memory_fixes(seed_plan):
    """The seed measured VPP 5->10 2.4% *above* VPP 5 where the schedule term says 1.3% below:
    a VPP-only change saving less than that disagreement is not a rung (SKILL.md: VPP is not a
    memory fix), while PP changes that also move the chunking stay on the usual bar."""
    ranked, no_saving = titles(seed_plan.ranked), titles(seed_plan.no_saving)
    assert "VPP 5->10" in no_saving and "VPP 5->10" not in ranked
    assert not [t for t in ranked if t.startswith("VPP ")]
    assert "PP 4->8, VPP 5" in ranked


def test_min_saving_share_is_the_vpp_bar_only_when_vpp_alone_changes(seed):
    _, run = seed
    assert pl.min_saving_share(run, run.with_(vpp=10)) == pl.VPP_ONLY_MIN_SAVING_SHARE
    assert pl.min_saving_share(run, run.with_(vpp=None)) == pl.VPP_ONLY_MIN_SAVING_SHARE
    assert pl.min_saving_share(run, run.with_(pp=8, vpp=5)) == pl.MIN_SAVING_SHARE
    assert pl.min_saving_share(run, run.with_(vpp=10, mbs=2)) == pl.MIN_SAVING_SHARE  # not VPP alone
    assert pl.min_saving_share(run, run.with_(tp=8)) == pl.MIN_SAVING_SHARE


def test_a_vpp_change_that_saves_more_than_the_bar_is_still_offered(table):
    """At VPP 2 the first stage holds 11 chunks of 10 layers: turning VPP off (4 micro-batches of
    20 layers) saves about 6% of the peak, above the VPP-only bar; VPP 2->4 (about 3%) does not."""
    model, run = tc.anchor_workload(table.raw, "llama3_70b_sft_32xh100")
    plan = pl.plan(model, run.with_(vpp=2), settings(), table)
    offered = titles((*plan.ranked, *plan.not_fitting))
    assert "VPP 2->off" in offered and "VPP 2->4" in titles(plan.no_saving)


# ------------------------------------------------------------- TP on an MoE with ETP unset
def test_moe_tp_change_also_offered_with_the_experts_tp_kept(table):
    """Unset on the command line or in Megatron-LM flags, ETP follows TP (Megatron-LM's and
    Megatron-Core's rule; the Bridge reader sets 1 as Bridge does), so TP 1->4 at EP 8 on 16 GPUs
    needs 32 GPUs per stage and is refused; MoE recipes pin ETP instead, and that layout is legal:
    it is offered beside the refused one, with the ETP flag in its exact change."""
    from memtune.spec.presets import load_preset

    model = load_preset("qwen3-30b-a3b")
    run = RunSpec(world_size=16, tp=1, ep=8, mbs=1, gbs=16, seq_length=8192)
    plan = pl.plan(model, run, settings(), table)
    assert "EP x ETP = 8x4" in " ".join(rejected(plan)["TP 1->4"])
    pinned = [e for e in (*plan.ranked, *plan.not_fitting) if e.candidate.title == "TP 1->4, ETP 1 kept"]
    assert len(pinned) == 1 and pinned[0].candidate.run.expert_tp == 1
    change = pl.exact_change(run, pinned[0].candidate)
    assert "--expert-tensor-parallel-size 1" in change["megatron_args"]
    assert "model.expert_tensor_parallel_size=1" in change["bridge_overrides"]


def test_no_kept_etp_variant_for_dense_models_or_a_pinned_etp(table):
    from memtune.spec.presets import load_preset

    dense = pl.plan(load_preset("llama3-8b"), RunSpec(world_size=8, tp=1, mbs=1, gbs=8), settings(), table)
    moe = load_preset("qwen3-30b-a3b")
    pinned = pl.plan(moe, RunSpec(world_size=16, tp=1, ep=8, etp=1, mbs=1, gbs=16), settings(), table)
    for plan in (dense, pinned):
        every = (*plan.ranked, *plan.not_fitting, *plan.rejected, *plan.no_saving)
        assert not [e for e in every if "kept" in e.candidate.title]


def test_cli_says_how_an_unset_expert_tp_is_read():
    """On the command line ETP follows TP as in Megatron-LM; a Bridge user is told to pass --etp 1."""
    from helper_cli import invoke_json

    base = ("--preset", "qwen3-30b-a3b", "--gpus", "16", "--ep", "8", "--json")
    note = "--etp not given: expert TP follows TP (2)"
    assert any(note in a for a in invoke_json("estimate_memory", *base, "--tp", "2")["assumptions"])
    for more in (("--tp", "2", "--etp", "1"), ("--tp", "1")):
        assert not any("--etp not given" in a for a in invoke_json("estimate_memory", *base, *more)["assumptions"])
