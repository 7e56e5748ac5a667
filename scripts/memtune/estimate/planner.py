"""Which change makes this run fit, at the lowest throughput cost?

The skill's decision procedure (expandable segments first, then the cheap memory
savers, parallelism resizing last) is turned into a search over the changes an
engineer can make *at the same GPU count*: allocator settings, LoRA input re-gather,
selective and full recompute, optimizer sharding, PP (with and without VPP), TP, SP,
CP, EP/ETP, micro-batch size and CPU offloading. Each candidate is

1. checked for legality (the estimator's :func:`run_spec.violations` plus the
   combinations Megatron rejects at start-up that only matter for a *change*, e.g.
   CPU offloading with recompute or CUDA graphs), and rejected with the reason;
2. estimated with the estimator (:func:`estimator.estimate`) for peak memory;
3. costed with :mod:`memtune.estimate.throughput_cost` (measured where the seed measured it);

and the candidates that reduce memory and fit with headroom are ranked by estimated
throughput (priced evidence first, then least slowdown, then most headroom).
:mod:`memtune.estimate.ladder` climbs these one-step changes cumulatively (the default answer of
plan_memory.py). ``sweep`` does the same for every
combination (the whole configuration space), for when no single step is enough.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memtune.estimate import throughput_cost as tc
from memtune.estimate.dominance import Dominated, split_dominated
from memtune.estimate.estimator import device_peak_bytes, estimate
from memtune.estimate.plan_space import (
    BRIDGE_KEYS,
    EXPANDABLE_ENV,
    FULL_SET,
    MEGATRON_FLAGS,
    MIN_TOKENS_PER_CP_RANK,
    Candidate,
    PlanSettings,
    StageSplit,
    allocator_violations,
    bridge_value,
    describe,
    divisors,
    exact_change,
    extra_violations,
    full_recompute_block_options,
    powers_of_two_upto,
    recompute_change,
    recompute_modules_for,
    recompute_options,
    sp_for,
    stage_split,
    sweep_layouts,
    vpp_options,
)
from memtune.spec import model_spec as ms
from memtune.spec import run_spec as rs
from memtune.spec.run_spec import FSDP_FULL_SHARD, RunSpec, fsdp_gathers_params


@dataclass(frozen=True)
class Evaluated:
    """A candidate with its verdict: rejected (reasons), or estimated and costed."""

    candidate: Candidate
    rejected: tuple[str, ...] = ()
    peak_bytes: int | None = None
    fits: bool = False
    reduces_memory: bool = False
    cost: tc.Cost | None = None

    def headroom(self, settings: PlanSettings) -> int | None:
        return None if self.peak_bytes is None else settings.gpu_memory_bytes - self.peak_bytes


@dataclass(frozen=True)
class Plan:
    model: ms.ModelSpec
    base: RunSpec
    settings: PlanSettings
    baseline: Evaluated
    ranked: tuple[Evaluated, ...]  # fit with headroom and reduce memory, best first
    not_fitting: tuple[Evaluated, ...]  # legal, reduce memory, but above the limit; closest first
    rejected: tuple[Evaluated, ...]
    no_saving: tuple[Evaluated, ...]  # legal but do not lower the peak
    evaluated: int
    seconds: float
    combined: tuple[Evaluated, ...] = field(default=())  # sweep results when no single step fits
    dominated: tuple[Dominated, ...] = field(default=())  # recompute rows a cheaper one saves as much as

    @property
    def best(self) -> Evaluated | None:
        if self.ranked:
            return self.ranked[0]
        return self.combined[0] if self.combined else None


# ------------------------------------------------------------------ memory
def fragmentation_note() -> str:
    return (
        "expandable segments does not shrink the tensors; it lowers what the allocator reserves above "
        "them (measured on an H200: 7.1% -> 3.1% of the allocated peak, dense median), which the device "
        "view shown includes"
    )


def estimate_peak(model: ms.ModelSpec, run: RunSpec, expandable: bool | None) -> int:
    """Device view of the most-loaded GPU (tensors, allocator reserve, memory outside PyTorch),
    with the reserve of the default allocator unless expandable segments are known to be on."""
    return device_peak_bytes(model, estimate(model, run), bool(expandable))


# ------------------------------------------------------------------ single-step candidates
def candidates(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings) -> Iterator[Candidate]:
    """Every one-step change at the same GPU count (illegal ones included; they are
    rejected with a reason later, because "why not X?" is part of the answer)."""
    world = base.world_size
    if not settings.expandable_segments:
        yield Candidate("set expandable segments", "allocator", base, expandable=True)
    if base.peft and not base.sequence_parallel_input_regather and not rs.peft_without_regather(base):
        yield Candidate("LoRA input re-gather", "peft", base.with_(sequence_parallel_input_regather=True))
    if base.tp > 1 and not base.sequence_parallel:
        yield Candidate("sequence parallel on", "tensor", base.with_(sequence_parallel=True))
    offered: set[RunSpec] = set()
    for option in recompute_options(model, base) + full_recompute_block_options(model, base):
        run, title = recompute_change(base, base.with_(**option))
        if run in offered or (
            tc.recompute_set(run) == tc.recompute_set(base) and run.recompute_granularity == base.recompute_granularity
        ):
            continue
        offered.add(run)
        yield Candidate(title, "recompute", run)
    if not base.use_distributed_optimizer and not base.use_megatron_fsdp:
        yield Candidate("distributed optimizer", "optimizer", base.with_(use_distributed_optimizer=True))
    if not fsdp_gathers_params(base):  # off, or on but sharding less (no_shard is its default)
        was = f", was {base.data_parallel_sharding_strategy}" if base.use_megatron_fsdp else ""
        yield Candidate(f"Megatron-FSDP (optim_grads_params{was})", "optimizer", base.with_(**FSDP_FULL_SHARD))
    # pipeline: every PP that divides the GPUs left by TP x CP, each with its VPP options
    for pp in divisors(world // max(1, base.tp * base.cp)) if world % (base.tp * base.cp) == 0 else []:
        if pp > model.num_layers:
            continue
        for vpp in vpp_options(model, pp, base.vpp):
            if pp == base.pp and vpp == (base.vpp if base.vpp_chunks > 1 else None):
                continue
            run = base.with_(pp=pp, vpp=vpp, **stage_split(model, pp))
            chunks = f"VPP {vpp}" if vpp else "no VPP"
            if pp == base.pp:
                title = f"VPP {base.vpp_chunks if base.vpp_chunks > 1 else 'off'}->{vpp or 'off'}"
            else:
                title = f"PP {base.pp}->{pp}, {chunks}"
            yield Candidate(title, "pipeline", run)
    # one step beyond the NVLink domain is enough to show why TP stops there
    for tp in powers_of_two_upto(min(world, 2 * settings.gpus_per_node)):
        if tp == base.tp:
            continue
        run = base.with_(tp=tp, sequence_parallel=sp_for(base, tp))
        yield Candidate(f"TP {base.tp}->{tp}", "tensor", run)
        if model.is_moe and base.etp is None:  # unset (Megatron-LM), ETP follows TP; MoE recipes pin it
            yield Candidate(f"TP {base.tp}->{tp}, ETP {base.tp} kept", "tensor", run.with_(etp=base.tp))
    for cp in powers_of_two_upto(world):
        if cp != base.cp and (cp == 1 or base.seq_length // cp >= MIN_TOKENS_PER_CP_RANK):
            yield Candidate(f"CP {base.cp}->{cp}", "context", base.with_(cp=cp))
    if model.is_moe:
        # powers of two as well as the expert count's divisors, so "EP must divide the
        # experts" shows up as a rejection instead of silently missing options
        experts = model.num_moe_experts or 1
        for ep in sorted(set(divisors(experts)) | set(powers_of_two_upto(min(world, 2 * experts)))):
            if ep != base.ep and ep <= world:
                yield Candidate(f"EP {base.ep}->{ep}", "expert", base.with_(ep=ep))
        for etp in sorted({1, base.tp}):
            if etp != base.expert_tp:
                yield Candidate(f"ETP {base.expert_tp}->{etp}", "expert", base.with_(etp=etp))
    for mbs in range(1, base.mbs):
        yield Candidate(f"MBS {base.mbs}->{mbs}", "batch", base.with_(mbs=mbs))
    if not base.cpu_offloading:
        seen: set[int] = set()
        for n in (1, model.num_layers // 4, model.num_layers // 2):
            if n >= 1 and n not in seen:
                seen.add(n)
                # Megatron-Core refuses offloading together with recompute, so the
                # candidate an engineer would try turns recompute off
                run = base.with_(cpu_offloading=True, cpu_offloading_num_layers=n, recompute_granularity=None)
                off = ", recompute off" if base.recompute_granularity else ""
                yield Candidate(f"CPU offloading {n} layer(s){off}", "offload", run)


# ------------------------------------------------------------------ evaluation
Estimator = Callable[[ms.ModelSpec, RunSpec, "bool | None"], int]


@dataclass
class Evaluator:
    """Evaluates candidates against one baseline, memoising the estimator."""

    model: ms.ModelSpec
    base: RunSpec
    settings: PlanSettings
    table: tc.CostTable
    estimator: Estimator = estimate_peak
    cache: dict[tuple[RunSpec, bool], int] = field(default_factory=dict)
    count: int = 0

    def peak(self, run: RunSpec, expandable: bool) -> int:
        key = (run, expandable)
        if key not in self.cache:
            self.cache[key] = self.estimator(self.model, run, expandable)
        return self.cache[key]

    def baseline(self) -> Evaluated:
        expandable = bool(self.settings.expandable_segments)
        peak = self.peak(self.base, expandable)
        cost = tc.Cost(change=0.0, kind="measured", evidence=("current configuration",))
        return Evaluated(
            Candidate("current configuration", "current", self.base),
            peak_bytes=peak,
            fits=peak <= self.settings.limit_bytes,
            cost=cost,
        )

    def evaluate(self, cand: Candidate, base_peak: int) -> Evaluated:
        self.count += 1
        reasons = rs.violations(self.model, cand.run)
        reasons += extra_violations(self.model, self.base, cand.run, self.settings)
        if cand.expandable:
            reasons += allocator_violations(self.base)
        if reasons:
            return Evaluated(cand, rejected=tuple(dict.fromkeys(reasons)))
        expandable = cand.expandable or bool(self.settings.expandable_segments)
        peak = self.peak(cand.run, expandable)
        saved = (base_peak - peak) / base_peak if base_peak else 0.0
        # A change that saves less than MIN_SAVING_SHARE of the peak saves nothing the estimate can
        # resolve (recompute of core_attn under flash attention keeps only the softmax statistics):
        # it is not offered as a memory fix. Expandable segments lowers the allocator's reserve.
        reduces = peak < base_peak * (1 - min_saving_share(self.base, cand.run)) or (
            cand.expandable and not self.settings.expandable_segments
        )
        cost = tc.throughput_change(
            self.model,
            self.base,
            cand.run,
            self.table,
            regather_saved_fraction=saved,
            enables_expandable_segments=cand.expandable,
        )
        return Evaluated(
            cand, peak_bytes=peak, fits=peak <= self.settings.limit_bytes, reduces_memory=reduces, cost=cost
        )


#: A change must save at least this share of the current peak to count as reducing memory:
#: below it the saving is inside the estimator's own error.
MIN_SAVING_SHARE = 0.005
#: The same bar for a change of the virtual-pipeline size alone (PP unchanged). The schedule
#: term moves activations between pipeline stages, and the one measured VPP change disagrees
#: with it in sign: on the seed's Llama3-70B run (TP4 PP4, 32 x H100) VPP 5->10 is estimated
#: 1.3% lower on the peak stage but measured 2.4% higher (58.8 -> 60.2 GB,
#: references/measured-results.md), an error of 3.7 points of the peak. A VPP change must save
#: more than that before it is offered as a memory fix; SKILL.md says VPP is not one.
VPP_ONLY_MIN_SAVING_SHARE = 0.04


def min_saving_share(base: RunSpec, run: RunSpec) -> float:
    """The share of the peak a change must save to count as reducing memory (see above)."""
    vpp_only = run.pp == base.pp and run.vpp_chunks != base.vpp_chunks and run == base.with_(vpp=run.vpp)
    return VPP_ONLY_MIN_SAVING_SHARE if vpp_only else MIN_SAVING_SHARE


#: Evidence kinds too weak to rank a predicted speed-up on (the row still shows it).
UNSURE_GAIN = ("assumption", tc.UNKNOWN)


#: Evidence kinds that put a number on a change (the rest are guesses or nothing).
PRICED = tc.PRICED_KINDS


def priced(cost: tc.Cost | None) -> bool:
    """True when measured, calibrated or first-principles evidence prices every part of the change."""
    return cost is not None and cost.kind in PRICED


def rank_key(e: Evaluated, settings: PlanSettings, cap_gain: bool = False) -> tuple[int, float, int, float]:
    """Priced changes first, then assumed, then unknown (:func:`evidence_tier`: an assumed or
    unknown cost never fills the table ahead of a priced change that also fits - its "0%" is
    a placeholder, not a finding); then least
    throughput loss first (to 0.1%, the model's resolution); among equals the
    better-evidenced number (measured before modelled), then the most headroom.

    With ``cap_gain`` (one-step fixes) a predicted speed-up counts as "no cost": the
    question is which fix costs least, and a gain is the least certain output of the cost
    model (an extrapolation), so it must not push a free, measured fix such as
    expandable segments down the list. The sweep keeps calibrated and first-principles
    gains, but a gain whose evidence is only an assumption or unknown (``UNSURE_GAIN``)
    ranks as 0% there too; the number itself is still shown."""
    assert e.cost is not None and e.peak_bytes is not None
    kind = tc.KIND_ORDER.index(e.cost.kind) if e.cost.kind in tc.KIND_ORDER else len(tc.KIND_ORDER)
    capped = cap_gain or e.cost.kind in UNSURE_GAIN or e.cost.change < tc.NEGLIGIBLE
    # a predicted gain under 0.5% is inside the evidence's resolution: it ties with "free", so
    # a measured free fix is not pushed down by a modelled +0.4%
    change = min(0.0, e.cost.change) if capped else e.cost.change
    # An unknown cost carries only its known parts (0 when there are none); with the kind as
    # tie-breaker it sorts after every measured or estimated cost of the same size.
    return (evidence_tier(e.cost), -round(change, 3), kind, float(e.peak_bytes))


def evidence_tier(cost: tc.Cost) -> int:
    """0 = priced, 1 = an assumption gives it a number, 2 = nothing does (unknown, e.g.
    Megatron-FSDP): a guessed number still ranks ahead of none."""
    if priced(cost):
        return 0
    return 2 if cost.kind == tc.UNKNOWN else 1


def _split(
    evaluated: Iterable[Evaluated], settings: PlanSettings, cap_gain: bool = False
) -> tuple[list[Evaluated], list[Evaluated], list[Evaluated], list[Evaluated]]:
    ranked, not_fitting, rejected, no_saving = [], [], [], []
    for e in evaluated:
        if e.rejected:
            rejected.append(e)
        elif not e.reduces_memory:
            no_saving.append(e)
        elif e.fits:
            ranked.append(e)
        else:
            not_fitting.append(e)
    ranked.sort(key=lambda e: rank_key(e, settings, cap_gain))
    not_fitting.sort(key=lambda e: (e.peak_bytes, -e.cost.change if e.cost else 0))
    return ranked, not_fitting, rejected, no_saving


def plan(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: PlanSettings,
    table: tc.CostTable | None = None,
    estimator: Estimator = estimate_peak,
    sweep_if_needed: bool = True,
) -> Plan:
    """Rank the one-step changes; when none fits, also search combinations."""
    start = time.perf_counter()
    ev = Evaluator(model, base, settings, table or tc.load_costs(), estimator)
    baseline = ev.baseline()
    results = [ev.evaluate(c, baseline.peak_bytes or 0) for c in candidates(model, base, settings)]
    ranked, not_fitting, rejected, no_saving = _split(results, settings, cap_gain=True)
    # only among the rows that fit: "take X instead" must name a row the table shows
    ranked, dominated = split_dominated(ranked, int(MIN_SAVING_SHARE * (baseline.peak_bytes or 0)))
    combined: tuple[Evaluated, ...] = ()
    evaluated = ev.count
    if not ranked and sweep_if_needed:
        result = sweep(model, base, settings, ev.table, estimator)
        combined = result.fitting
        evaluated += result.space
        if not combined and result.closest:
            not_fitting = sorted(not_fitting + list(result.closest[:5]), key=lambda e: e.peak_bytes or 0)
    return Plan(
        model=model,
        base=base,
        settings=settings,
        baseline=baseline,
        ranked=tuple(ranked),
        not_fitting=tuple(not_fitting),
        rejected=tuple(rejected),
        no_saving=tuple(no_saving),
        dominated=tuple(dominated),
        evaluated=evaluated,
        seconds=time.perf_counter() - start,
        combined=combined,
    )


@dataclass(frozen=True)
class SweepResult:
    """What a sweep decided. ``space`` counts every configuration (layout x recompute x
    optimizer); each is decided by a legality check, a memory estimate, or an exact
    dominance argument (see :func:`sweep`)."""

    space: int
    layouts: int
    illegal_layouts: int
    cost_bounded_layouts: int  # legal, but even their fastest setting is slower than every kept row
    estimates: int
    fitting: tuple[Evaluated, ...]  # best per (layout, optimizer), ranked
    closest: tuple[Evaluated, ...]  # most memory-saving setting of infeasible layouts, smallest peak first
    seconds: float

    @property
    def per_second(self) -> float:
        return self.space / self.seconds if self.seconds else float("inf")

    @property
    def estimates_per_second(self) -> float:
        return self.estimates / self.seconds if self.seconds else float("inf")


def _optimizer_options(base: RunSpec) -> list[dict[str, Any]]:
    """Cheapest first; the last one (Megatron-FSDP) saves the most memory."""
    opts: list[dict[str, Any]] = [{"use_distributed_optimizer": True, "use_megatron_fsdp": False}, FSDP_FULL_SHARD]
    if base.use_megatron_fsdp and not fsdp_gathers_params(base):  # the user's own strategy stays an option,
        own = {**FSDP_FULL_SHARD, "data_parallel_sharding_strategy": base.data_parallel_sharding_strategy}
        # in memory order: no_shard holds more than the distributed optimizer, optim / optim_grads less
        opts.insert(0 if base.data_parallel_sharding_strategy == "no_shard" else 1, own)
    if not base.use_distributed_optimizer and not base.use_megatron_fsdp:
        opts.insert(0, {"use_distributed_optimizer": False, "use_megatron_fsdp": False})
    return opts


def sweep(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: PlanSettings,
    table: tc.CostTable | None = None,
    estimator: Estimator = estimate_peak,
    keep: int = 50,
) -> SweepResult:
    """Find, for every layout, its cheapest recompute x optimizer setting that fits; rank.

    A branch-and-bound, exact under one assumption (more sharding and a larger recompute
    set never add memory):

    1. an illegal layout is decided by one legality check;
    2. the throughput of every (optimizer, recompute) pair of a layout comes from the
       cost model without the estimator (step time is a product of factors, and the
       recompute factor does not depend on the layout), and pairs are tried cheapest
       first: the first one that fits is the layout's answer, the rest are slower;
    3. the most memory-saving pairs (Megatron-FSDP with the widest selective set, and
       with full recompute) bound the layout: if neither fits, nothing of it does;
    4. a pair dominated by one that already failed (less sharding, a subset of its
       recompute modules) is skipped without an estimate;
    5. layouts are visited fastest-first (by their fastest possible setting); once
       ``keep`` rows are found, anything slower than all of them is not estimated
       (the kept rows are the answer; rows beyond ``keep`` are not listed).

    The counts (space, legality checks, estimates) are reported so the pruning is visible.
    """
    start = time.perf_counter()
    table = table or tc.load_costs()
    ev = Evaluator(model, base, settings, table, estimator)
    baseline_peak = ev.baseline().peak_bytes or 0
    base_fits = baseline_peak <= settings.limit_bytes
    base_time = tc.step_time(model, base, table)
    module_cost = {
        m: tc.step_terms(model, base.with_(recompute_granularity="selective", recompute_modules=(m,)), table)[
            "recompute"
        ]
        for m in recompute_modules_for(model, base)
    }
    rcs = [{"recompute_granularity": None}] + recompute_options(model, base, module_cost)
    none_terms = tc.step_terms(model, base.with_(recompute_granularity=None), table)["recompute"]
    rc_factor = [(1 + tc.step_terms(model, base.with_(**rc), table)["recompute"]) / (1 + none_terms) for rc in rcs]
    rc_sets = [
        frozenset(rc.get("recompute_modules", ()))
        if rc.get("recompute_granularity") == "selective"
        else (FULL_SET if rc.get("recompute_granularity") == "full" else frozenset())
        for rc in rcs
    ]
    selective = [i for i, rc in enumerate(rcs) if rc.get("recompute_granularity") == "selective"]
    widest = max(selective, key=lambda i: len(rc_sets[i]))
    full = next(i for i, rc in enumerate(rcs) if rc.get("recompute_granularity") == "full")
    # the ladder as a chain of rc indices: none, then every set that contains all smaller
    # ladder sets (the cumulative cheapest-first sets and the widest one)
    nested = sorted(
        (i for i, st in enumerate(rc_sets) if "*full*" not in st), key=lambda i: (len(rc_sets[i]), rc_factor[i])
    )
    chain: list[int] = []
    for i in nested:
        if not chain or rc_sets[chain[-1]] <= rc_sets[i] and rc_sets[chain[-1]] != rc_sets[i]:
            chain.append(i)
    opts = _optimizer_options(base)  # index = how much it shards (more = less memory)
    expandable = bool(settings.expandable_segments)
    space = layouts = illegal = 0
    fitting: list[Evaluated] = []
    unpriced: list[Evaluated] = []  # fits, but only an assumption or nothing prices it (kept apart)
    closest: list[Evaluated] = []

    def ok(peak: int) -> bool:
        return peak <= settings.limit_bytes and (peak < baseline_peak or not base_fits)

    def peak_of(run: RunSpec) -> int | None:
        if extra_violations(model, base, run, settings):
            return None
        return ev.peak(run, expandable)

    def row(run: RunSpec, peak: int, change: float) -> Evaluated:
        return Evaluated(
            Candidate("", "combined", run),
            peak_bytes=peak,
            fits=peak <= settings.limit_bytes,
            reduces_memory=peak < baseline_peak,
            cost=tc.Cost(change=change, kind="", evidence=()),
        )

    # pass 1: legality and the optimistic (fastest possible) step time of every layout
    legal: list[tuple[float, int, RunSpec, list[float]]] = []
    fastest_rc = min(rc_factor)
    for layout in sweep_layouts(model, base, settings):
        layouts += 1
        space += len(rcs) * len(opts)
        if rs.violations(model, layout):
            illegal += 1
            continue
        opt_time = [tc.step_time(model, layout.with_(recompute_granularity=None, **o), table) for o in opts]
        legal.append((min(opt_time) * fastest_rc, layouts, layout, opt_time))
    legal.sort(key=lambda x: (x[0], x[1]))
    # pass 2: fastest layouts first; once ``keep`` rows are found, a layout whose fastest
    # possible setting is slower than the slowest kept row cannot enter the answer
    kept_times: list[float] = []  # max-heap (negated) of the kept rows' step times
    cost_bounded = 0
    for n, (optimistic, _, layout, opt_time) in enumerate(legal):
        if len(kept_times) >= keep and optimistic >= -kept_times[0]:
            cost_bounded = len(legal) - n
            break
        pairs = sorted((opt_time[o] * rc_factor[i], o, i) for o in range(len(opts)) for i in range(len(rcs)))
        failed: list[tuple[int, frozenset[str]]] = []
        bounded: set[int] = set()
        dead = -1  # optimizer settings up to this index cannot fit with any recompute
        found = None
        unpriced_fit = None  # a setting that fits but whose cost nothing prices
        skip: set[int] = set()  # optimizer settings whose every fit would be unpriced
        for t, o, i in pairs:
            if len(kept_times) >= keep and t >= -kept_times[0]:
                break  # slower than every kept row: the rest of this layout cannot enter either
            if (
                o in skip
                or o <= dead
                or any(o <= fo and (rc_sets[i] <= fs or fs == FULL_SET == rc_sets[i]) for fo, fs in failed)
            ):
                continue
            run = layout.with_(**opts[o], **rcs[i])
            if run == base:
                continue  # the current configuration is not a change
            peak = peak_of(run)
            if peak is None:
                continue  # illegal combination (e.g. full recompute with CUDA graphs): proves nothing
            if ok(peak):
                candidate_row = row(run, peak, base_time / t - 1.0)
                if priced(tc.throughput_change(model, base, run, table)):
                    found = candidate_row
                    break
                # unpriced (an assumed or unknown cost): kept apart so that it never takes the
                # place of a priced row; look on in this layout for a priced setting that fits
                unpriced_fit = unpriced_fit or candidate_row
                if not opts[o]["use_megatron_fsdp"] or base.use_megatron_fsdp:
                    break  # the layout itself is unpriced (e.g. its GEMM-size term): so is every setting
                skip.add(o)  # only Megatron-FSDP is unpriced here: try the other optimizer settings
                continue
            failed.append((o, rc_sets[i]))
            if o not in bounded:
                bounded.add(o)
                bound_runs = [layout.with_(**opts[o], **rcs[j]) for j in (widest, full)]
                bounds = [(p, r) for r in bound_runs if (p := peak_of(r)) is not None]
                if len(bounds) < 2 and not any(ok(p) for p, _ in bounds):
                    continue  # a bound is illegal here: no conclusion, keep walking
                if not any(ok(p) for p, _ in bounds):
                    dead = max(dead, o)
                    if o == len(opts) - 1:  # even the most sharding cannot fit
                        p, r = min(bounds, key=lambda x: x[0])
                        closest.append(row(r, p, base_time / tc.step_time(model, r, table) - 1.0))
                        break
                    continue
                # bisect the ladder (memory only falls along it): every rung below the
                # first that fits fails, and so does every subset of those rungs
                lo, hi = 0, len(chain) - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    p = peak_of(layout.with_(**opts[o], **rcs[chain[mid]]))
                    if p is None:
                        lo = 0  # an illegal rung: no conclusion from the ladder
                        break
                    if ok(p):
                        hi = mid
                    else:
                        lo = mid + 1
                if lo > 0:
                    failed.append((o, rc_sets[chain[lo - 1]]))
        if found is None and unpriced_fit is not None and len(unpriced) < keep:
            unpriced.append(unpriced_fit)
        if found is not None:
            fitting.append(found)
            heapq.heappush(kept_times, -(base_time / (1.0 + (found.cost.change if found.cost else 0.0))))
            if len(kept_times) > keep:
                heapq.heappop(kept_times)
    fitting.sort(key=lambda e: rank_key(e, settings))
    fitting += sorted(unpriced, key=lambda e: rank_key(e, settings))  # after every priced row
    closest.sort(key=lambda e: e.peak_bytes or 0)
    kept = tuple(
        sorted(
            (_finalise(e, model, base, table, baseline_peak) for e in fitting[:keep]),
            key=lambda e: rank_key(e, settings),
        )
    )
    return SweepResult(
        space=space,
        layouts=layouts,
        illegal_layouts=illegal,
        cost_bounded_layouts=cost_bounded,
        estimates=len(ev.cache),
        fitting=kept,
        closest=tuple(_finalise(e, model, base, table, baseline_peak) for e in closest[:keep]),
        seconds=time.perf_counter() - start,
    )


def _finalise(e: Evaluated, model: ms.ModelSpec, base: RunSpec, table: tc.CostTable, base_peak: int) -> Evaluated:
    """Write out the title and the evidence lines of a row that will be shown."""
    run = e.candidate.run
    saved = (base_peak - (e.peak_bytes or 0)) / base_peak if base_peak else 0.0
    cost = tc.throughput_change(model, base, run, table, regather_saved_fraction=saved)
    return Evaluated(
        Candidate(describe(base, run), "combined", run),
        peak_bytes=e.peak_bytes,
        fits=e.fits,
        reduces_memory=e.reduces_memory,
        cost=cost,
    )


def plan_sweep(
    model: ms.ModelSpec,
    base: RunSpec,
    settings: PlanSettings,
    table: tc.CostTable | None = None,
    estimator: Estimator = estimate_peak,
) -> Plan:
    """Like :func:`plan`, but the ranking covers every combination (the single-step
    rejections are kept so the reasons are still shown)."""
    start = time.perf_counter()
    single = plan(model, base, settings, table, estimator, sweep_if_needed=False)
    result = sweep(model, base, settings, table, estimator)
    expandable = [e for e in single.ranked if e.candidate.expandable]
    ranked = sorted(expandable + list(result.fitting), key=lambda e: rank_key(e, settings))
    return Plan(
        model=model,
        base=base,
        settings=settings,
        baseline=single.baseline,
        ranked=tuple(ranked),
        not_fitting=result.closest,
        rejected=single.rejected,
        no_saving=single.no_saving,
        dominated=single.dominated,
        evaluated=single.evaluated + result.space,
        seconds=time.perf_counter() - start,
    )


#: The planner's API, including the plan space it re-exports (``pl.PlanSettings``, ``pl.exact_change``...).
__all__ = [
    "BRIDGE_KEYS",
    "Candidate",
    "EXPANDABLE_ENV",
    "Estimator",
    "Evaluated",
    "Evaluator",
    "FULL_SET",
    "MEGATRON_FLAGS",
    "MIN_SAVING_SHARE",
    "VPP_ONLY_MIN_SAVING_SHARE",
    "min_saving_share",
    "MIN_TOKENS_PER_CP_RANK",
    "PRICED",
    "Plan",
    "PlanSettings",
    "StageSplit",
    "SweepResult",
    "UNSURE_GAIN",
    "allocator_violations",
    "bridge_value",
    "candidates",
    "describe",
    "divisors",
    "estimate_peak",
    "evidence_tier",
    "exact_change",
    "extra_violations",
    "fragmentation_note",
    "full_recompute_block_options",
    "plan",
    "plan_sweep",
    "powers_of_two_upto",
    "priced",
    "rank_key",
    "recompute_change",
    "recompute_modules_for",
    "recompute_options",
    "sp_for",
    "stage_split",
    "sweep",
    "sweep_layouts",
    "vpp_options",
]
