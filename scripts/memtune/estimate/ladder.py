"""The ladder an expert climbs: one priced change at a time until the run fits.

A one-step table answers "which single change fits?", but a run that is 50 GiB over the
limit needs several changes, and an engineer makes them in a known order: first what is
nearly free and saves a lot (the distributed optimizer, sequence parallelism), then what
costs a little (selective recompute), and only then what costs a lot (full recompute, more
TP). :func:`climb` reproduces that: from the user's run it takes, at each rung, the cheapest
priced change that still saves memory (among near-free ones, the largest saving),
re-estimates, and repeats until the run fits with the headroom.

Two refinements keep the greedy climb honest:

* at every rung the cheapest change that makes the run fit *right now* is also noted; the
  answer is whichever of these finishes (or the plain climb) loses the least throughput in
  total, so a cheap rung never forces an expensive detour;
* a rung whose knob a later rung sets again (selective recompute replaced by full
  recompute, PP 2->4 followed by PP 4->8) is dropped and the ladder re-estimated, so every
  rung shown is part of the final configuration.

Losses below ``cost_floor`` (data/throughput_costs.yaml, 2%) count as the floor, because the
evidence does not resolve them (the seed measured the distributed optimizer at 1-2%); a
modelled speed-up therefore never beats a measured near-free change by itself.
Raising TP and switching to Megatron-FSDP are last resorts: taken only when no other
priced change saves memory, or as the finishing step when that is cheapest overall.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from memtune.estimate import planner as pl
from memtune.estimate import throughput_cost as tc
from memtune.spec import model_spec as ms
from memtune.spec.run_spec import RunSpec, fsdp_gathers_params
from memtune.units import GIB

#: RunSpec fields that one knob sets together; a later rung touching the same knob
#: replaces an earlier one.
KNOBS: dict[str, tuple[str, ...]] = {
    "recompute": ("recompute_granularity", "recompute_modules", "recompute_method", "recompute_num_layers"),
    "pipeline": ("pp", "vpp", "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"),
    "optimizer": ("use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy"),
    "offload": ("cpu_offloading", "cpu_offloading_num_layers"),
    "tp": ("tp",),
    "sp": ("sequence_parallel",),
    "cp": ("cp",),
    "ep": ("ep",),
    "etp": ("etp",),
    "mbs": ("mbs",),
    "regather": ("sequence_parallel_input_regather",),
}


#: A rung must save at least this share of the current peak: below it the saving is inside
#: the estimator's own error and the rung would only lengthen the ladder.


@dataclass(frozen=True)
class Rung:
    """One change on the ladder, relative to the rung before it."""

    title: str
    category: str
    before: RunSpec
    run: RunSpec  # the whole run after this rung
    expandable: bool
    peak_bytes: int  # est. peak per GPU after this rung
    saved_bytes: int  # peak before minus peak after (expandable segments: the allocator reserve it removes)
    step_cost: tc.Cost  # throughput vs the rung before
    cumulative_change: float  # throughput vs the user's run, all rungs so far
    cumulative_kind: str  # the weakest evidence among the rungs so far
    why: str  # why this rung was chosen

    @property
    def candidate(self) -> pl.Candidate:
        return pl.Candidate(self.title, self.category, self.run, expandable=self.expandable)

    def exact_change(self) -> dict[str, list[str]]:
        return pl.exact_change(self.before, self.candidate)


@dataclass(frozen=True)
class Ladder:
    base: RunSpec
    base_peak_bytes: int
    gpu_memory_bytes: int
    limit_bytes: int
    rungs: tuple[Rung, ...]
    fits: bool
    estimates: int
    notes: tuple[str, ...] = field(default=())

    @property
    def final_peak_bytes(self) -> int:
        return self.rungs[-1].peak_bytes if self.rungs else self.base_peak_bytes

    @property
    def total_change(self) -> float:
        return self.rungs[-1].cumulative_change if self.rungs else 0.0

    @property
    def total_kind(self) -> str:
        return self.rungs[-1].cumulative_kind if self.rungs else "measured"


def _weakest(kinds: list[str]) -> str:
    return max(kinds, key=lambda k: tc.KIND_ORDER.index(k) if k in tc.KIND_ORDER else len(tc.KIND_ORDER))


def last_resort(before: RunSpec, run: RunSpec) -> bool:
    """Raising TP and switching to Megatron-FSDP: never an intermediate rung while any other
    priced change still saves memory (TP costs the most per GiB on every measured workload;
    FSDP has no throughput measurement at all)."""
    return run.tp > before.tp or (fsdp_gathers_params(run) and not fsdp_gathers_params(before))


def full_recompute_options(model: ms.ModelSpec, run: RunSpec) -> list[dict[str, Any]]:
    """Full recompute by block and layer count (see :func:`planner.full_recompute_block_options`)."""
    return pl.full_recompute_block_options(model, run)


def rung_candidates(model: ms.ModelSpec, run: RunSpec, settings: pl.PlanSettings) -> Iterator[pl.Candidate]:
    """The planner's one-step changes, expandable segments excepted (it is rung 0)."""
    for cand in pl.candidates(model, run, settings):
        if not cand.expandable:
            yield cand


