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
3. costed with :mod:`memtune.throughput_cost` (measured where the seed measured it);

and the candidates that reduce memory and fit with headroom are ranked by estimated
throughput (least slowdown first, then most headroom). ``sweep`` does the same for every
combination (the whole configuration space), for when no single step is enough.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from memtune import model_spec as ms
from memtune import run_spec as rs
from memtune import throughput_cost as tc
from memtune.run_spec import RunSpec

GIB = 1024**3

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
    return ("expandable segments does not shrink the tensors; it removes the allocator's fragmentation "
            "(reserved-but-unusable memory), so the estimate shown is the tensor + runtime peak")


def estimate_peak(model: ms.ModelSpec, run: RunSpec, expandable: bool | None) -> int:
    """Peak bytes on the most-loaded GPU, as the estimator computes them."""
    from memtune.estimator import estimate

    result = estimate(model, run)
    return int(result.peak_bytes)


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
        if run.cpu_offloading_num_layers >= model.num_layers:
            out.append(f"CPU offloading can be done only for fewer layers than num_layers {model.num_layers}")
    if run.recompute_granularity == "full" and run.cuda_graph_scope and "full_iteration" not in run.cuda_graph_scope:
        out.append("full recompute is only supported with full-iteration CUDA graphs "
                   f"(cuda_graph_scope={list(run.cuda_graph_scope)})")
    if run.tp > settings.gpus_per_node and run.tp != base.tp:
        out.append(f"TP {run.tp} would span more than one {settings.gpus_per_node}-GPU NVLink domain "
                   "(practical limit; set --gpus-per-node if your NVLink domain is larger)")
    if run.ep > 1 and not model.is_moe:
        pass  # run_spec.violations already reports it
    if run.sequence_parallel_input_regather and not base.sequence_parallel_input_regather:
        if run.peft not in ("lora", "dora"):
            out.append("sequence_parallel_input_regather is a LoRA option; this run has no LoRA/PEFT")
        else:
            if not run.sequence_parallel or run.tp == 1:
                out.append("LoRA input re-gather has no effect without sequence parallelism (TP > 1 with SP on)")
            if run.cuda_graph_scope:
                out.append("LoRA input re-gather falls back to the default path with CUDA graphs")
            if run.cpu_offloading:
                out.append("LoRA input re-gather falls back to the default path with CPU activation offload")
            if run.recompute_granularity == "full" or "mlp" in tc.recompute_set(run):
                out.append("LoRA input re-gather falls back when full-layer or selective mlp recompute overlaps it")
    if run.use_distributed_optimizer and not base.use_distributed_optimizer and run.dp * run.cp == 1:
        out.append("distributed optimizer shards over DP x CP = 1 rank: nothing to shard")
    if run.use_megatron_fsdp and not base.use_megatron_fsdp and run.dp * run.cp == 1:
        out.append("Megatron-FSDP shards over DP x CP = 1 rank: nothing to shard")
    return out


def allocator_violations(base: RunSpec) -> list[str]:
    if base.use_nccl_ub:
        return ["expandable_segments:True is incompatible with NCCL user-buffer registration (--use-nccl-ub / ddp.nccl_ub)"]
    return []


# ------------------------------------------------------------------ enumeration helpers
def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def powers_of_two_upto(n: int) -> list[int]:
    return [1 << i for i in range(0, max(1, n).bit_length()) if (1 << i) <= n]


def stage_split(model: ms.ModelSpec, pp: int) -> dict[str, int | None]:
    """Pipeline split fields for ``pp`` stages: even when possible, else a smaller last
    (or first and last) stage, as the Megatron uneven-PP settings allow."""
    n = model.num_layers
    none = {"num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": None}
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
    """No interleaving, the current VPP if it still divides, and every divisor of the
    layers per stage up to 10 chunks (more chunks only add p2p traffic)."""
    if pp == 1:
        return [None]
    per_stage = model.num_layers // pp
    options: list[int | None] = [None]
    for v in divisors(per_stage) if per_stage else []:
        if 2 <= v <= 10:
            options.append(v)
    if keep and keep > 1 and keep not in options:
        options.append(keep)
    return options


