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
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from memtune.estimate import throughput_cost as tc
from memtune.estimate.estimator import device_peak_bytes, estimate, regather_eligible
from memtune.spec import model_spec as ms
from memtune.spec import run_spec as rs
from memtune.spec.run_spec import RunSpec

# Where each RunSpec field lives in a Megatron Bridge ConfigContainer (Hydra override
# key) and in a Megatron-LM launch (flag); used to spell out the exact change.
BRIDGE_KEYS: Mapping[str, str] = {
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "vpp": "model.virtual_pipeline_model_parallel_size",
    "cp": "model.context_parallel_size",
    "ep": "model.expert_model_parallel_size",
    "etp": "model.expert_tensor_parallel_size",
    "mbs": "train.micro_batch_size",
    "sequence_parallel": "model.sequence_parallel",
    "recompute_granularity": "model.recompute_granularity",
    "recompute_modules": "model.recompute_modules",
    "recompute_method": "model.recompute_method",
    "recompute_num_layers": "model.recompute_num_layers",
    "use_distributed_optimizer": "optimizer.use_distributed_optimizer",
    "use_megatron_fsdp": "ddp.use_megatron_fsdp",
    "cpu_offloading": "model.cpu_offloading",
    "cpu_offloading_num_layers": "model.cpu_offloading_num_layers",
    "num_layers_in_first_pipeline_stage": "model.num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage": "model.num_layers_in_last_pipeline_stage",
    "sequence_parallel_input_regather": "peft.sequence_parallel_input_regather",
}
MEGATRON_FLAGS: Mapping[str, str] = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "vpp": "--virtual-pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "mbs": "--micro-batch-size",
    "sequence_parallel": "--sequence-parallel",
    "recompute_granularity": "--recompute-granularity",
    "recompute_modules": "--recompute-modules",
    "recompute_method": "--recompute-method",
    "recompute_num_layers": "--recompute-num-layers",
    "use_distributed_optimizer": "--use-distributed-optimizer",
    "use_megatron_fsdp": "--use-megatron-fsdp",
    "num_layers_in_first_pipeline_stage": "--decoder-first-pipeline-num-layers",
    "num_layers_in_last_pipeline_stage": "--decoder-last-pipeline-num-layers",
}
EXPANDABLE_ENV = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
#: CP chunks shorter than this many tokens per GPU are not worth their ring traffic.
MIN_TOKENS_PER_CP_RANK = 1024
# The sweep's stand-in "module set" of full recompute, next to the selective module sets.
FULL_SET: frozenset[str] = frozenset({"*full*"})


# ------------------------------------------------------------------ settings
@dataclass(frozen=True)
class PlanSettings:
    """What the user told the planner besides the run itself."""

    gpu_memory_bytes: int
    headroom_bytes: int  # keep at least this much free on the most-loaded GPU
    expandable_segments: bool | None = None  # already set? None = unknown (offer it)
    gpus_per_node: int = 8

    @property
    def limit_bytes(self) -> int:
        return self.gpu_memory_bytes - self.headroom_bytes


@dataclass(frozen=True)
class Candidate:
    """One change to the current run (``run`` is the whole changed run)."""

    title: str
    category: str
    run: RunSpec
    expandable: bool = False  # turns on expandable segments (an environment change)

    def changed_fields(self, base: RunSpec) -> dict[str, tuple[Any, Any]]:
        out: dict[str, tuple[Any, Any]] = {}
        for name in BRIDGE_KEYS:
            old, new = getattr(base, name), getattr(self.run, name)
            if old != new:
                out[name] = (old, new)
        return out


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


