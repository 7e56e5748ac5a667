"""The throughput cost model: anchored values are reproduced, the rest follows its formulas."""

from __future__ import annotations

import pytest

from memtune.estimate import throughput_cost as tc
from memtune.spec import model_spec as ms

KINDS = {"measured", "calibrated", "first-principles", "assumption"}


@pytest.fixture(scope="module")
def table() -> tc.CostTable:
    return tc.load_costs()


@pytest.fixture(scope="module")
def seed(table):
    return tc.anchor_workload(table.raw, "llama3_70b_sft_32xh100")


def llama8b() -> ms.ModelSpec:
    return ms.ModelSpec(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
        name="llama3-8b-like",
    )


def test_hardware_constants_are_numbers_with_sources(table):
    for name, entry in table.raw["hardware"].items():
        assert isinstance(entry["value"], (int, float)) and not isinstance(entry["value"], bool), name
        assert entry["source"], name


def test_every_factor_says_where_its_number_comes_from(table):
    for name, factor in table.raw["factors"].items():
        assert factor["kind"] in KINDS, name
        assert factor.get("label"), f"{name} has no short label"
        assert factor.get("source") or factor.get("anchor", {}).get("source"), f"{name} has no source"
        if factor["kind"] == "calibrated":
            assert "formula" in factor and "measured" in factor["anchor"], name


@pytest.mark.parametrize(
    "change, measured", [({"tp": 8}, -0.284), ({"pp": 8}, -0.059), ({"recompute_modules": ("mlp",)}, -0.16)]
)
def test_seed_measurements_are_reproduced_and_labelled_measured(table, seed, change, measured):
    model, base = seed
    cost = tc.throughput_change(model, base, base.with_(**change), table)
    assert cost.change == pytest.approx(measured, abs=1e-9)
    assert cost.kind == "measured"
    assert "seed" in cost.evidence[0]


def test_calibrated_model_alone_also_lands_on_the_anchors(table, seed):
    """The step-time model (not the measured short-cut) must give the anchor values too,
    otherwise neighbouring configurations would be costed off a different curve."""
    model, base = seed
    for change, measured in (({"tp": 8}, -0.284), ({"pp": 8}, -0.059), ({"recompute_modules": ("mlp",)}, -0.16)):
        ratio = tc.step_time(model, base, table) / tc.step_time(model, base.with_(**change), table) - 1
        assert ratio == pytest.approx(measured, abs=1e-6), change


def test_expandable_segments_is_free_and_measured(table, seed):
    model, base = seed
    cost = tc.throughput_change(model, base, base, table, enables_expandable_segments=True)
    assert cost.change == 0.0 and cost.kind == "measured"


def test_distributed_optimizer_costs_the_seed_midpoint(table, seed):
    model, base = seed
    off = base.with_(use_distributed_optimizer=False)
    cost = tc.throughput_change(model, off, base, table)
    assert -0.02 <= cost.change <= -0.01
    assert cost.kind == "measured"


def test_regather_slope_is_the_least_squares_fit_of_the_three_runs(table):
    pts = [(0.100, -0.0674), (0.052, -0.0289), (0.016, -0.0034)]
    slope = sum(x * y for x, y in pts) / sum(x * x for x, _ in pts)
    assert table.regather_slope == pytest.approx(slope)


@pytest.mark.parametrize("saved, low, high", [(0.10, -0.0674, -0.05), (0.5, -0.0674, -0.0674), (0.0, -0.0034, -0.0034)])
def test_regather_cost_stays_within_the_measured_range(table, seed, saved, low, high):
    model, base = seed
    lora = base.with_(peft="lora")
    cost = tc.throughput_change(
        model, lora, lora.with_(sequence_parallel_input_regather=True), table, regather_saved_fraction=saved
    )
    assert low - 1e-9 <= cost.change <= high + 1e-9