def recompute_options(model: ms.ModelSpec, base: RunSpec) -> list[dict[str, Any]]:
    """Selective sets (each module alone, pairs, all applicable) and full recompute."""
    modules = ["core_attn", "layernorm"]
    if not model.is_moe or not all(model.moe_layers()):
        modules.append("mlp")
    if model.is_moe:
        modules += ["moe_act", "moe"]
        if model.moe_shared_expert_intermediate_size:
            modules.append("shared_experts")
    if model.multi_latent_attention:
        modules.append("mla_up_proj")
    sets: list[tuple[str, ...]] = [(m,) for m in modules]
    sets += [pair for pair in itertools.combinations(modules, 2) if not ({"moe", "moe_act"} <= set(pair))]
    whole = tuple(m for m in modules if m != "moe_act") if "moe" in modules else tuple(modules)
    if len(whole) > 2:
        sets.append(whole)
    out: list[dict[str, Any]] = [{"recompute_granularity": "selective", "recompute_modules": s} for s in sets]
    out.append({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    return out


def _is_same(a: RunSpec, b: RunSpec) -> bool:
    return a == b


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
    for option in recompute_options(model, base):
        run = base.with_(**option)
        if tc.recompute_set(run) == tc.recompute_set(base) and run.recompute_granularity == base.recompute_granularity:
            continue
        label = run.recompute
        yield Candidate(f"recompute {label}", "recompute", run)
    if not base.use_distributed_optimizer and not base.use_megatron_fsdp:
        yield Candidate("distributed optimizer", "optimizer", base.with_(use_distributed_optimizer=True))
    if not base.use_megatron_fsdp:
        yield Candidate("Megatron-FSDP (optim_grads_params)", "optimizer",
                        base.with_(use_megatron_fsdp=True, use_distributed_optimizer=True))
    # pipeline: every PP that divides the GPUs left by TP x CP, each with its VPP options
    for pp in divisors(world // max(1, base.tp * base.cp)) if world % (base.tp * base.cp) == 0 else []:
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
    for tp in powers_of_two_upto(world):
        if tp == base.tp:
            continue
        run = base.with_(tp=tp, sequence_parallel=_sp_for(base, tp))
        yield Candidate(f"TP {base.tp}->{tp}", "tensor", run)
    for cp in powers_of_two_upto(world):
        if cp != base.cp:
            yield Candidate(f"CP {base.cp}->{cp}", "context", base.with_(cp=cp))
    if model.is_moe:
        # powers of two as well as the expert count's divisors, so "EP must divide the
        # experts" shows up as a rejection instead of silently missing options
        for ep in sorted(set(divisors(model.num_moe_experts or 1)) | set(powers_of_two_upto(world))):
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
                run = base.with_(cpu_offloading=True, cpu_offloading_num_layers=n)
                yield Candidate(f"CPU offloading {n} layer(s)", "offload", run)


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
        return Evaluated(Candidate("current configuration", "current", self.base), peak_bytes=peak,
                         fits=peak <= self.settings.limit_bytes, cost=cost)

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
        # expandable segments lowers what the allocator reserves, not the tensor peak
        reduces = peak < base_peak or (cand.expandable and not self.settings.expandable_segments)
        cost = tc.throughput_change(self.model, self.base, cand.run, self.table,
                                    regather_saved_fraction=saved, enables_expandable_segments=cand.expandable)
        return Evaluated(cand, peak_bytes=peak, fits=peak <= self.settings.limit_bytes,
                         reduces_memory=reduces, cost=cost)


def rank_key(e: Evaluated, settings: PlanSettings) -> tuple[float, float]:
    """Least throughput loss first; among equals, the most headroom."""
    assert e.cost is not None and e.peak_bytes is not None
    return (-round(e.cost.change, 6), float(e.peak_bytes))


def _split(evaluated: Iterable[Evaluated], settings: PlanSettings) -> tuple[list, list, list, list]:
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
    ranked.sort(key=lambda e: rank_key(e, settings))
    not_fitting.sort(key=lambda e: (e.peak_bytes, -e.cost.change if e.cost else 0))
    return ranked, not_fitting, rejected, no_saving


def plan(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings, table: tc.CostTable | None = None,
         estimator: Estimator = estimate_peak, sweep_if_needed: bool = True) -> Plan:
    """Rank the one-step changes; when none fits, also search combinations."""
    start = time.perf_counter()
    ev = Evaluator(model, base, settings, table or tc.load_costs(), estimator)
    baseline = ev.baseline()
    results = [ev.evaluate(c, baseline.peak_bytes or 0) for c in candidates(model, base, settings)]
    ranked, not_fitting, rejected, no_saving = _split(results, settings)
    combined: list[Evaluated] = []
    if not ranked and sweep_if_needed:
        combined = [e for e in sweep_evaluations(ev, baseline.peak_bytes or 0) if e.fits and e.reduces_memory]
        combined.sort(key=lambda e: rank_key(e, settings))
    return Plan(model=model, base=base, settings=settings, baseline=baseline, ranked=tuple(ranked),
                not_fitting=tuple(not_fitting), rejected=tuple(rejected), no_saving=tuple(no_saving),
                evaluated=ev.count, seconds=time.perf_counter() - start, combined=tuple(combined[:50]))


# ------------------------------------------------------------------ full sweep
def sweep_runs(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings) -> Iterator[Candidate]:
    """Every combination at the same GPU count: layout (TP, PP, VPP, CP, EP, ETP) x MBS x
    recompute x optimizer sharding. Layouts that break a divisibility rule are skipped
    here (they are the same rejections the single-step list explains one by one)."""
    world = base.world_size
    tps = [t for t in powers_of_two_upto(min(world, settings.gpus_per_node))
           if model.num_attention_heads % t == 0 and (model.multi_latent_attention or model.query_groups % t == 0)]
    cps = [c for c in powers_of_two_upto(world) if base.seq_length % (2 * c) == 0 or c == 1]
    eps = [e for e in divisors(model.num_moe_experts) if e <= world] if model.is_moe else [1]
    mbss = [m for m in range(1, base.mbs + 1) if base.mbs % m == 0]
    recomputes = [{"recompute_granularity": None}] + recompute_options(model, base)
    optimizers = [{"use_distributed_optimizer": True, "use_megatron_fsdp": False},
                  {"use_distributed_optimizer": True, "use_megatron_fsdp": True}]
    if not base.use_distributed_optimizer:
        optimizers.insert(0, {"use_distributed_optimizer": False, "use_megatron_fsdp": False})
    for tp, cp in itertools.product(tps, cps):
        if world % (tp * cp):
            continue
        rest = world // (tp * cp)
        for pp in divisors(rest):
            if pp > model.num_layers:
                continue
            split = stage_split(model, pp)
            for vpp in vpp_options(model, pp, base.vpp):
                for ep in eps:
                    per_stage = world // pp
                    for etp in sorted({1, tp}) if model.is_moe else [None]:
                        if model.is_moe and per_stage % (ep * (etp or tp)):
                            continue
                        for mbs in mbss:
                            dp = rest // pp
                            if base.gbs and base.gbs % (mbs * dp):
                                continue
                            layout = base.with_(tp=tp, cp=cp, pp=pp, vpp=vpp, ep=ep, etp=etp, mbs=mbs,
                                                sequence_parallel=_sp_for(base, tp), **split)
                            for rc, opt in itertools.product(recomputes, optimizers):
                                run = layout.with_(**rc, **opt)
                                yield Candidate(describe(base, run), "combined", run)


def describe(base: RunSpec, run: RunSpec) -> str:
    """Short label of what differs from ``base``."""
    parts = []
    for name, label in (("tp", "TP"), ("pp", "PP"), ("vpp", "VPP"), ("cp", "CP"), ("ep", "EP"), ("etp", "ETP"), ("mbs", "MBS")):
        old, new = getattr(base, name), getattr(run, name)
        if old != new:
            parts.append(f"{label} {old or '-'}->{new or '-'}")
    if (run.recompute_granularity, tc.recompute_set(run)) != (base.recompute_granularity, tc.recompute_set(base)):
        parts.append(f"recompute {run.recompute}")
    if run.use_megatron_fsdp != base.use_megatron_fsdp:
        parts.append("Megatron-FSDP" if run.use_megatron_fsdp else "no FSDP")
    elif run.use_distributed_optimizer != base.use_distributed_optimizer:
        parts.append("distributed optimizer" if run.use_distributed_optimizer else "no distributed optimizer")
    return ", ".join(parts) or "current configuration"


def sweep_evaluations(ev: Evaluator, base_peak: int) -> Iterator[Evaluated]:
    for cand in sweep_runs(ev.model, ev.base, ev.settings):
        if cand.run == ev.base:
            continue
        yield ev.evaluate(cand, base_peak)


@dataclass(frozen=True)
class SweepResult:
    evaluated: int
    legal: int
    fitting: tuple[Evaluated, ...]
    seconds: float

    @property
    def per_second(self) -> float:
        return self.evaluated / self.seconds if self.seconds else float("inf")


def sweep(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings, table: tc.CostTable | None = None,
          estimator: Estimator = estimate_peak) -> SweepResult:
    """Evaluate every combination; return the fitting ones ranked (for benchmarks and --sweep)."""
    start = time.perf_counter()
    ev = Evaluator(model, base, settings, table or tc.load_costs(), estimator)
    base_peak = ev.baseline().peak_bytes or 0
    legal = 0
    fitting: list[Evaluated] = []
    for e in sweep_evaluations(ev, base_peak):
        if not e.rejected:
            legal += 1
            if e.fits:
                fitting.append(e)
    fitting.sort(key=lambda e: rank_key(e, settings))
    return SweepResult(evaluated=ev.count, legal=legal, fitting=tuple(fitting), seconds=time.perf_counter() - start)


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
    for name, (old, new) in changed.items():
        bridge.append(f"{BRIDGE_KEYS[name]}={_bridge_value(new)}")
        if name == "sequence_parallel_input_regather":
            python.append("cfg.peft = LoRA(..., sequence_parallel_input_regather=True)  # keep the recipe's other LoRA settings")
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
        bridge.append("ddp.data_parallel_sharding_strategy=optim_grads_params")
        flags.append("--data-parallel-sharding-strategy optim_grads_params")
    return {"env": env, "bridge_overrides": bridge, "megatron_args": flags, "python": python}


def plan_sweep(model: ms.ModelSpec, base: RunSpec, settings: PlanSettings, table: tc.CostTable | None = None,
               estimator: Estimator = estimate_peak) -> Plan:
    """Like :func:`plan`, but the ranking covers every combination (the single-step
    rejections are kept so the reasons are still shown)."""
    start = time.perf_counter()
    single = plan(model, base, settings, table, estimator, sweep_if_needed=False)
    ev = Evaluator(model, base, settings, table or tc.load_costs(), estimator)
    base_peak = single.baseline.peak_bytes or 0
    swept = list(sweep_evaluations(ev, base_peak))
    expandable = [e for e in single.ranked if e.candidate.expandable]
    ranked, not_fitting, _, no_saving = _split(swept, settings)
    ranked = sorted(expandable + ranked, key=lambda e: rank_key(e, settings))
    return Plan(model=model, base=base, settings=settings, baseline=single.baseline, ranked=tuple(ranked),
                not_fitting=tuple(not_fitting), rejected=single.rejected, no_saving=tuple(no_saving),
                evaluated=single.evaluated + ev.count, seconds=time.perf_counter() - start)
