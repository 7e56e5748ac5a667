"""MT rules about the CUDA allocator settings and the launch script that carries them.

PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF as PyTorch parses them (per release), where the
script sets them relative to the training command, and the hazards they create with NCCL user
buffers and CUDA graphs. Words and order: data/check_rules.yaml (see memtune.check.registry).
"""

from __future__ import annotations

from collections.abc import Iterable

from memtune.check.facts import alloc_state, change_text, cuda_graphs, es_effective, es_possible, te_cuda_graphs
from memtune.check.registry import Finding, make, rule
from memtune.readers import alloc_conf as ac
from memtune.readers.run_view import ALLOC_VARS, EnvValue, RunView


def _rejected(view: RunView) -> Iterable[tuple[EnvValue, ac.AllocConf, bool]]:
    """(variable, parse, rejected by every release that matters) for each allocator variable
    PyTorch refuses: by the given release, or - version unknown - by all releases checked
    (MT007) or only some of them (MT019)."""
    state = alloc_state(view)
    for env, parsed in ((state.cuda, state.cuda_parsed), (state.generic, state.generic_parsed)):
        if env is None or parsed is None or parsed.accepted:
            continue
        yield env, parsed, view.torch_version is not None or len(parsed.rejections) == len(parsed.verdicts)


@rule("MT007")
def malformed_alloc_conf(view: RunView) -> Iterable[Finding]:
    for env, parsed, everywhere in _rejected(view):
        if not everywhere:
            continue
        first = parsed.rejections[0]
        rejected = ", ".join(ac.version_str(v.version) for v in parsed.rejections)
        versions = ac.version_str(view.torch_version) if view.torch_version else f"(checked {rejected})"
        yield make(
            "MT007",
            env.source,
            var=env.name,
            value=env.value,
            versions=versions,
            reason=f"{first.exception}: {first.reason}",
            suggested=ac.suggest_fix(env.value, first) or "expandable_segments:True",
        )


@rule("MT019")
def alloc_conf_some_releases(view: RunView) -> Iterable[Finding]:
    for env, parsed, everywhere in _rejected(view):
        if everywhere:
            continue
        first = parsed.rejections[0]
        yield make(
            "MT019",
            env.source,
            var=env.name,
            value=env.value,
            accepted=", ".join(ac.version_str(v.version) for v in parsed.verdicts if v.accepted),
            rejected=", ".join(ac.version_str(v.version) for v in parsed.rejections),
            reason=first.reason,
            suggested=ac.suggest_fix(env.value, first) or "expandable_segments:True",
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
    relaxed = view.torch_version is not None and view.torch_version >= (2, 11)
    yield make(
        "MT002",
        state.es_where,
        variant="torch_211" if relaxed else None,
        torch=".".join(str(p) for p in view.torch_version or ()),
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
    te_graphs = te_cuda_graphs(view)
    if not te_graphs and view.compute_capability is not None and view.compute_capability >= 10:
        # The local implementation's guard tests ``get_device_capability()[0] < 10``; Transformer
        # Engine's (arguments.py, TECudaGraphHelper) asserts on every GPU.
        return
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
        scope=(
            "with Transformer Engine CUDA graphs, on every GPU"
            if te_graphs
            else "with the local CUDA-graph implementation, on GPUs before Blackwell (compute capability < 10)"
        ),
        graph_source=f"{graph_text} at {graph_source}",
        es_source=state.es_source,
        guard_note=guard_note,
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
        if ac.alloc_conf_ignored_for_cuda(view.torch_version):
            return  # this release ignores it for CUDA altogether: MT018
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


@rule("MT018")
def alloc_conf_ignored_for_cuda(view: RunView) -> Iterable[Finding]:
    state = alloc_state(view)
    generic = state.generic
    if generic is None or state.cuda is not None or not ac.alloc_conf_ignored_for_cuda(view.torch_version):
        return
    yield make(
        "MT018",
        generic.source,
        version=ac.version_str(view.torch_version),
        var=generic.name,
        source=generic.source,
        value=generic.value,
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