# ------------------------------------------------------------------ legality
def extra_violations(model: ms.ModelSpec, base: RunSpec, run: RunSpec, settings: PlanSettings) -> list[str]:
    """Start-up errors and no-op changes that run_spec.violations does not cover.

    These come from Megatron-Core's TransformerConfig checks and the seed's constraints,
    and matter here because the planner *turns on* features the user did not have.
    """
    out: list[str] = []
    recompute_on = run.recompute_granularity is not None
    if run.cpu_offloading:
        if recompute_on:
            out.append("CPU offloading does not work when activation recomputation is enabled (Megatron-Core)")
        if run.cuda_graph_scope:
            out.append("CUDA graphs are not supported with CPU offloading (cuda_graph_scope is set)")
    if run.recompute_granularity == "full" and run.cuda_graph_scope and "full_iteration" not in run.cuda_graph_scope:
        out.append(
            "full recompute is only supported with full-iteration CUDA graphs "
            f"(cuda_graph_scope={list(run.cuda_graph_scope)})"
        )
    if run.tp > settings.gpus_per_node and run.tp != base.tp:
        out.append(
            f"TP {run.tp} would span more than one {settings.gpus_per_node}-GPU NVLink domain "
            "(practical limit; set --gpus-per-node if your NVLink domain is larger)"
        )
    if run.sequence_parallel_input_regather and not base.sequence_parallel_input_regather:
        if run.peft not in ("lora", "dora"):
            out.append("sequence_parallel_input_regather is a LoRA option; this run has no LoRA/PEFT")
        elif not any(regather_eligible(run, m) for m in ("linear_qkv", "linear_fc1") if m in run.lora_target_modules):
            # the estimator decides eligibility; this only names what blocks it
            blockers = [
                text
                for cond, text in (
                    (run.tp <= 1 or not run.sequence_parallel, "needs sequence parallelism (TP > 1 with SP on)"),
                    (bool(run.cuda_graph_scope), "CUDA graphs are on"),
                    (run.cpu_offloading, "CPU activation offloading is on"),
                    (run.recompute_granularity == "full", "full-layer recompute overlaps it"),
                    ("mlp" in tc.recompute_set(run), "selective mlp recompute overlaps linear_fc1"),
                    (
                        not {"linear_qkv", "linear_fc1"} & set(run.lora_target_modules),
                        "no linear_qkv/linear_fc1 adapters",
                    ),
                )
                if cond
            ]
            out.append(
                "LoRA input re-gather has no effect here (Megatron Bridge falls back to the gathered path): "
                + "; ".join(blockers or ["no eligible adapter"])
            )
    if run.use_distributed_optimizer and not base.use_distributed_optimizer and run.dp * run.cp == 1:
        out.append("distributed optimizer shards over DP x CP = 1 rank: nothing to shard")
    if run.use_megatron_fsdp and not base.use_megatron_fsdp and run.dp * run.cp == 1:
        out.append("Megatron-FSDP shards over DP x CP = 1 rank: nothing to shard")
    return out


def allocator_violations(base: RunSpec) -> list[str]:
    if base.use_nccl_ub:
        return [
            "expandable_segments:True is incompatible with NCCL user-buffer registration (--use-nccl-ub / ddp.nccl_ub)"
        ]
    return []


# ------------------------------------------------------------------ enumeration helpers
def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def powers_of_two_upto(n: int) -> list[int]:
    return [1 << i for i in range(0, max(1, n).bit_length()) if (1 << i) <= n]


class StageSplit(TypedDict):
    """The RunSpec fields of an uneven pipeline split (a TypedDict, so ``**split`` is checked)."""

    num_layers_in_first_pipeline_stage: int | None
    num_layers_in_last_pipeline_stage: int | None


