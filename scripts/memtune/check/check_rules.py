"""The MT rules: memory misconfigurations visible before a Megatron job starts.

Each rule is a small function over a :class:`~memtune.readers.run_view.RunView` that returns
findings; the words (severity, message, fix templates) live in ``data/check_rules.yaml``
so they can be reviewed and reused (references/check-rules.md documents each code).
A finding always names the line it comes from and the exact line to add or change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from memtune.estimate import regather
from memtune.readers import alloc_conf as ac
from memtune.readers.run_view import ALLOC_VARS, EnvValue, RunView, rules_data

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
GRAPH_IMPLS = ("local", "transformer_engine", "te", "full_iteration")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    message: str
    fix: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
        }


class _Safe(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def make(code: str, where: str, /, severity: str | None = None, **values: Any) -> Finding:
    """A finding for rule ``code`` at ``where`` (file:line), words filled from check_rules.yaml."""
    spec = rules_data()["rules"][code]
    message = _fill(spec["message"], values)
    fix = _fill(spec["fix"], values)
    return Finding(code, severity or spec["severity"], message, fix, where or "-")


def _fill(template: str, values: dict[str, Any]) -> str:
    """str.format with !r support, leaving unknown placeholders visible."""
    try:
        return template.format_map(_Safe(values))
    except (KeyError, ValueError, IndexError):
        return template


# ----------------------------------------------------------------- shared facts


@dataclass(frozen=True)
class AllocState:
    """The allocator variables as written, as PyTorch reads them, and as the user meant them.

    ``*_intended`` is the corrected string's parse when PyTorch rejects the written one
    (``expandable_segments:true`` -> ``expandable_segments:True``): MT007 reports the
    spelling, and the rules that depend on the setting (MT002 NCCL UB, MT003
    NCCL_GRAPH_REGISTER, MT021, MT020) judge what the run will do once it is fixed, so
    one run of check_env reports every error instead of one per fix-and-rerun.
    """

    cuda: EnvValue | None
    generic: EnvValue | None
    cuda_parsed: ac.AllocConf | None
    generic_parsed: ac.AllocConf | None
    cuda_intended: ac.AllocConf | None = None
    generic_intended: ac.AllocConf | None = None

    def effective(self, which: str) -> ac.AllocConf | None:
        """The parse the dependent rules judge: as written, else as intended."""
        parsed, intended = (
            (self.cuda_parsed, self.cuda_intended) if which == "cuda" else (self.generic_parsed, self.generic_intended)
        )
        return intended if intended is not None else parsed

    def enables_es(self, which: str) -> bool:
        parsed = self.effective(which)
        return bool(parsed and _any_enables(parsed))

    @property
    def es_source(self) -> str:
        for which, env in (("cuda", self.cuda), ("generic", self.generic)):
            parsed = self.effective(which)
            if env and parsed and _any_enables(parsed):
                if parsed is not (self.cuda_parsed if which == "cuda" else self.generic_parsed):
                    return f"{env.source}, read as {parsed.text!r} once MT007 is fixed"
                return env.source
        return "-"

    @property
    def es_where(self) -> str:
        """Just the file:line of :attr:`es_source` (a finding's ``source``)."""
        return self.es_source.split(", read as ")[0]

    def pairs(self) -> tuple[tuple[EnvValue | None, ac.AllocConf | None], ...]:
        """(variable, the parse dependent rules judge) for both names."""
        return ((self.cuda, self.effective("cuda")), (self.generic, self.effective("generic")))


def _any_enables(parsed: ac.AllocConf) -> bool:
    return any(v.accepted and v.settings.get("expandable_segments") is True for v in parsed.verdicts)


def alloc_state(view: RunView) -> AllocState:
    cuda = view.env.get("PYTORCH_CUDA_ALLOC_CONF")
    generic = view.env.get("PYTORCH_ALLOC_CONF")
    cuda_parsed = ac.parse(cuda.value, view.torch_version) if cuda else None
    generic_parsed = ac.parse(generic.value, view.torch_version) if generic else None
    return AllocState(
        cuda,
        generic,
        cuda_parsed,
        generic_parsed,
        _intended(cuda, cuda_parsed, view.torch_version),
        _intended(generic, generic_parsed, view.torch_version),
    )


def _intended(
    env: EnvValue | None, parsed: ac.AllocConf | None, version: tuple[int, ...] | None
) -> ac.AllocConf | None:
    """The parse of MT007's corrected string, when PyTorch rejects the written one and the
    correction is accepted (else None: the user's intent cannot be read)."""
    if env is None or parsed is None or parsed.accepted:
        return None
    fixed = ac.suggest_fix(env.value, parsed.rejections[0])
    if not fixed or fixed == env.value:
        return None
    intended = ac.parse(fixed, version)
    return intended if intended.accepted else None


def es_effective(view: RunView, state: AllocState) -> bool:
    """Would this PyTorch really run with expandable segments? (unknown version: be strict)"""
    if state.cuda and state.cuda_parsed and state.cuda_parsed.expandable_segments:
        # from 2.9 PYTORCH_ALLOC_CONF wins when both are set
        if state.generic and ac.alloc_conf_primary(view.torch_version) is not False:
            return bool(state.generic_parsed and state.generic_parsed.expandable_segments)
        return True
    if state.generic and state.generic_parsed and state.generic_parsed.expandable_segments:
        primary = ac.alloc_conf_primary(view.torch_version)
        ignored = ac.alloc_conf_ignored_for_cuda(view.torch_version)
        return bool(primary) and ignored is False
    return False


def es_possible(state: AllocState, version: tuple[int, ...] | None = None) -> bool:
    """Could expandable segments be on at all (for hazards: be pessimistic)?

    PYTORCH_ALLOC_CONF counts unless the release is known to predate it (< 2.9).
    """
    if state.enables_es("cuda"):
        return True
    return state.enables_es("generic") and ac.alloc_conf_primary(version) is not False


def cuda_graphs(view: RunView) -> tuple[bool, str, str]:
    """(enabled, source, text) for CUDA graphs from any spelling."""
    for name in ("enable_cuda_graph", "external_cuda_graph"):
        if view.get(name) is True:
            return True, view.where(name), view.text(name)
    impl = view.get("cuda_graph_impl")
    if isinstance(impl, str) and impl.strip().lower() in GRAPH_IMPLS:
        return True, view.where("cuda_graph_impl"), view.text("cuda_graph_impl")
    return False, "-", ""


def change_text(view: RunView, name: str, value: str, flag_value: str | None = None) -> str:
    """How to write ``name = value`` in the form the user's config already uses."""
    spec = rules_data()["settings"][name]
    item = view.settings.get(name)
    flags, paths = spec.get("flags", []), spec.get("paths", [])
    origin = item.origin if item else ("flag" if view.config_form == "megatron" else "override")
    if origin == "flag" and flags:
        if spec.get("switch"):
            return f"remove --{flags[0]}" if value in ("false", "False") else f"add --{flags[0]}"
        if flag_value == "":
            return f"remove --{flags[0]}"
        return f"--{flags[0]} {flag_value if flag_value is not None else value}"
    if paths:
        if origin == "config" and item is not None:
            return f"{paths[0]}: {value}  (in {item.source})"
        return f"{paths[0]}={value}"
    return f"--{flags[0]} {value}" if flags else f"{name}={value}"


def divisors(n: int, limit: int = 8) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0][:limit]


