"""The planner leaves out a recompute setting when a cheaper one lowers the peak as far.

Under flash attention ``[core_attn]`` keeps only the softmax statistics, so ``[core_attn, mlp]``
saves what ``[mlp]`` saves while re-running attention as well; with unfused attention the score
tensors make ``core_attn`` worth its price and the pair must stay.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memtune.estimate import planner as pl
from memtune.estimate import throughput_cost as tc
from memtune.estimate.dominance import split_dominated
from memtune.estimate.plan_report import to_json
from memtune.estimate.plan_space import full_recompute_block_options
from memtune.spec.presets import load_preset
from memtune.spec.run_spec import RunSpec
from memtune.units import GIB

PAIR, MLP = "recompute selective [core_attn, mlp]", "recompute selective [mlp]"


@pytest.fixture(scope="module")
def table() -> tc.CostTable:
    return tc.load_costs()


def _plan(table: tc.CostTable, attention_backend: str) -> pl.Plan:
    model = load_preset("llama3-8b")
    run = RunSpec(
        world_size=8,
        tp=2,
        mbs=2,
        gbs=8,
        seq_length=8192,
        sequence_parallel=True,
        use_distributed_optimizer=True,
        attention_backend=attention_backend,
    )
    return pl.plan(model, run, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)


def _titles(rows) -> list[str]:
    return [e.candidate.title for e in rows]


def test_flash_attention_pair_is_left_out_for_the_cheaper_single_module(table):
    plan = _plan(table, "flash")
    assert MLP in _titles(plan.ranked) and PAIR not in _titles((*plan.ranked, *plan.not_fitting))
    assert [(d.title, d.instead) for d in plan.dominated] == [(PAIR, MLP)]
    doc = to_json(plan, top=10)
    assert doc["dominated"] == [{"change": PAIR, "instead": MLP}]


def test_unfused_attention_keeps_the_pair_because_core_attn_saves_memory_there(table):
    plan = _plan(table, "unfused")
    assert PAIR in _titles(plan.ranked)
    assert PAIR not in [d.title for d in plan.dominated]


def test_block_recompute_over_a_whole_chunk_is_not_listed_beside_uniform_x1():
    model = load_preset("llama3-8b")  # 32 layers
    for pp, vpp in ((1, None), (2, None), (4, 2)):
        run = RunSpec(world_size=8, pp=pp, vpp=vpp)
        chunk = model.num_layers // (pp * run.vpp_chunks)
        counts = [o["recompute_num_layers"] for o in full_recompute_block_options(model, run)]
        assert counts and all(n < chunk for n in counts), (pp, vpp, counts)


# ------------------------------------------------------------- the rule on its own
@dataclass(frozen=True)
class _Cand:
    title: str
    category: str = "recompute"


@dataclass(frozen=True)
class _Cost:
    change: float
    kind: str = "calibrated"


@dataclass(frozen=True)
class _Row:
    candidate: _Cand
    peak_bytes: int | None
    cost: _Cost | None


def _row(title: str, peak_gib: float, change: float, category: str = "recompute", kind: str = "calibrated") -> _Row:
    return _Row(_Cand(title, category), int(peak_gib * GIB), _Cost(change, kind))


def test_a_near_tie_chain_never_removes_a_setting_that_saves_clearly_more():
    """A saves 0.6 GiB more than C (beyond the 0.4 GiB resolution) but only 0.3 GiB more than B,
    which C dominates: A must stay, because nothing kept saves as much as A."""
    a, b, c = _row("A", 50.0, -0.10), _row("B", 50.3, -0.05), _row("C", 50.6, -0.01)
    kept, dropped = split_dominated([a, b, c], int(0.4 * GIB))
    assert kept == [a, c]
    assert [(d.title, d.instead) for d in dropped] == [("B", "C")]


def test_equal_prices_and_other_categories_are_never_compared():
    same_price = [_row("A", 50.0, -0.05), _row("B", 50.0, -0.0505)]
    assert split_dominated(same_price, int(0.4 * GIB))[1] == []
    cross = [_row("PP 4->8", 50.0, -0.06, "pipeline"), _row("R", 50.0, -0.02)]
    assert split_dominated(cross, int(0.4 * GIB))[1] == []
    assert split_dominated(list(reversed(cross)), int(0.4 * GIB))[1] == []


def test_a_costlier_setting_that_saves_more_than_the_resolution_stays():
    rows = [_row("cheap", 57.2, -0.145), _row("dear", 56.0, -0.168)]
    kept, dropped = split_dominated(rows, int(0.4 * GIB))
    assert kept == rows and dropped == []


def test_an_unpriced_cost_neither_dominates_nor_is_dominated():
    """An unknown cost's 0% is a placeholder: it must not push out a priced row that saves as much."""
    rows = [_row("unknown", 50.0, 0.0, kind="unknown"), _row("priced", 50.0, -0.05)]
    assert split_dominated(rows, int(0.4 * GIB)) == (rows, [])
    rows = [_row("priced", 50.0, -0.01), _row("assumed", 50.0, -0.05, kind="assumption")]
    assert split_dominated(rows, int(0.4 * GIB)) == (rows, [])


def test_every_row_named_instead_is_shown_in_the_fitting_table(table):
    """ "take X instead" is advice: X must be a row that fits and is listed."""
    from memtune.spec.presets import load_preset

    model = load_preset("qwen3-30b-a3b")
    for mbs, seq in ((1, 8192), (2, 4096), (1, 4096)):
        run = RunSpec(world_size=16, tp=1, ep=8, etp=1, mbs=mbs, gbs=16 * mbs, seq_length=seq)
        plan = pl.plan(model, run, pl.PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=8 * GIB), table)
        shown = _titles(plan.ranked)
        assert all(d.instead in shown and d.title not in shown for d in plan.dominated), (mbs, seq)