def stage_split(model: ms.ModelSpec, pp: int) -> StageSplit:
    """Pipeline split fields for ``pp`` stages: even when possible, else a smaller last
    (or first and last) stage, as the Megatron uneven-PP settings allow."""
    n = model.num_layers
    none: StageSplit = {"num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": None}
    if pp == 1 or n % pp == 0:
        return none
    if pp >= 2:
        for last in range(n // pp, 0, -1):
            if (n - last) % (pp - 1) == 0 and (n - last) // (pp - 1) >= last:
                return {"num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": last}
    if pp >= 3:
        for edge in range(n // pp, 0, -1):
            if (n - 2 * edge) % (pp - 2) == 0:
                return {"num_layers_in_first_pipeline_stage": edge, "num_layers_in_last_pipeline_stage": edge}
    return none


def vpp_options(model: ms.ModelSpec, pp: int, keep: int | None) -> list[int | None]:
    """No interleaving, the current VPP (kept even if it no longer divides: the rejection
    explains why), and every chunk count up to 10 that divides every stage's layers (more
    chunks only add p2p traffic)."""
    if pp == 1:
        return [None]
    split = stage_split(model, pp)
    try:
        counts = rs.stage_layer_counts(model, RunSpec(world_size=pp, pp=pp, **split))
    except ValueError:
        counts = (model.num_layers // pp,)
    common = math.gcd(*counts) if counts else 0
    options: list[int | None] = [None]
    for v in divisors(common) if common else []:
        if 2 <= v <= 10:
            options.append(v)
    if keep and keep > 1 and keep not in options:
        options.append(keep)
    return options


def recompute_modules_for(model: ms.ModelSpec) -> list[str]:
    """The selective-recompute modules that exist in this model."""
    modules = ["core_attn", "layernorm"]
    if not model.is_moe or not all(model.moe_layers()):
        modules.append("mlp")
    if model.is_moe:
        modules += ["moe_act", "moe"]
        if model.moe_shared_expert_intermediate_size:
            modules.append("shared_experts")
    if model.multi_latent_attention:
        modules.append("mla_up_proj")
    return modules


def recompute_options(
    model: ms.ModelSpec, base: RunSpec, ladder_costs: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Selective sets and full recompute.

    Without ``ladder_costs``: each module alone, every pair, all modules (the single-step
    list). With ``ladder_costs`` (module -> cost): each module alone, the cumulative
    cheapest-first ladder and all modules - the sets an engineer climbs through, and a
    chain whose memory only falls as it grows, which keeps the full sweep fast.
    """
    modules = recompute_modules_for(model)
    sets: list[tuple[str, ...]] = [(m,) for m in modules]
    if ladder_costs is None:
        sets += [pair for pair in itertools.combinations(modules, 2) if not ({"moe", "moe_act"} <= set(pair))]
    else:
        climbed: list[str] = []
        for m in sorted(modules, key=lambda x: ladder_costs.get(x, 0.0)):
            climbed = [x for x in climbed if not (m == "moe" and x == "moe_act")]
            if not ("moe" in climbed and m == "moe_act"):
                climbed.append(m)
            if len(climbed) > 1:
                sets.append(tuple(climbed))
    whole = tuple(m for m in modules if m != "moe_act") if "moe" in modules else tuple(modules)
    if len(whole) > 2:
        sets.append(whole)
    unique = list(dict.fromkeys(tuple(sorted(x)) for x in sets))
    out: list[dict[str, Any]] = [{"recompute_granularity": "selective", "recompute_modules": s} for s in unique]
    out.append({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    return out


def full_recompute_block_options(model: ms.ModelSpec, run: RunSpec) -> list[dict[str, Any]]:
    """Full recompute by method and layer count beyond ``uniform x1``: ``block`` over a
    quarter, half and all of a model chunk's layers (fewer layers re-run, less saved), the
    knob engineers turn when uniform full recompute is more than the gap needs."""
    chunk = max(1, model.num_layers // max(1, run.pp * run.vpp_chunks))
    return [
        {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": n}
        for n in sorted({max(1, chunk // 4), max(1, chunk // 2), chunk})
    ]


def recompute_change(base: RunSpec, run: RunSpec) -> tuple[RunSpec, str]:
    """The recompute candidate as a change to what the run already has, and its title.

    Selective recompute on top of selective recompute *adds* modules: the run keeps what it
    recomputes now (``[core_attn]`` plus ``[layernorm]``, not ``[layernorm]`` instead), so
    the estimate and the throughput price are those of the addition. A change that does
    drop the current setting (full recompute over selective, or the reverse) says so in its title.
    """
    if base.recompute_granularity == "selective" and run.recompute_granularity == "selective":
        merged = list(dict.fromkeys((*base.recompute_modules, *run.recompute_modules)))
        if "moe" in merged and "moe_act" in merged:  # moe recomputes the whole block, moe_act inside it
            merged.remove("moe_act")
        run = run.with_(recompute_modules=tuple(sorted(merged)))
        added = [m for m in run.recompute_modules if m not in base.recompute_modules]
        return run, f"recompute {run.recompute} (adds {', '.join(added)} to {base.recompute})"
    if base.recompute_granularity is not None and run.recompute != base.recompute:
        return run, f"recompute {run.recompute} (replaces {base.recompute})"
    return run, f"recompute {run.recompute}"


def _sp_for(base: RunSpec, tp: int) -> bool:
    """Keep SP as configured; a run that moves off TP=1 gets SP (the usual pairing)."""
    if tp == 1:
        return base.sequence_parallel
    return base.sequence_parallel or base.tp == 1


# ------------------------------------------------------------------ single-step candidates
def candidates(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings) -> Iterator[Candidate]:
    """Every one-step change at the same GPU count (illegal ones included; they are
    rejected with a reason later, because "why not X?" is part of the answer)."""
    world = base.world_size
    if not settings.expandable_segments:
        yield Candidate("set expandable segments", "allocator", base, expandable=True)
    if base.peft and not base.sequence_parallel_input_regather:
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
    if not base.use_megatron_fsdp:
        yield Candidate(
            "Megatron-FSDP (optim_grads_params)",
            "optimizer",
            base.with_(use_megatron_fsdp=True, use_distributed_optimizer=True),
        )
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
        run = base.with_(tp=tp, sequence_parallel=_sp_for(base, tp))
        yield Candidate(f"TP {base.tp}->{tp}", "tensor", run)
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
        reduces = peak < base_peak * (1 - MIN_SAVING_SHARE) or (
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


#: Evidence kinds too weak to rank a predicted speed-up on (the row still shows it).
UNSURE_GAIN = ("assumption", tc.UNKNOWN)


#: Evidence kinds that put a number on a change (the rest are guesses or nothing).
PRICED = ("measured", "calibrated", "first-principles")


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
        evaluated=evaluated,
        seconds=time.perf_counter() - start,
        combined=combined,
    )


# ------------------------------------------------------------------ full sweep


def sweep_layouts(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings) -> Iterator[RunSpec]:
    """Every parallel layout at the same GPU count: TP (within the NVLink domain, dividing
    heads and query groups) x CP x PP (uneven split when the layers do not divide) x VPP
    x EP x ETP x MBS. Recompute and optimizer settings are varied per layout by ``sweep``."""
    world = base.world_size
    tps = [
        t
        for t in powers_of_two_upto(min(world, settings.gpus_per_node))
        if model.num_attention_heads % t == 0 and (model.multi_latent_attention or model.query_groups % t == 0)
    ]
    cps = [
        c
        for c in powers_of_two_upto(world)
        if c == 1 or (base.seq_length % (2 * c) == 0 and base.seq_length // c >= MIN_TOKENS_PER_CP_RANK)
    ]
    eps = [e for e in divisors(model.num_moe_experts) if e <= world] if model.num_moe_experts else [1]
    mbss = [m for m in range(1, base.mbs + 1) if base.mbs % m == 0]
    for tp, cp in itertools.product(tps, cps):
        if world % (tp * cp):
            continue
        rest = world // (tp * cp)
        for pp in divisors(rest):
            if pp > model.num_layers:
                continue
            split = stage_split(model, pp)
            dp = rest // pp
            for vpp, ep, etp, mbs in itertools.product(
                vpp_options(model, pp, base.vpp), eps, sorted({1, tp}) if model.is_moe else [None], mbss
            ):
                if model.is_moe and (world // pp) % (ep * (etp or tp)):
                    continue
                if base.gbs and base.gbs % (mbs * dp):
                    continue
                # SP whenever TP > 1: it divides the activations TP leaves replicated for the
                # same TP traffic, so no layout of the sweep is worth trying without it
                yield base.with_(
                    tp=tp,
                    cp=cp,
                    pp=pp,
                    vpp=vpp,
                    ep=ep,
                    etp=etp,
                    mbs=mbs,
                    sequence_parallel=tp > 1 or _sp_for(base, tp),
                    **split,
                )


def describe(base: RunSpec, run: RunSpec) -> str:
    """Short label of what differs from ``base``."""
    parts = []
    for name, label in (
        ("tp", "TP"),
        ("pp", "PP"),
        ("vpp", "VPP"),
        ("cp", "CP"),
        ("ep", "EP"),
        ("etp", "ETP"),
        ("mbs", "MBS"),
    ):
        old, new = getattr(base, name), getattr(run, name)
        if old != new:
            parts.append(f"{label} {old or 'off'}->{new or 'off'}")
    if run.sequence_parallel != base.sequence_parallel and max(run.tp, base.tp) > 1:
        parts.append("SP on" if run.sequence_parallel else "SP off")
    if (run.recompute_granularity, tc.recompute_set(run)) != (base.recompute_granularity, tc.recompute_set(base)):
        parts.append(f"recompute {run.recompute}")
    if run.use_megatron_fsdp != base.use_megatron_fsdp:
        parts.append("Megatron-FSDP" if run.use_megatron_fsdp else "no FSDP")
    elif run.use_distributed_optimizer != base.use_distributed_optimizer:
        parts.append("distributed optimizer" if run.use_distributed_optimizer else "no distributed optimizer")
    return ", ".join(parts) or "current configuration"


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


def _optimizer_options(base: RunSpec) -> list[dict[str, bool]]:
    """Cheapest first; the last one (Megatron-FSDP) saves the most memory."""
    opts = [
        {"use_distributed_optimizer": True, "use_megatron_fsdp": False},
        {"use_distributed_optimizer": True, "use_megatron_fsdp": True},
    ]
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
        for m in recompute_modules_for(model)
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


# ------------------------------------------------------------------ the exact change
def _bridge_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def exact_change(base: RunSpec, cand: Candidate) -> dict[str, list[str]]:
    """The change spelled out for each way a run is configured: env, Bridge overrides,
    Megatron-LM flags, Python (for options only reachable from Python)."""
    env: list[str] = []
    bridge: list[str] = []
    flags: list[str] = []
    python: list[str] = []
    if cand.expandable:
        env.append(f"export {EXPANDABLE_ENV}")
        if base.cuda_graph_scope:
            env.append("export NCCL_GRAPH_REGISTER=0  # required with CUDA graphs on pre-Blackwell GPUs")
    changed = cand.changed_fields(base)
    for name, (_old, new) in changed.items():
        bridge.append(f"{BRIDGE_KEYS[name]}={_bridge_value(new)}")
        if name == "sequence_parallel_input_regather":
            python.append(
                "cfg.peft = LoRA(..., sequence_parallel_input_regather=True)  # keep the recipe's other LoRA settings"
            )
            continue
        flag = MEGATRON_FLAGS.get(name)
        if flag is None:
            continue
        if isinstance(new, bool):
            flags.append(flag if new else f"(remove {flag})")
        elif new is None:
            flags.append(f"(remove {flag})")
        elif isinstance(new, tuple):
            flags.append(f"{flag} {' '.join(new)}")
        else:
            flags.append(f"{flag} {new}")
    if cand.run.use_megatron_fsdp and not base.use_megatron_fsdp:
        # Megatron Bridge's FSDP enablement: both switches, ZeRO-3 style sharding, and the
        # only checkpoint format it supports (existing checkpoints need converting)
        bridge += [
            "dist.use_megatron_fsdp=true",
            "ddp.data_parallel_sharding_strategy=optim_grads_params",
            "ddp.average_in_collective=false",
            "checkpoint.ckpt_format=fsdp_dtensor",
        ]
        flags.append("--data-parallel-sharding-strategy optim_grads_params")
    return {"env": env, "bridge_overrides": bridge, "megatron_args": flags, "python": python}


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
        evaluated=single.evaluated + result.space,
        seconds=time.perf_counter() - start,
    )
