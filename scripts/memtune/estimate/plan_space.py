"""The space of changes the planner searches, and how each change is spelled.

Settings (:class:`PlanSettings`), one change (:class:`Candidate`), the legal values of each knob
(divisors, VPP options, recompute module sets, full-recompute blocks, every parallel layout of a
sweep), the start-up constraints Megatron-Core checks that ``run_spec.violations`` does not, and
the exact Megatron Bridge / Megatron-LM settings of a change. ``planner`` estimates and ranks
what this module enumerates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from memtune.estimate import throughput_cost as tc
from memtune.estimate.activations import layernorm_recompute_acts
from memtune.estimate.estimator import regather_eligible
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
    "data_parallel_sharding_strategy": "ddp.data_parallel_sharding_strategy",
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
    "data_parallel_sharding_strategy": "--data-parallel-sharding-strategy",
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


# ------------------------------------------------------------------ legality
def adapted_modules(run: RunSpec) -> set[str]:
    """The Megatron modules the run's adapters sit on (CanonicalLoRA's parts under their module)."""
    return {rs.lora_base_module(t) for t in run.lora_target_modules}


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
    needing_te = [m for m in rs.recompute_needing_te(run) if m not in rs.recompute_needing_te(base)]
    if needing_te:
        out.append(
            f"recompute {', '.join(needing_te)} on the local transformer stops at the first step without "
            "Transformer Engine (Megatron-Core's CheckpointWithoutOutput asks TE's FP8 state; check_env MT028)"
        )
    already = set(rs.start_refusals(base))  # the user's own run: the estimate warns about those
    out.extend(f"Megatron-Core refuses it: {r}" for r in rs.start_refusals(run) if r not in already)
    if run.use_megatron_fsdp and not base.use_megatron_fsdp and run.optimizer not in ("adam", "sgd"):
        out.append(f"Megatron-FSDP takes only the adam and sgd optimizers, not {run.optimizer} (Megatron-LM)")
    if run.cp > 1 and run.cp != base.cp and run.transformer_impl == "local":
        out.append("Megatron-Core's local attention supports no context parallelism (CP must be 1)")
    if run.tp > settings.gpus_per_node and run.tp != base.tp:
        out.append(
            f"TP {run.tp} would span more than one {settings.gpus_per_node}-GPU NVLink domain "
            "(practical limit; set --gpus-per-node if your NVLink domain is larger)"
        )
    if run.sequence_parallel_input_regather and not base.sequence_parallel_input_regather:
        if run.peft not in ("lora", "dora"):
            out.append("sequence_parallel_input_regather is a LoRA option; this run has no LoRA/PEFT")
        elif rs.peft_without_regather(run):
            out.append(
                f"sequence_parallel_input_regather is a LoRA() option; {rs.peft_without_regather(run)} has no such field"
            )
        elif not any(regather_eligible(run, m) for m in ("linear_qkv", "linear_fc1") if m in adapted_modules(run)):
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
                        not {"linear_qkv", "linear_fc1"} & adapted_modules(run),
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


def recompute_modules_for(model: ms.ModelSpec, run: RunSpec) -> list[str]:
    """The selective-recompute modules that exist in this model and do something in this run
    (``layernorm`` only where a norm is not fused into the GEMM after it)."""
    modules = ["core_attn"]
    if layernorm_recompute_acts(model, run):
        modules.append("layernorm")
    if not model.is_moe or not all(model.moe_layers()):
        modules.append("mlp")
    if model.is_moe:
        # moe_act re-runs the activation inside TE's grouped MLP only (not on the local spec)
        modules += ["moe_act", "moe"] if run.transformer_impl != "local" else ["moe"]
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
    modules = recompute_modules_for(model, base)
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
    # Selective recompute takes no method or layer count (Megatron-Core raises when they are set),
    # so a switch from full recompute clears them.
    out: list[dict[str, Any]] = [
        {
            "recompute_granularity": "selective",
            "recompute_modules": s,
            "recompute_method": None,
            "recompute_num_layers": None,
        }
        for s in unique
    ]
    out.append({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1})
    return out


def full_recompute_block_options(model: ms.ModelSpec, run: RunSpec) -> list[dict[str, Any]]:
    """Full recompute by method and layer count beyond ``uniform x1``: ``block`` over a
    quarter and half of a model chunk's layers (fewer layers re-run, less saved), the
    knob engineers turn when uniform full recompute is more than the gap needs. ``block``
    over all of a chunk's layers is not listed: it checkpoints every layer on its own, which
    is ``uniform x1`` under another name (same memory, same re-run)."""
    chunk = max(1, model.num_layers // max(1, run.pp * run.vpp_chunks))
    return [
        {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": n}
        for n in sorted({max(1, chunk // 4), max(1, chunk // 2)})
        if n < chunk
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


def sp_for(base: RunSpec, tp: int) -> bool:
    """Keep SP as configured; a run that moves off TP=1 gets SP (the usual pairing)."""
    if tp == 1:
        return base.sequence_parallel
    return base.sequence_parallel or base.tp == 1


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
                    sequence_parallel=tp > 1 or sp_for(base, tp),
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
    elif run.data_parallel_sharding_strategy != base.data_parallel_sharding_strategy and run.use_megatron_fsdp:
        parts.append(f"FSDP {base.data_parallel_sharding_strategy}->{run.data_parallel_sharding_strategy}")
    elif run.use_distributed_optimizer != base.use_distributed_optimizer:
        parts.append("distributed optimizer" if run.use_distributed_optimizer else "no distributed optimizer")
    return ", ".join(parts) or "current configuration"


# ------------------------------------------------------------------ the exact change
def bridge_value(value: Any) -> str:
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
            env.append("export NCCL_GRAPH_REGISTER=0  # required with CUDA graphs (TE graphs: every GPU)")
    changed = cand.changed_fields(base)
    switching_fsdp_on = cand.run.use_megatron_fsdp and not base.use_megatron_fsdp
    if switching_fsdp_on:  # its whole enablement, the strategy included, is spelled out below
        changed.pop("data_parallel_sharding_strategy", None)
    for name, (_old, new) in changed.items():
        bridge.append(f"{BRIDGE_KEYS[name]}={bridge_value(new)}")
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
    if switching_fsdp_on:
        # Megatron Bridge's FSDP enablement: both switches, ZeRO-3 style sharding, and the
        # only checkpoint format it supports (existing checkpoints need converting)
        bridge += [
            "dist.use_megatron_fsdp=true",
            "ddp.data_parallel_sharding_strategy=optim_grads_params",
            "ddp.average_in_collective=false",
            "checkpoint.ckpt_format=fsdp_dtensor",
        ]
        # Megatron-LM asserts both at start-up (arguments.py): the fsdp_dtensor checkpoint format,
        # and CUDA_DEVICE_MAX_CONNECTIONS not 1 (many TP launch scripts export 1).
        flags += ["--data-parallel-sharding-strategy optim_grads_params", "--ckpt-format fsdp_dtensor"]
        env.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP refuses the value 1")
    if base.use_megatron_fsdp and not cand.run.use_megatron_fsdp:
        # Bridge turns FSDP back on from dist.use_megatron_fsdp; Megatron-LM asserts that
        # --ckpt-format fsdp_dtensor is only used with Megatron-FSDP
        bridge += ["dist.use_megatron_fsdp=false", "checkpoint.ckpt_format=torch_dist"]
        flags.append("--ckpt-format torch_dist  # if it was fsdp_dtensor (convert existing checkpoints first)")
        if cand.run.use_distributed_optimizer:  # FSDP switched it on; say it, or it goes with FSDP
            bridge += ["ddp.use_distributed_optimizer=true", "optimizer.use_distributed_optimizer=true"]
            flags.append("--use-distributed-optimizer")
        bridge, flags = list(dict.fromkeys(bridge)), list(dict.fromkeys(flags))
    return {"env": env, "bridge_overrides": bridge, "megatron_args": flags, "python": python}