def test_unmeasured_workload_uses_the_model_not_the_measurement(table):
    m = llama8b()
    base = tc.RunSpec(world_size=16, tp=2, pp=2, mbs=1, gbs=64, seq_length=8192, sequence_parallel=True)
    cost = tc.throughput_change(m, base, base.with_(tp=4), table)
    assert cost.kind != "measured"
    assert cost.change < 0
    assert any(line.startswith("tp ") for line in cost.evidence)


def test_more_tp_always_costs_more(table):
    m = llama8b()
    base = tc.RunSpec(world_size=64, tp=1, pp=1, mbs=1, gbs=64, seq_length=4096, sequence_parallel=True)
    times = [tc.step_time(m, base.with_(tp=t), table) for t in (1, 2, 4, 8)]
    assert times == sorted(times) and len(set(times)) == 4
    # leaving the NVLink domain is far worse than the step before it
    t16 = tc.step_time(m, base.with_(tp=16), table)
    assert t16 - times[-1] > times[-1] - times[-2]


def test_bubble_is_the_interleaved_formula(table):
    m = llama8b()
    run = tc.RunSpec(world_size=8, tp=1, pp=4, vpp=2, mbs=1, gbs=16, seq_length=4096)
    assert tc.step_terms(m, run, table)["bubble"] == pytest.approx((4 - 1) / (2 * 8))
    assert tc.step_terms(m, run.with_(pp=1, vpp=None), table)["bubble"] == 0.0


