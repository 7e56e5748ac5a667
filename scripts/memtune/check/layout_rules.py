"""MT rules about the parallel layout and the features that constrain it.

Pipeline / virtual-pipeline divisibility, interleaved-schedule micro-batch limits, world size
against TP x PP x CP, experts against EP, CPU offloading against PP / recompute / CUDA graphs,
and LoRA's sequence-parallel input re-gather. Words and order: data/check_rules.yaml.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memtune.check.facts import (
    change_text,
    cuda_graphs,
    divisors,
    peft_without_regather_view,
    regather_inputs,
    te_cuda_graphs,
)
from memtune.check.registry import Finding, make, rule
from memtune.readers import alloc_conf as ac
from memtune.readers.bridge_fields import names_local_spec
from memtune.readers.run_view import RunView
from memtune.spec.run_spec import (
    MEGATRON_LM_SHARDED_FSDP_SINCE,
    OUTPUT_DISCARDING_RECOMPUTE,
    RunSpec,
    start_refusals,
)


@rule("MT004")
def cpu_offload_with_pp(view: RunView) -> Iterable[Finding]:
    pp = view.get("pp", 1)
    if view.get("cpu_offloading") is True and isinstance(pp, int) and pp > 1:
        yield make(
            "MT004",
            view.where("cpu_offloading"),
            offload_source=f"{view.text('cpu_offloading')} at {view.where('cpu_offloading')}",
            pp=pp,
            pp_source=view.where("pp"),
            offload_off=change_text(view, "cpu_offloading", "false"),
        )


def _uneven(view: RunView) -> bool:
    return any(
        view.has(n) and view.get(n) not in (None, False, "")
        for n in ("uneven_first", "uneven_last", "pp_layout", "account_embedding", "account_loss")
    )


@rule("MT005")
def vpp_divisibility(view: RunView) -> Iterable[Finding]:
    layers, pp, vpp = view.get("num_layers"), view.get("pp", 1), view.get("vpp")
    if not all(isinstance(x, int) for x in (layers, pp, vpp)) or pp <= 1 or vpp is None or vpp <= 1 or _uneven(view):
        return
    per_rank = layers // pp
    if per_rank % vpp == 0:
        return
    options = [d for d in divisors(per_rank) if d > 1] or [1]
    suggest = min(options, key=lambda d: abs(d - vpp))
    yield make(
        "MT005",
        view.where("vpp"),
        num_layers=layers,
        pp=pp,
        per_rank=per_rank,
        vpp=vpp,
        divisors=", ".join(map(str, options)),
        change=change_text(view, "vpp", str(suggest)),
    )


@rule("MT006")
def pp_divisibility(view: RunView) -> Iterable[Finding]:
    layers, pp = view.get("num_layers"), view.get("pp", 1)
    if not isinstance(layers, int) or not isinstance(pp, int) or pp <= 1 or layers % pp == 0 or _uneven(view):
        return
    hint = (
        "num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage"
        if view.config_form != "megatron"
        else "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers"
    )
    yield make(
        "MT006",
        view.where("pp"),
        num_layers=layers,
        pp=pp,
        divisors=", ".join(map(str, divisors(layers))),
        uneven_hint=hint,
    )


@rule("MT010")
def lora_regather(view: RunView) -> Iterable[Finding]:
    if view.get("peft") not in ("lora", "dora"):
        return
    from memtune.estimate import regather  # only a LoRA run needs the decision

    regather_on = view.get("regather") is True
    peft_source = view.where("peft")
    lacking = peft_without_regather_view(view)
    if lacking:
        # DoRA and CanonicalLoRA have no re-gather option: advising the LoRA field would hand the
        # user a key their PEFT class does not have.
        if regather_on:
            # a config file's unknown key is dropped; a command-line override of it is refused
            # (Bridge applies overrides in OmegaConf struct mode)
            item = view.settings.get("regather")
            yield make(
                "MT010",
                view.where("regather"),
                severity="error" if item is not None and item.origin == "override" else None,
                variant="no_field",
                source=view.text("regather"),
                peft_class=lacking,
            )
        return
    inp = regather_inputs(view)
    decision = regather.decide(inp)
    if not regather_on:
        if decision.any_eligible:
            fix = (
                regather.hydra_override()
                if view.config_form in ("hydra", "megatron", None)
                else "peft.sequence_parallel_input_regather: true"
            )
            yield make(
                "MT010",
                peft_source,
                detail=(
                    f"LoRA with sequence parallelism (TP {inp.tp}) keeps the full gathered LoRA-A input of "
                    f"{', '.join(decision.eligible_modules)} until backward; sequence_parallel_input_regather keeps only "
                    "the sequence-local shard (seed measurement: Qwen3-8B TP2 seq 8192 saved 4.731 GB, -6.7% throughput)"
                ),
                fix=f"{fix}   # or run scripts/regather_config.py for the recipe snippet and the estimated saving",
            )
        return
    reasons = list(decision.run_fallbacks)
    if not reasons and not decision.any_eligible:
        reasons = [f"{d.module}: {d.reason}" for d in decision.decisions]
    if reasons:
        yield make(
            "MT010",
            view.where("regather"),
            severity="warning",
            detail="sequence_parallel_input_regather is set but has no effect here: " + "; ".join(reasons),
            fix="remove it (it only costs communication here), or enable the conditions it needs (TP > 1 with sequence_parallel, no CUDA graphs / CPU offload / overlapping recompute)",
        )


@rule("MT011")
def cpu_offload_with_recompute(view: RunView) -> Iterable[Finding]:
    granularity = view.get("recompute_granularity")
    if view.get("cpu_offloading") is True and granularity not in (None, "", "none", "null"):
        yield make(
            "MT011",
            view.where("cpu_offloading"),
            offload_source=f"{view.text('cpu_offloading')} at {view.where('cpu_offloading')}",
            granularity=granularity,
            recompute_source=view.where("recompute_granularity"),
            recompute_off=change_text(view, "recompute_granularity", "null", flag_value=""),
            offload_off=change_text(view, "cpu_offloading", "false"),
        )


#: What to change for each refusal of run_spec.start_refusals (keyed by a word of its text).
_REFUSAL_FIXES = (
    ("moe_grouped_gemm", "add --moe-grouped-gemm (model.moe_grouped_gemm=true) or drop moe_act"),
    ("fp8 delayed", "use an fp8 recipe other than delayed (tensorwise, mxfp8, blockwise) or drop moe_act/layernorm"),
    (
        "moe_router",
        "drop moe from recompute_modules (moe_act recomputes the experts' activation) or moe_router from cuda_graph_scope",
    ),
    ("shared_experts", "drop shared_experts from recompute_modules or turn moe_shared_expert_overlap off"),
    ("expert parallelism", "turn overlap_moe_expert_parallel_comm off, or use expert parallelism"),
    (
        "virtual pipeline",
        "add virtual pipeline stages (--num-virtual-stages-per-pipeline-rank) or turn the overlap off",
    ),
    ("token dispatcher", "use the alltoall or flex token dispatcher, or turn the overlap off"),
    (
        "overlap_moe_expert_parallel_comm",
        "keep EP overlap with selective recompute of moe_act / layernorm / core_attn, or turn the overlap off",
    ),
)


@rule("MT026")
def refused_with_another_feature(view: RunView) -> Iterable[Finding]:
    granularity = view.get("recompute_granularity")
    if granularity not in ("selective", "full"):
        granularity = None
    raw = view.get("recompute_modules")
    modules = ("core_attn",) if raw is None else tuple(str(m) for m in (raw if isinstance(raw, list) else [raw]))
    fp8 = view.get("fp8")
    fp8_on = isinstance(fp8, str) and fp8.strip().lower() not in ("", "none", "null", "false")
    scope = view.get("cuda_graph_scope") if te_cuda_graphs(view) else None
    ints = {k: view.get(k) for k in ("ep", "pp", "vpp")}
    run = RunSpec(
        world_size=1,
        ep=ints["ep"] if isinstance(ints["ep"], int) else 1,
        pp=ints["pp"] if isinstance(ints["pp"], int) else 1,
        # the older spelling gives layers per virtual stage, not the count: interleaved all the same
        vpp=ints["vpp"] if isinstance(ints["vpp"], int) else (2 if view.get("layers_per_virtual_stage") else None),
        # defaults: Megatron-LM's argument allgather, Megatron Bridge's providers alltoall
        moe_token_dispatcher_type=str(
            view.get("moe_token_dispatcher_type") or ("allgather" if view.config_form == "megatron" else "alltoall")
        ),
        recompute_granularity=granularity,
        recompute_modules=modules,
        overlap_moe_expert_parallel_comm=view.get("overlap_moe_expert_parallel_comm") is True,
        moe_shared_expert_overlap=view.get("moe_shared_expert_overlap") is True,
        cuda_graph_scope=tuple(str(x) for x in scope) if isinstance(scope, list) else (),
        fp8=(str(view.get("fp8_recipe") or "delayed").strip().lower()) if fp8_on else None,
        # Megatron-LM's switch is off unless given; a Bridge config that does not say is not judged
        moe_grouped_gemm=view.get("moe_grouped_gemm", False if view.config_form == "megatron" else None),
    )
    for refusal in start_refusals(run):
        fix = next(text for key, text in _REFUSAL_FIXES if key in refusal)
        layout = refusal.startswith("overlap_moe_expert_parallel_comm needs")
        where = view.where("overlap_moe_expert_parallel_comm" if layout else "recompute_granularity")
        setting = (
            "overlap_moe_expert_parallel_comm"
            if layout
            else f"recompute_granularity={granularity} with modules "
            + ("[" + ", ".join(modules) + "]" if granularity == "selective" else "(all)")
        )
        yield make("MT026", where, setting=setting, source=where, refusal=refusal, fix=fix)


@rule("MT028")
def output_discarding_recompute_on_local(view: RunView) -> Iterable[Finding]:
    # Megatron-LM picks the spec with --transformer-impl; Megatron Bridge with the provider's
    # transformer_layer_spec (local_layer_spec), not with model.transformer_impl
    setting = "transformer_impl" if view.get("transformer_impl") is not None else "layer_spec"
    spec = view.get(setting)
    if not (isinstance(spec, str) and names_local_spec(spec)):
        return
    if view.get("recompute_granularity") != "selective":
        return
    raw = view.get("recompute_modules")
    given = () if raw is None else tuple(str(m) for m in (raw if isinstance(raw, list) else [raw]))
    hit = [m for m in OUTPUT_DISCARDING_RECOMPUTE if m in given]
    if not hit:
        return
    kept = [m for m in given if m not in hit]
    drop = (
        change_text(view, "recompute_modules", " ".join(kept) if view.config_form == "megatron" else str(kept))
        if kept
        else "use another recompute module (core_attn, mlp)"
    )
    yield make(
        "MT028",
        view.where("recompute_modules"),
        plural="s" if len(hit) > 1 else "",
        modules=", ".join(hit),
        them="them" if len(hit) > 1 else "it",
        source=view.where("recompute_modules"),
        impl_source=f"{view.text(setting)} at {view.where(setting)}",
        fix=f"{drop}, or install Transformer Engine",
    )


@rule("MT029")
def fsdp_without_strategy(view: RunView) -> Iterable[Finding]:
    """Megatron-FSDP on with no strategy named. Bridge (v1 path) keeps Megatron-Core's default
    no_shard; Megatron-LM defaults to optim_grads_params since core_v0.18.0 and to no_shard before."""
    if view.get("use_megatron_fsdp") is not True or view.get("fsdp_strategy") is not None:
        return
    megatron = view.config_form == "megatron"
    if not megatron and view.get("fsdp_version") == 2:
        return  # Bridge's Megatron-FSDP v2 sets optim_grads_params itself
    if megatron and view.mcore_version is not None and view.mcore_version >= MEGATRON_LM_SHARDED_FSDP_SINCE:
        return
    fsdp_source = f"{view.text('use_megatron_fsdp')} at {view.where('use_megatron_fsdp')}"
    fix = change_text(view, "fsdp_strategy", "optim_grads_params") + " (or optim / optim_grads to shard less)"
    if megatron and view.mcore_version is None:
        yield make(
            "MT029", view.where("use_megatron_fsdp"), variant="unknown_version", fsdp_source=fsdp_source, fix=fix
        )
        return
    release = (
        f"Megatron-LM with megatron-core {ac.version_str(view.mcore_version)}"
        if megatron and view.mcore_version
        else "Megatron Bridge (Megatron-Core's DDP config default)"
    )
    yield make("MT029", view.where("use_megatron_fsdp"), fsdp_source=fsdp_source, release=release, fix=fix)


@rule("MT027")
def megatron_fsdp_start_checks(view: RunView) -> Iterable[Finding]:
    if view.get("use_megatron_fsdp") is not True:
        return
    fsdp_source = f"{view.text('use_megatron_fsdp')} at {view.where('use_megatron_fsdp')}"
    connections = view.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if connections is not None and connections.value.strip() == "1":
        yield make(
            "MT027",
            connections.source,
            fsdp_source=fsdp_source,
            detail=f"CUDA_DEVICE_MAX_CONNECTIONS=1 ({connections.source})",
            quote='"FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."',
            fix="unset CUDA_DEVICE_MAX_CONNECTIONS for this job (or set it above 1)",
        )
    fmt = view.get("ckpt_format")
    if isinstance(fmt, str) and ("$" in fmt or "`" in fmt):
        return  # filled in when the job runs: nothing to judge here
    megatron = view.config_form == "megatron"
    saves = view.get("ckpt_save") or view.get("ckpt_load")
    if (fmt or "torch_dist") != "fsdp_dtensor" and (megatron or (fmt is not None and saves)):
        yield make(
            "MT027",
            view.where("ckpt_format") if fmt is not None else view.where("use_megatron_fsdp"),
            fsdp_source=fsdp_source,
            detail=f"checkpoint format {fmt or 'torch_dist (the default)'}",
            quote='"Megatron-FSDP requires the fsdp_dtensor checkpointing format"',
            fix=change_text(view, "ckpt_format", "fsdp_dtensor") + " (convert existing checkpoints first)",
        )


def _microbatches(view: RunView) -> tuple[int | None, dict[str, Any]]:
    gbs, mbs, world = view.get("gbs"), view.get("mbs", 1), view.get("world_size")
    tp, pp, cp = view.get("tp", 1), view.get("pp", 1), view.get("cp", 1)
    info = {"gbs": gbs, "mbs": mbs, "world": world}
    if not all(isinstance(x, int) and x > 0 for x in (gbs, mbs, world, tp, pp, cp)):
        return None, info
    dp = world // (tp * pp * cp)
    if dp < 1:
        return None, info
    info["dp"] = dp
    return gbs // (mbs * dp), info


@dataclass(frozen=True)
class _Interleaved:
    """The interleaved schedule's numbers: PP, the micro-batch group N and where it was set,
    and M micro-batches per step (None when the batch sizes or the GPU count are not given)."""

    pp: int
    group: int
    group_source: str
    microbatches: int | None
    info: dict[str, Any]


def _interleaved(view: RunView) -> _Interleaved | None:
    pp, vpp = view.get("pp", 1), view.get("vpp")
    if not (isinstance(pp, int) and pp > 1 and isinstance(vpp, int) and vpp > 1):
        return None  # no interleaving: none of the schedule's limits applies
    m, info = _microbatches(view)
    group = view.get("microbatch_group") or pp
    group_source = view.where("microbatch_group") if view.has("microbatch_group") else "default = PP"
    return _Interleaved(pp, group, group_source, m, info)


def _group_out_of_range(s: _Interleaved) -> bool:
    return s.microbatches is not None and (s.group > s.microbatches or s.group < s.pp)


@rule("MT012")
def vpp_microbatch_group(view: RunView) -> Iterable[Finding]:
    s = _interleaved(view)
    if s is None:
        return
    m, info, pp, group = s.microbatches, s.info, s.pp, s.group
    if m is None:
        missing = [
            k
            for k, v in (("global batch", info["gbs"]), ("world size (--world-size)", info["world"]))
            if not isinstance(v, int)
        ]
        yield make(
            "MT012",
            view.where("vpp"),
            severity="info",
            group=group,
            group_source=s.group_source,
            microbatches="?",
            gbs=info["gbs"],
            mbs=info["mbs"],
            dp="?",
            pp=pp,
            fix="give "
            + " and ".join(missing or ["the batch sizes"])
            + " so the interleaved-schedule limits can be checked",
        )
        return
    if _group_out_of_range(s):
        need = max(group, pp) * info["mbs"] * info["dp"]
        drop_vpp = change_text(view, "vpp", "null", flag_value="")
        if m >= pp:
            fix = (
                f"set the micro-batch group between {pp} and {m} "
                f"({change_text(view, 'microbatch_group', str(pp))}), raise the global batch to at least {need}, or {drop_vpp}"
            )
        else:
            fix = f"raise the global batch to at least {need} ({max(group, pp)} micro-batches per step), or {drop_vpp} (no interleaving)"
        yield make(
            "MT012",
            view.where("vpp"),
            group=group,
            group_source=s.group_source,
            microbatches=m,
            gbs=info["gbs"],
            mbs=info["mbs"],
            dp=info["dp"],
            pp=pp,
            fix=fix,
        )
        return
    if m % pp == 0 or (view.mcore_version is not None and view.mcore_version >= (0, 10)):
        return
    yield make(
        "MT012",
        view.where("gbs"),
        variant="pp_multiple" if view.mcore_version is not None else "pp_multiple_unknown_version",
        mcore=ac.version_str(view.mcore_version) if view.mcore_version else "",
        microbatches=m,
        pp=pp,
        multiple=pp * info["mbs"] * info["dp"],
    )


@rule("MT016")
def vpp_microbatch_remainder(view: RunView) -> Iterable[Finding]:
    s = _interleaved(view)
    if s is None or s.microbatches is None or _group_out_of_range(s):
        return  # MT012 reports the missing batch sizes or the group out of range first
    m, group, pp = s.microbatches, s.group, s.pp
    remainder = m % group
    if 0 < remainder < pp:
        yield make(
            "MT016",
            view.where("gbs"),
            microbatches=m,
            remainder=remainder,
            pp=pp,
            group=group,
            gbs_suggest=((m // group) + 1) * group * s.info["mbs"] * s.info["dp"],
        )


@rule("MT014")
def graphs_with_offload(view: RunView) -> Iterable[Finding]:
    on, graph_source, graph_text = cuda_graphs(view)
    if on and view.get("cpu_offloading") is True:
        yield make(
            "MT014",
            graph_source,
            graph_source=f"{graph_text} at {graph_source}",
            offload_source=f"{view.text('cpu_offloading')} at {view.where('cpu_offloading')}",
            offload_off=change_text(view, "cpu_offloading", "false"),
        )


@rule("MT015")
def offload_layer_range(view: RunView) -> Iterable[Finding]:
    if view.get("cpu_offloading") is not True:
        return
    value, layers = view.get("cpu_offloading_num_layers", 0), view.get("num_layers")
    if isinstance(value, int) and isinstance(layers, int) and not 0 <= value < layers:
        yield make(
            "MT015",
            view.where("cpu_offloading_num_layers"),
            value=value,
            source=view.where("cpu_offloading_num_layers"),
            num_layers=layers,
            max_layers=layers - 1,
        )


@rule("MT022")
def world_not_divisible(view: RunView) -> Iterable[Finding]:
    from memtune.spec.run_spec import model_parallel_problem

    world = view.get("world_size")
    tp, pp, cp = view.get("tp", 1), view.get("pp", 1), view.get("cp", 1)
    if not all(isinstance(x, int) and x > 0 for x in (world, tp, pp, cp)):
        return  # unknown GPU count or a size only known at run time ($TP)
    problem = model_parallel_problem(world, tp, pp, cp)
    if problem is None:
        return
    mp = tp * pp * cp
    options = [n for n in ((world // mp) * mp, (world // mp + 1) * mp) if n > 0]
    given = [n for n in ("tp", "pp", "cp") if view.has(n)]
    sizes = ", ".join(f"{view.text(n)} at {view.where(n)}" for n in given) or "parallel sizes at their default 1"
    yield make(
        "MT022",
        view.where(given[0]) if given else view.where("world_size"),
        problem=problem,
        world_source=f"{view.text('world_size')} at {view.where('world_size')}",
        sizes=sizes,
        world=world,
        tp=tp,
        pp=pp,
        cp=cp,
        mp=mp,
        gpu_options=" or ".join(map(str, options)),
    )


@rule("MT023")
def experts_not_divisible(view: RunView) -> Iterable[Finding]:
    from memtune.spec.run_spec import expert_parallel_problem

    ep, experts = view.get("ep", 1), view.get("num_experts")
    if not (isinstance(ep, int) and ep > 1 and isinstance(experts, int) and experts > 0):
        return  # no expert parallelism, or the expert count is not in these inputs
    problem = expert_parallel_problem(experts, ep)
    if problem is None:
        return
    options = [d for d in range(1, experts + 1) if experts % d == 0 and d <= max(ep * 2, 8)][-8:]
    suggest = min(options, key=lambda d: (abs(d - ep), d))
    yield make(
        "MT023",
        view.where("ep"),
        problem=problem,
        ep_source=f"{view.text('ep')} at {view.where('ep')}",
        experts_source=f"{view.text('num_experts')} at {view.where('num_experts')}",
        num_experts=experts,
        divisors=", ".join(map(str, options)),
        change=change_text(view, "ep", str(suggest)),
    )


@rule("MT025")
def misspelt_config_key(view: RunView) -> Iterable[Finding]:
    for key, meant, source in view.misspelt:
        yield make("MT025", source, key=key, meant=meant)