def rung_key(e: pl.Evaluated, peak_before: int, floor: float) -> tuple[float, int]:
    """Cheapest first (losses below ``floor`` are one tie: the evidence does not resolve
    them), then the largest saving."""
    loss = max(floor, round(-(e.cost.change if e.cost else 0.0), 3))
    return (loss, -(peak_before - (e.peak_bytes or peak_before)))


def _total(steps: list[pl.Evaluated]) -> tuple[float, str]:
    ratio = 1.0
    kinds = ["measured"]
    for e in steps:
        assert e.cost is not None
        ratio *= 1.0 + e.cost.change
        kinds.append(e.cost.kind)
    return ratio - 1.0, _weakest(kinds)


def _plan_key(steps: list[pl.Evaluated], floor: float) -> tuple[bool, float, int, int, int]:
    """Priced first; then the total loss (losses under ``floor`` are equal: the evidence does
    not resolve them); then the better evidence, the lower final peak, the fewer rungs."""
    change, kind = _total(steps)
    loss = max(floor, round(-change, 3))
    peak = steps[-1].peak_bytes if steps and steps[-1].peak_bytes is not None else 0
    return (kind not in pl.PRICED, loss, tc.KIND_ORDER.index(kind), peak, len(steps))


def _knobs(before: RunSpec, run: RunSpec) -> set[str]:
    return {knob for knob, names in KNOBS.items() if any(getattr(before, n) != getattr(run, n) for n in names)}


def climb(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: pl.PlanSettings,
    table: tc.CostTable | None = None,
    estimator: pl.Estimator = pl.estimate_peak,
) -> Ladder:
    """Climb from ``base`` until the run fits with the headroom (see the module docstring)."""
    table = table or tc.load_costs()
    params = table.raw.get("ladder", {})
    floor = float(params.get("cost_floor", 0.02))
    max_rungs = int(params.get("max_rungs", 12))
    cache: dict[tuple[RunSpec, bool], int] = {}
    # Expandable segments is rung 0 when it can be set: free, and it lowers the allocator's
    # reserve, so every later rung is estimated with it on.
    offer_expandable = not settings.expandable_segments and not pl.allocator_violations(base)
    user_settings = settings
    if offer_expandable:
        settings = replace(settings, expandable_segments=True)

    def evaluator(run: RunSpec) -> pl.Evaluator:
        return pl.Evaluator(model, run, settings, table, estimator, cache=cache)

    base_peak = evaluator(base).peak(base, bool(user_settings.expandable_segments))
    limit = settings.limit_bytes
    steps: list[pl.Evaluated] = []
    reasons: list[str] = []
    finishes: list[tuple[list[pl.Evaluated], list[str]]] = []
    cur, cur_peak = base, evaluator(base).peak(base, bool(settings.expandable_segments))
    for _ in range(max_rungs):
        if cur_peak <= limit:
            finishes.append((list(steps), list(reasons)))
            break
        ev = evaluator(cur)
        useful = [
            e
            for e in (ev.evaluate(c, cur_peak) for c in rung_candidates(model, cur, settings))
            if not e.rejected and e.peak_bytes is not None and e.cost is not None and e.reduces_memory
        ]
        if not useful:
            break
        fitting = [e for e in useful if e.fits]
        if fitting:
            best = min(fitting, key=lambda e: _plan_key(steps + [e], floor))
            finishes.append(
                (steps + [best], reasons + ["the change that makes the run fit from here at the lowest total cost"])
            )
        pool = [e for e in useful if pl.priced(e.cost)] or useful
        pool = [e for e in pool if not last_resort(cur, e.candidate.run)] or pool
        nxt = min(pool, key=lambda e: rung_key(e, cur_peak, floor))
        why = (
            "cheapest priced change that saves memory"
            if pl.priced(nxt.cost)
            else "no priced change saves memory here: cheapest unpriced change"
        )
        if last_resort(cur, nxt.candidate.run):
            why += " (a last resort: nothing cheaper saves memory)"
        steps.append(nxt)
        reasons.append(why)
        cur, cur_peak = nxt.candidate.run, nxt.peak_bytes or cur_peak
    fits = bool(finishes)
    if finishes:
        steps, reasons = min(finishes, key=lambda f: _plan_key(f[0], floor))
    rungs = _replay(model, base, settings, table, evaluator, steps, reasons)
    if offer_expandable:
        rungs = [_expandable_rung(base, base_peak, evaluator(base).peak(base, True), table)] + rungs
    notes = []
    if not fits:
        notes.append(
            f"the ladder stops at {rungs[-1].peak_bytes / GIB if rungs else base_peak / GIB:.1f} GiB, "
            f"above the {limit / GIB:.1f} GiB limit: no further change at this GPU count saves memory"
        )
    final_peak = rungs[-1].peak_bytes if rungs else base_peak
    return Ladder(
        base=base,
        base_peak_bytes=base_peak,
        gpu_memory_bytes=settings.gpu_memory_bytes,
        limit_bytes=limit,
        rungs=tuple(rungs),
        fits=final_peak <= limit,
        estimates=len(cache),
        notes=tuple(notes),
    )