def test_recompute_cost_grows_with_what_is_recomputed(table, seed):
    model, base = seed
    none = base.with_(recompute_granularity=None)
    costs = [
        tc.step_time(model, none.with_(**kw), table)
        for kw in (
            {},
            {"recompute_granularity": "selective", "recompute_modules": ("layernorm",)},
            {"recompute_granularity": "selective", "recompute_modules": ("core_attn",)},
            {"recompute_granularity": "selective", "recompute_modules": ("mlp",)},
            {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
        )
    ]
    assert costs == sorted(costs)
    assert costs[-1] > costs[-2] > costs[0]


def test_moe_flops_count_only_the_routed_top_k():
    dense = ms.ModelSpec(num_layers=2, hidden_size=1024, num_attention_heads=8, vocab_size=1000, ffn_hidden_size=4096)
    moe = dense.with_(num_moe_experts=8, moe_router_topk=2)
    fd = tc.layer_flops(dense, 1024, 1e15, 3e12)
    fm = tc.layer_flops(moe, 1024, 1e15, 3e12)
    # two experts as wide as the dense MLP, plus the router
    assert fm.by_module["moe"] == pytest.approx(2 * fd.by_module["mlp"] + 2 * 2 * 1024 * 8)
    assert fm.num_moe_layers == 2 and fd.num_moe_layers == 0


# ------------------------------------------------------------- LoRA: frozen weights, no weight gradients
def test_lora_step_is_two_forwards_so_recompute_costs_half_as_much_again(table):
    """Full training: forward + input gradients + weight gradients = 3 forwards. LoRA freezes the
    base weights, so their weight-gradient GEMMs never run: 2 forwards. Re-running the same
    module is the same work, so its share of a LoRA step is 3/2 of its share of a full step."""
    m = llama8b()
    run = tc.RunSpec(
        world_size=8,
        tp=2,
        mbs=1,
        gbs=16,
        seq_length=8192,
        sequence_parallel=True,
        recompute_granularity="selective",
        recompute_modules=("mlp",),
    )
    full = tc.step_terms(m, run, table)["recompute"]
    lora = tc.step_terms(m, run.with_(peft="lora"), table)["recompute"]
    assert tc.step_passes(run) == 3.0 and tc.step_passes(run.with_(peft="lora")) == 2.0
    assert lora == pytest.approx(1.5 * full)
    base = run.with_(peft="lora", recompute_granularity=None)
    cost_lora = tc.throughput_change(
        m, base, base.with_(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1), table
    )
    base_full = run.with_(recompute_granularity=None)
    cost_full = tc.throughput_change(
        m,
        base_full,
        base_full.with_(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
        table,
    )
    assert cost_lora.change < cost_full.change < 0  # recompute hurts a LoRA step more


# ------------------------------------------------------------- MoE: all-to-all volume, topology, honest gains
def qwen3_30b_a3b() -> ms.ModelSpec:
    from memtune.spec import presets

    return presets.load_preset("qwen3-30b-a3b")


def test_ep_traffic_leaving_the_node_is_split_by_peers_per_node(table):
    """EP 16 (ETP 1) over two 8-GPU nodes: 7 of 16 destinations are NVLink peers, 8 are behind
    InfiniBand, sent at the same time; the slower (InfiniBand) part sets the time. The old model
    priced all 15/16 at InfiniBand."""
    m = qwen3_30b_a3b()
    run = tc.RunSpec(world_size=16, tp=1, ep=16, mbs=1, gbs=64, seq_length=4096, use_distributed_optimizer=True)
    f = tc.layer_flops(m, 4096, table.hw("achieved_flops_per_gpu"), table.hw("hbm_bytes_per_s"))
    routed = 4 * m.moe_router_topk * m.hidden_size * 2
    seconds = max(
        routed * 7 / 16 / table.hw("nvlink_bytes_per_s"), routed * 8 / 16 / table.hw("inter_node_bytes_per_s")
    )
    want = 0.5 * f.num_moe_layers * seconds / (3 * f.total / table.hw("achieved_flops_per_gpu"))
    assert tc.step_terms(m, run, table)["ep"] == pytest.approx(want)
    all_ib = (
        0.5
        * f.num_moe_layers
        * routed
        * 15
        / 16
        / table.hw("inter_node_bytes_per_s")
        / (3 * f.total / table.hw("achieved_flops_per_gpu"))
    )
    assert tc.step_terms(m, run, table)["ep"] < 0.6 * all_ib


def test_deepseek_v3_cross_node_all_to_all_matches_the_published_order_of_magnitude(table):
    """DeepSeek-V3 (arXiv:2412.19437, 3.2.1): cross-node EP 64 puts communication and computation
    at about 1:1 before overlap. The un-overlapped term must be within 2x of that."""
    from memtune.spec import presets

    m = presets.load_preset("deepseek-v3")
    run = tc.RunSpec(
        world_size=2048, tp=1, pp=16, ep=64, mbs=1, gbs=4096, seq_length=4096, use_distributed_optimizer=True
    )
    ratio = tc.step_terms(m, run, table)["ep"] / (1 - float(table.factor("expert_parallel")["overlap"]))
    assert 0.5 <= ratio <= 2.0, ratio


def test_etp_2_to_1_on_qwen3_30b_a3b_is_not_a_confident_win(table):
    """Issue 13 follow-up: ETP 2->1 (EP group 16 -> 8 ranks, back inside the node) was priced at
    +114% (this exact run: all 7/8 of the traffic at InfiniBand). Now half of it is NVLink traffic
    (4 EP peers per node), which takes the model to +71%; that speed-up is still unmeasured, so it
    is shown as an assumption, and a total above the largest measured gain of one change
    (+39.6%, seed TP 8->4) is capped there."""
    m = qwen3_30b_a3b()
    base = tc.RunSpec(
        world_size=16,
        tp=2,
        ep=8,
        etp=2,
        mbs=1,
        gbs=64,
        seq_length=8192,
        sequence_parallel=True,
        use_distributed_optimizer=True,
    )
    cost = tc.throughput_change(m, base, base.with_(etp=1), table)
    modelled = tc.step_time(m, base, table) / tc.step_time(m, base.with_(etp=1), table) - 1
    assert 0.5 < modelled < 1.0  # the model's own number, before the cap
    assert cost.kind == "assumption"
    assert cost.change == pytest.approx(tc.gain_cap(table))
    assert any("capped" in line for line in cost.evidence)
    assert tc.gain_cap(table) == pytest.approx(709.93 / 508.7 - 1, abs=5e-4)  # the seed's TP 8->4, inverted


def test_spreading_experts_still_has_a_priced_cost(table):
    """Only gains are unconfirmed: the cost of EP all-to-all stays first-principles."""
    from memtune.spec import presets

    m = presets.load_preset("mixtral-8x7b")
    base = tc.RunSpec(world_size=64, tp=2, pp=4, mbs=1, gbs=256, seq_length=4096, sequence_parallel=True)
    inside, across = (tc.throughput_change(m, base, base.with_(ep=ep), table) for ep in (4, 8))
    assert inside.kind == across.kind == "first-principles"
    assert across.change < inside.change < 0  # EP 8 x ETP 2 = 16 ranks leaves the node


def test_no_modelled_gain_above_the_measured_maximum_is_priced(table):
    m = llama8b()
    base = tc.RunSpec(world_size=64, tp=16, mbs=1, gbs=64, seq_length=4096, sequence_parallel=True)
    cost = tc.throughput_change(m, base, base.with_(tp=1), table)  # TP across nodes -> TP 1: a huge model gain
    assert cost.change <= tc.gain_cap(table) + 1e-12 and cost.kind == "assumption"


# ------------------------------------------------------------- deep pipelines: extrapolation is labelled
def test_thinner_stages_than_any_published_pipeline_are_an_assumption(table):
    """Calibrated on the seed's PP 8 (10 layers per stage, 2 per virtual chunk); the thinnest
    published pipeline found is Llama 3 405B at PP 16 (~7.9 per stage). PP 8->16 on 405B stays
    priced; PP 8->64 (2 per stage) is labelled an assumption with the reason."""
    from memtune.spec import presets

    m = presets.load_preset("llama3.1-405b")
    base = tc.RunSpec(
        world_size=1024,
        tp=8,
        pp=8,
        mbs=1,
        gbs=1024,
        seq_length=8192,
        sequence_parallel=True,
        num_layers_in_last_pipeline_stage=14,
        use_distributed_optimizer=True,
    )
    ok = tc.throughput_change(m, base, base.with_(pp=16, num_layers_in_last_pipeline_stage=6), table)
    deep = tc.throughput_change(
        m, base, base.with_(pp=64, num_layers_in_first_pipeline_stage=1, num_layers_in_last_pipeline_stage=1), table
    )
    assert ok.kind == "first-principles"
    assert deep.kind == "assumption" and any("1.97 layers per stage" in line for line in deep.evidence)
    # 2 x hidden x vocab = 4.2 GFLOP per token vs ~6.7 for a 405B layer: the last stage's extra load is named
    assert any("output layer adds 0.63 layers' work" in line for line in deep.evidence), deep.evidence
    assert not any("output layer" in line for line in ok.evidence)


def test_one_layer_virtual_chunks_are_an_assumption_but_the_seeds_two_are_not(table, seed):
    model, base = seed  # PP 4, VPP 5: 4 layers per chunk
    two = tc.throughput_change(model, base, base.with_(vpp=10), table)  # 2 per chunk: the seed's own PP 8 chunk
    one = tc.throughput_change(model, base.with_(pp=8), base.with_(pp=8, vpp=10), table)  # 1 per chunk
    assert two.kind in ("calibrated", "first-principles")
    assert one.kind == "assumption" and any("1.00 layers per virtual chunk" in line for line in one.evidence)


def test_skill_md_quotes_the_gain_cap_the_planner_uses(table):
    from conftest import REPO_ROOT

    text = " ".join((REPO_ROOT / "SKILL.md").read_text(encoding="utf-8").split())
    assert f"+{tc.gain_cap(table) * 100:.1f}%, TP 8→4" in text