# ----------------------------------------------------------------- the rules

Rule = Callable[[RunView], Iterable[Finding]]
RULES: dict[str, Rule] = {}


def rule(code: str) -> Callable[[Rule], Rule]:
    def register(func: Rule) -> Rule:
        RULES[code] = func
        return func

    return register


@rule("MT007")
def malformed_alloc_conf(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    for env, parsed in ((state.cuda, state.cuda_parsed), (state.generic, state.generic_parsed)):
        if env is None or parsed is None or parsed.accepted:
            continue
        first = parsed.rejections[0]
        suggested = ac.suggest_fix(env.value, first) or "expandable_segments:True"
        rejected = ", ".join(ac.version_str(v.version) for v in parsed.rejections)
        if view.torch_version is not None or len(parsed.rejections) == len(parsed.verdicts):
            versions = ac.version_str(view.torch_version) if view.torch_version else f"(checked {rejected})"
            yield make(
                "MT007",
                env.source,
                var=env.name,
                value=env.value,
                versions=versions,
                reason=f"{first.exception}: {first.reason}",
                suggested=suggested,
            )
        else:
            accepted = ", ".join(ac.version_str(v.version) for v in parsed.verdicts if v.accepted)
            yield make(
                "MT019",
                env.source,
                var=env.name,
                value=env.value,
                accepted=accepted,
                rejected=rejected,
                reason=first.reason,
                suggested=suggested,
            )


@rule("MT001")
def expandable_segments_missing(view: RunView) -> Iterable[Finding]:
    if not view.env_given or view.get("nccl_ub") is True:
        return
    state = alloc_state(view)
    if es_effective(view, state):
        return
    if state.cuda_parsed and not state.cuda_parsed.accepted:
        return  # MT007 already covers it
    if any(
        p and p.verdicts[0].settings.get("backend") == "cudaMallocAsync"
        for p in (state.cuda_parsed, state.generic_parsed)
    ):
        return  # CUDA's own async allocator: expandable segments is a native-allocator option
    current = state.cuda.value if state.cuda else ""
    if state.cuda is None and state.generic is None:
        detail = "neither PYTORCH_CUDA_ALLOC_CONF nor PYTORCH_ALLOC_CONF is set"
        source = _command_source(view)
    elif state.cuda is None:
        assert state.generic is not None  # both None is the branch above
        detail = f"only PYTORCH_ALLOC_CONF is set, at {state.generic.source}; PyTorch before 2.9 ignores it and 2.9.x ignored it for CUDA expandable segments"
        source = state.generic.source
        current = state.generic.value
    elif state.cuda_parsed and state.cuda_parsed.verdicts[0].settings.get("expandable_segments") is False:
        detail = f"it sets expandable_segments:False at {state.cuda.source}"
        source = state.cuda.source
    else:
        detail = f"it is {state.cuda.value!r} at {state.cuda.source}"
        source = state.cuda.source
    suggested = _with_es(current, view.torch_version)
    if state.cuda is not None and state.cuda.line:
        where_hint = f"replace line {state.cuda.line} of {state.cuda.file}"
    elif view.command is not None:
        where_hint = f"add above line {view.command.line} (the training command)"
    else:
        where_hint = "in the job environment, before the training command starts"
    yield make("MT001", source, detail=detail, suggested=suggested, where_hint=where_hint)


def _with_es(current: str, version: tuple[int, ...] | None) -> str:
    """The current options plus expandable_segments:True, without the options that have no
    effect next to it (data/alloc_conf.yaml with_expandable_segments) or that older
    releases mishandle with it (MT021)."""
    fixed_in = ac.table_version("es_with_split_or_gc_fixed_in")
    risky = ("max_split_size_mb", "garbage_collection_threshold") if version is None or version < fixed_in else ()
    moot = [k for k, v in ac.table().get("with_expandable_segments", {}).items() if v.get("effect") == "moot"]
    parts = [
        p
        for p in "".join(current.split()).split(",")
        if p and not p.startswith("expandable_segments") and p.split(":")[0] not in (*risky, *moot)
    ]
    return ",".join(parts + ["expandable_segments:True"])


def _command_source(view: RunView) -> str:
    if view.command is not None and view.script is not None:
        return f"{view.script.path}:{view.command.line}"
    return "environment"


@rule("MT002")
def es_with_nccl_ub(view: RunView) -> Iterable[Finding]:
    if view.get("nccl_ub") is not True:
        return
    state = alloc_state(view)
    if not es_possible(state, view.torch_version):
        return
    yield make(
        "MT002",
        state.es_where,
        es_source=state.es_source,
        ub_source=f"{view.text('nccl_ub')} at {view.where('nccl_ub')}",
        ub_off=change_text(view, "nccl_ub", "false"),
    )


@rule("MT003")
def es_cuda_graph_without_register(view: RunView) -> Iterable[Finding]:
    on, graph_source, graph_text = cuda_graphs(view)
    if not on:
        return
    state = alloc_state(view)
    if not es_possible(state, view.torch_version):
        return
    register = view.env.get("NCCL_GRAPH_REGISTER")
    if register is not None and register.value.strip() == "0":
        return
    if view.compute_capability is not None and view.compute_capability >= 10:
        return  # Blackwell and later: the registration hazard and Megatron's guard do not apply
    cuda_text = (
        state.cuda_intended.text if state.cuda_intended is not None else (state.cuda.value if state.cuda else "")
    )
    guard_sees = "expandable_segments:True" in cuda_text
    guard_note = (
        ""
        if guard_sees
        else (
            "; the guard reads the literal text of PYTORCH_CUDA_ALLOC_CONF, which does not contain "
            '"expandable_segments:True" here, so it will not stop the run and it can fail with an illegal memory access instead'
        )
    )
    if register is not None:
        guard_note += f"; NCCL_GRAPH_REGISTER is {register.value!r} ({register.source})"
    yield make(
        "MT003",
        state.es_where,
        graph_source=f"{graph_text} at {graph_source}",
        es_source=state.es_source,
        guard_note=guard_note,
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


@rule("MT008")
def alloc_var_mismatch(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    cuda, generic = state.cuda, state.generic
    if cuda and generic:
        if cuda.value.replace(" ", "") != generic.value.replace(" ", ""):
            yield make(
                "MT008",
                generic.source,
                detail=(
                    f"PYTORCH_ALLOC_CONF={generic.value!r} ({generic.source}) and PYTORCH_CUDA_ALLOC_CONF={cuda.value!r} "
                    f"({cuda.source}) disagree: PyTorch 2.9+ uses the first, older releases and Megatron's guards read the second"
                ),
                fix=f"give both the same value, e.g. export PYTORCH_ALLOC_CONF={cuda.value}",
            )
        return
    if generic and not cuda:
        ignored = ac.alloc_conf_ignored_for_cuda(view.torch_version)
        if ignored:
            yield make(
                "MT018",
                generic.source,
                version=ac.version_str(view.torch_version),
                var=generic.name,
                source=generic.source,
                value=generic.value,
            )
            return
        yield make(
            "MT008",
            generic.source,
            detail=(
                f"only PYTORCH_ALLOC_CONF is set ({generic.source}); Megatron's NCCL_GRAPH_REGISTER / NCCL UB guards read "
                "PYTORCH_CUDA_ALLOC_CONF only, PyTorch before 2.9 ignores PYTORCH_ALLOC_CONF, and 2.9.x ignored it for CUDA "
                "expandable segments (pytorch/pytorch#183387)"
            ),
            fix=f"export PYTORCH_CUDA_ALLOC_CONF={generic.value}   # same value as PYTORCH_ALLOC_CONF",
        )
        return
    if cuda and not generic and view.torch_version is not None and ac.alloc_conf_primary(view.torch_version):
        yield make(
            "MT008",
            cuda.source,
            severity="info",
            detail=(
                f"PyTorch {ac.version_str(view.torch_version)} reads PYTORCH_ALLOC_CONF first and warns that "
                "PYTORCH_CUDA_ALLOC_CONF is deprecated; keep PYTORCH_CUDA_ALLOC_CONF (Megatron's guards read it)"
            ),
            fix=f"export PYTORCH_ALLOC_CONF={cuda.value}   # in addition, same value",
        )


@rule("MT009")
def alloc_whitespace(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    for env, parsed in ((state.cuda, state.cuda_parsed), (state.generic, state.generic_parsed)):
        if env is None or parsed is None or not parsed.has_whitespace or not parsed.accepted:
            continue
        if view.torch_version is not None and view.torch_version >= (2, 9):
            note = "drops all whitespace"
        elif view.torch_version is not None:
            note = "drops spaces (a tab or newline would stay inside the token and be rejected)"
        else:
            note = "drops spaces (2.9+ drops all whitespace; earlier releases keep tabs and reject them)"
        suggested = "".join(env.value.split())
        yield make("MT009", env.source, var=env.name, value=env.value, torch_note=note, suggested=suggested)


def _is_moe(view: RunView) -> bool:
    experts, ep = view.get("num_experts"), view.get("ep", 1)
    return (isinstance(experts, int) and experts > 1) or (isinstance(ep, int) and ep > 1)


def regather_inputs(view: RunView) -> regather.RegatherInputs:
    targets = view.get("lora_target_modules") or list(regather.DEFAULT_TARGETS)
    graphs, _, _ = cuda_graphs(view)
    pp = view.get("pp", 1) if isinstance(view.get("pp", 1), int) else 1
    layers = view.get("num_layers")
    vpp = view.get("vpp") or 1
    per_stage = (layers // max(1, pp) // max(1, vpp)) if isinstance(layers, int) else None
    return regather.RegatherInputs(
        tp=view.get("tp", 1) if isinstance(view.get("tp", 1), int) else 1,
        sequence_parallel=view.get("sequence_parallel") is True,
        targets=tuple(str(t) for t in targets),
        moe=_is_moe(view),
        cuda_graphs=graphs,
        cpu_offload_activations=view.get("cpu_offloading") is True
        and view.get("cpu_offloading_activations", True) is not False,
        recompute_granularity=view.get("recompute_granularity"),
        recompute_method=view.get("recompute_method"),
        recompute_num_layers=view.get("recompute_num_layers"),
        recompute_modules=tuple(
            view.get("recompute_modules")
            or (("core_attn",) if view.get("recompute_granularity") == "selective" else ())
        ),
        layers_per_stage=per_stage,
    )


@rule("MT010")
def lora_regather(view: RunView) -> Iterable[Finding]:
    if view.get("peft") not in ("lora", "dora"):
        return
    inp = regather_inputs(view)
    decision = regather.decide(inp)
    regather_on = view.get("regather") is True
    peft_source = view.where("peft")
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


@rule("MT012")
def vpp_microbatch_group(view: RunView) -> Iterable[Finding]:
    pp, vpp = view.get("pp", 1), view.get("vpp")
    if not (isinstance(pp, int) and pp > 1 and isinstance(vpp, int) and vpp > 1):
        return
    m, info = _microbatches(view)
    group = view.get("microbatch_group") or pp
    group_source = view.where("microbatch_group") if view.has("microbatch_group") else "default = PP"
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
            group_source=group_source,
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
    if group > m or group < pp:
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
            group_source=group_source,
            microbatches=m,
            gbs=info["gbs"],
            mbs=info["mbs"],
            dp=info["dp"],
            pp=pp,
            fix=fix,
        )
        return
    remainder = m % group
    if 0 < remainder < pp:
        yield make(
            "MT016",
            view.where("gbs"),
            microbatches=m,
            remainder=remainder,
            pp=pp,
            group=group,
            gbs_suggest=((m // group) + 1) * group * info["mbs"] * info["dp"],
        )
    if view.mcore_version is not None and view.mcore_version < (0, 10) and m % pp != 0:
        yield Finding(
            "MT012",
            "error",
            f"Megatron-Core {ac.version_str(view.mcore_version)} requires the number of micro-batches ({m}) to be divisible by "
            f"pipeline-model-parallel-size ({pp}) with the interleaved schedule",
            f"use a global batch that is a multiple of {pp * info['mbs'] * info['dp']}",
            view.where("gbs"),
        )
    elif view.mcore_version is None and m % pp != 0:
        yield Finding(
            "MT012",
            "warning",
            f"{m} micro-batches is not a multiple of PP {pp}: Megatron-Core releases before 0.10 reject this with the "
            'interleaved schedule ("number of microbatches is not divisible by pipeline-model-parallel-size")',
            f"use a global batch that is a multiple of {pp * info['mbs'] * info['dp']}, or pass --megatron-core-version",
            view.where("gbs"),
        )


@rule("MT013")
def alloc_after_command(view: RunView) -> Iterable[Finding]:
    if view.script is None or view.command is None:
        return
    for name in ALLOC_VARS + ("NCCL_GRAPH_REGISTER",):
        for late in view.script.later_settings(view.command, name):
            earlier = view.env.get(name)
            effect = (
                f"; the command runs with the earlier value {earlier.value!r} from {earlier.source}"
                if earlier
                else "; the command runs without it"
            )
            text = f"export {name}={late.value}" if late.value is not None else f"unset {name}"
            yield make(
                "MT013",
                late.source,
                var=name,
                late_line=late.line,
                cmd_line=view.command.line,
                effect=effect,
                late_text=text,
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


@rule("MT017")
def versions_unknown(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    given = state.cuda or state.generic
    if view.torch_version is None and given is not None:
        yield make(
            "MT017",
            state.es_where if state.es_where != "-" else given.source,
            what="--torch-version",
            consequence="the allocator string was checked against PyTorch 2.1, 2.8 and 2.11: rejected by all is an error (MT007), by some a warning (MT019)",
            option="--torch-version",
            module="torch",
        )
    vpp = view.get("vpp")
    if view.mcore_version is None and isinstance(vpp, int) and vpp > 1:
        yield make(
            "MT017",
            view.where("vpp"),
            what="--megatron-core-version",
            consequence="interleaved-pipeline limits of both older (< 0.10) and current Megatron-Core were applied",
            option="--megatron-core-version",
            module="megatron.core",
        )


@rule("MT020")
def alloc_notes(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    for env, parsed in state.pairs():
        if env is None or parsed is None:
            continue
        seen: set[str] = set()
        for verdict in parsed.verdicts:
            for note in verdict.notes:
                if note in seen:
                    continue
                seen.add(note)
                fix = (
                    "drop the native-allocator options, or drop backend:cudaMallocAsync (expandable segments need the native allocator)"
                    if "cudaMallocAsync" in note
                    else f"remove the ignored part from {env.name}"
                )
                yield make("MT020", env.source, var=env.name, value=env.value, note=note, fix=fix)


@rule("MT021")
def es_with_split_on_old_torch(view: RunView) -> Iterable[Finding]:
    fixed_in = ac.table()["es_with_split_or_gc_fixed_in"]
    version = view.torch_version
    if version is not None and version >= ac.table_version("es_with_split_or_gc_fixed_in"):
        return
    state = alloc_state(view)
    for env, parsed in state.pairs():
        if env is None or parsed is None or not parsed.verdicts[0].accepted:
            continue
        settings = parsed.verdicts[0].settings
        others = [k for k in ("max_split_size_mb", "garbage_collection_threshold") if k in settings]
        if settings.get("expandable_segments") is True and others:
            kept = ",".join(p for p in "".join(parsed.text.split()).split(",") if p.split(":")[0] not in others)
            yield make(
                "MT021",
                env.source,
                severity=None if version is not None else "info",
                var=env.name,
                others=" and ".join(others),
                version=ac.version_str(version) if version else "before 2.5",
                fixed_in=fixed_in,
                suggested=kept or "expandable_segments:True",
            )


@rule("MT024")
def crlf_line_endings(view: RunView) -> Iterable[Finding]:
    """Bash reads ``VALUE\r\n`` as ``VALUE\r``; the reader strips the CR so that the other
    rules still see the script, which is why this rule must say what bash will do."""
    for script, command in view.crlf_scripts:
        # the variables set to something (an unset one has no value to carry a \r)
        values = {name: s.value for name, s in script.env_for(command).items() if s.value}
        alloc = next((n for n in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") if n in values), None)
        if alloc is not None:
            last = values[alloc].split(",")[-1].split(":")[0].strip()
            rejected = (
                f'rejects it: "Expected a single True/False argument for {last}"'
                if last == "expandable_segments"
                else "reads an option value with a stray \\r at its end"
            )
            effect = f"{alloc} reaches PyTorch as {values[alloc] + chr(13)!r} and PyTorch {rejected}"
        else:
            exported = next(iter(values.items()), None)
            effect = (
                f"the exported {exported[0]} reaches the training process as {exported[1] + chr(13)!r}"
                if exported is not None
                else "every exported value and the last argument of each line end in \\r"
            )
        yield make("MT024", f"{script.path}:{script.crlf_line}", path=script.path, line=script.crlf_line, effect=effect)


ORDER = (
    "MT024",
    "MT007",
    "MT019",
    "MT001",
    "MT002",
    "MT003",
    "MT004",
    "MT022",
    "MT023",
    "MT005",
    "MT006",
    "MT008",
    "MT018",
    "MT009",
    "MT010",
    "MT011",
    "MT012",
    "MT016",
    "MT013",
    "MT014",
    "MT015",
    "MT021",
    "MT020",
    "MT017",
)


def run_all(view: RunView) -> list[Finding]:
    """Every finding, errors first, then warnings, then info (stable within a severity)."""
    findings: list[Finding] = []
    for func in RULES.values():
        findings.extend(func(view))
    rank = {code: i for i, code in enumerate(ORDER)}
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], rank.get(f.rule, 99)))
    return findings