def _expandable_rung(base: RunSpec, before: int, peak: int, table: tc.CostTable) -> Rung:
    cost = _expandable_cost(table)
    return Rung(
        title="set expandable segments",
        category="allocator",
        before=base,
        run=base,
        expandable=True,
        peak_bytes=peak,
        saved_bytes=max(0, before - peak),
        step_cost=cost,
        cumulative_change=0.0,
        cumulative_kind=cost.kind,
        why="free and measured: lowers what the allocator reserves above the tensors and its fragmentation",
    )


def _expandable_cost(table: tc.CostTable) -> tc.Cost:
    spec = table.factor("expandable_segments")
    value = float(spec["value"])
    return tc.Cost(
        change=value,
        kind=str(spec["kind"]),
        evidence=(f"expandable segments {value * 100:+.1f}% ({spec['kind']}: {spec['label']})",),
        details=(f"expandable segments: {spec.get('source', '')}",),
    )


def _diff(before: RunSpec, run: RunSpec) -> dict[str, Any]:
    return {n: getattr(run, n) for n in RunSpec.__dataclass_fields__ if getattr(before, n) != getattr(run, n)}


def _merged(steps: list[pl.Evaluated], reasons: list[str], base: RunSpec) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(title, category, why, field changes) per rung, a knob set again later folded into the
    rung that first moved it (the climb touched that knob there; its final value is what counts)."""
    out: list[tuple[str, str, str, dict[str, Any], set[str]]] = []
    prev = base
    for e, why in zip(steps, reasons, strict=True):
        run = e.candidate.run
        diff, knobs = _diff(prev, run), _knobs(prev, run)
        earlier = next((i for i, entry in enumerate(out) if entry[4] & knobs), None)
        if earlier is None:
            out.append((e.candidate.title, e.candidate.category, why, diff, knobs))
        else:
            title, category, first_why, old, old_knobs = out[earlier]
            folded = "shown at its final setting, reached later in the climb"
            merged_why = first_why if folded in first_why else f"{first_why}; {folded}"
            out[earlier] = ("", e.candidate.category, merged_why, {**old, **diff}, old_knobs | knobs)
        prev = run
    return [(title, category, why, _tidy(diff)) for title, category, why, diff, _ in out]


def _tidy(diff: dict[str, Any]) -> dict[str, Any]:
    """Full recompute ignores the selective module list: a list picked up on the way there
    is not part of the change."""
    if diff.get("recompute_granularity") == "full":
        return {k: v for k, v in diff.items() if k != "recompute_modules"}
    return diff


def _replay(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: pl.PlanSettings,
    table: tc.CostTable,
    evaluator: Callable[[RunSpec], pl.Evaluator],
    steps: list[pl.Evaluated],
    reasons: list[str],
) -> list[Rung]:
    """Fold rungs whose knob a later rung sets again into their first rung, re-apply the
    rungs in order from ``base`` and re-estimate each. If a folded rung is illegal at its
    earlier place, the rungs are shown exactly as climbed."""
    plain = []
    prev = base
    for e, why in zip(steps, reasons, strict=True):
        plain.append((e.candidate.title, e.candidate.category, why, _diff(prev, e.candidate.run)))
        prev = e.candidate.run
    for order in (_merged(steps, reasons, base), plain):
        rungs = _apply(model, base, settings, evaluator, order)
        if rungs is not None:
            return rungs
    raise AssertionError("the climbed ladder is legal by construction")


def _apply(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: pl.PlanSettings,
    evaluator: Callable[[RunSpec], pl.Evaluator],
    order: list[tuple[str, str, str, dict[str, Any]]],
) -> list[Rung] | None:
    rungs: list[Rung] = []
    cur = base
    cur_peak = evaluator(base).peak(base, bool(settings.expandable_segments))
    ratio, kinds = 1.0, ["measured"]
    for title, category, why, diff in order:
        run = cur.with_(**diff)
        evaluated = evaluator(cur).evaluate(pl.Candidate(title or pl.describe(cur, run), category, run), cur_peak)
        if (
            evaluated.rejected
            or evaluated.cost is None
            or evaluated.peak_bytes is None
            or evaluated.peak_bytes >= cur_peak
        ):
            return None  # illegal here, or saves nothing once an earlier rung was folded in
        if not title and not pl.priced(evaluated.cost):
            return None  # folding lost the price the climbed rungs had: show them as climbed
        cost, peak = evaluated.cost, evaluated.peak_bytes
        ratio *= 1.0 + cost.change
        kinds.append(cost.kind)
        rungs.append(
            Rung(
                title=evaluated.candidate.title,
                category=category,
                before=cur,
                run=run,
                expandable=False,
                peak_bytes=peak,
                saved_bytes=cur_peak - peak,
                step_cost=cost,
                cumulative_change=ratio - 1.0,
                cumulative_kind=_weakest(kinds),
                why=why,
            )
        )
        cur, cur_peak = run, peak
    return rungs
