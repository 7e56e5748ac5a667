"""Read a bash / sbatch launch script the way bash would, without running it.

What we need from a launch script is small but must be exact about *where* each thing
comes from (a finding has to point at the line to change): the environment the training
process will see (``export`` lines, ``VAR=... cmd`` prefixes, ``env VAR=...``), and the
training command itself (behind ``srun`` / ``torchrun`` / ``python -m
torch.distributed.run`` / ``python`` / ``bash -c "..."``) with its Megatron-LM flags and
Megatron Bridge Hydra overrides. Every value keeps the line it came from.

Deliberately not a full shell: no execution, no globbing, command substitution is kept
as literal text. ``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` are expanded from assignments
seen earlier in the script (so ``--tensor-model-parallel-size $TP`` resolves), unknown
variables stay literal. A heredoc that is the job (``sbatch <<EOF``, ``bash <<'EOF'``) is
read as script text; one fed to another program is skipped. Linear time in the script length,
and the text that expansion may produce is bounded (memtune.readers.launch.budget).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from memtune.errors import InputError
from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.expansion import _ASSIGN, _expand_markers, _remember, _split_assignment
from memtune.readers.launch.lexer import _IDENT, Heredoc, _Lexer
from memtune.readers.launch.script import BRANCH_GUESS, Command, EnvSetting, LaunchScript, Span, Word, slice_spans

_PY = re.compile(r"^(?:.*/)?(?:python(?:\d+(?:\.\d+)*)?|pypy3?)$")


_KEYWORDS_DROP = {"then", "do", "while", "until", "!", "time", "exec", "nohup", "command", "builtin"}


_KEYWORDS_END = {"done", "esac", "}", "{"}


# Wrappers whose own options come before the real program.
_WRAPPERS = {
    "srun",
    "mpirun",
    "mpiexec",
    "salloc",
    "numactl",
    "taskset",
    "nsys",
    "ncu",
    "uv",
    "poetry",
    "pdm",
    "conda",
    "micromamba",
    "apptainer",
    "singularity",
    "enroot",
    "docker",
    "timeout",
    "stdbuf",
    "env",
    "xargs",
    "bash",
    "sh",
    "accelerate",
    "deepspeed",
    "ddp",
    "nemo",
    "sudo",
    "exec",
}


_TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


def _split_launcher(words: Sequence[Word]) -> tuple[tuple[str, ...], str | None, tuple[Word, ...], dict[str, str]]:
    """Find the python program behind srun/torchrun/... ; (launchers, program, args, options)."""
    launchers: list[str] = []
    options: dict[str, str] = {}
    i = 0
    n = len(words)
    while i < n:
        word = words[i].text
        base = os.path.basename(word)
        if base in ("torchrun",):
            launchers.append("torchrun")
            i += 1
            i = _skip_torchrun_options(words, i, options)
            if i < n and words[i].text == "-m" and i + 1 < n:
                return tuple(launchers), "-m " + words[i + 1].text, tuple(words[i + 2 :]), options
            if i < n:
                return tuple(launchers), words[i].text, tuple(words[i + 1 :]), options
            return tuple(launchers), None, (), options
        if _PY.match(base):
            j = i + 1
            while j < n and words[j].text.startswith("-") and words[j].text != "-m":
                if words[j].text in ("-X", "-W"):
                    j += 1
                j += 1
            if j < n and words[j].text == "-m" and j + 1 < n:
                module = words[j + 1].text
                if module in _TORCHRUN_MODULES:
                    launchers.append("python -m " + module)
                    k = _skip_torchrun_options(words, j + 2, options)
                    if k < n and words[k].text == "-m" and k + 1 < n:
                        return tuple(launchers), "-m " + words[k + 1].text, tuple(words[k + 2 :]), options
                    if k < n:
                        return tuple(launchers), words[k].text, tuple(words[k + 1 :]), options
                    return tuple(launchers), None, (), options
                return tuple(launchers), "-m " + module, tuple(words[j + 2 :]), options
            if j < n and words[j].text == "-c":
                return tuple(launchers), None, (), options
            if j < n:
                return tuple(launchers), words[j].text, tuple(words[j + 1 :]), options
            return tuple(launchers), None, (), options
        if base == "deepspeed":
            # deepspeed [options] script.py args: the first word that is no option is the program
            launchers.append("deepspeed")
            i = _skip_torchrun_options(words, i + 1, options, "deepspeed")
            if i < n and _PY.match(os.path.basename(words[i].text)):
                continue  # `deepspeed python x.py` is unusual but legal: read the python command
            if i < n and words[i].text in ("--module", "-m") and i + 1 < n:
                return tuple(launchers), "-m " + words[i + 1].text, tuple(words[i + 2 :]), options
            if i < n:
                return tuple(launchers), words[i].text, tuple(words[i + 1 :]), options
            return tuple(launchers), None, (), options
        if base in ("srun", "mpirun", "mpiexec"):
            launchers.append(base)
            i += 1
            while i < n and words[i].text.startswith("-"):
                key, eq, value = words[i].text.lstrip("-").partition("=")
                if eq:
                    options[f"{base}.{key}"] = value
                elif i + 1 < n and not words[i + 1].text.startswith("-") and not _looks_like_program(words[i + 1].text):
                    options[f"{base}.{key}"] = words[i + 1].text
                    i += 1
                i += 1
            continue
        i += 1
    return tuple(launchers), None, (), options


def _looks_like_program(text: str) -> bool:
    base = os.path.basename(text)
    return (
        bool(_PY.match(base))
        or base in ("torchrun", "bash", "sh", "uv", "nsys", "numactl", "env")
        or text.endswith((".py", ".sh"))
    )


def _skip_torchrun_options(words: Sequence[Word], i: int, options: dict[str, str], owner: str = "torchrun") -> int:
    """Record a per-node launcher's options (``torchrun.nproc_per_node``, ``deepspeed.num_gpus``)
    and return the index of the first word after them."""
    n = len(words)
    valueless = {"standalone", "no-python", "no_python", "module", "run-path", "run_path"}  # --tee / -r take a value
    if owner == "deepspeed":
        valueless = {"no_python", "no_local_rank", "no_ssh_check", "force_multi", "autotuning", "elastic_training"}
    while i < n and words[i].text.startswith("-") and words[i].text not in ("-m", "--module"):
        key, eq, value = words[i].text.lstrip("-").partition("=")
        if eq:
            options[f"{owner}.{key.replace('-', '_')}"] = value
        elif key not in valueless and i + 1 < n and not words[i + 1].text.startswith("-"):
            if words[i + 1].text.endswith(".py"):
                pass
            else:
                options[f"{owner}.{key.replace('-', '_')}"] = words[i + 1].text
                i += 1
        i += 1
    return i


def parse_text(
    text: str,
    path: str = "",
    first_line: int = 1,
    variables: Mapping[str, str] | None = None,
    variable_lines: Mapping[str, int] | None = None,
    budget: _Budget | None = None,
    spans: Sequence[Span] = (),
) -> LaunchScript:
    """Parse launch-script ``text``; ``path`` is used in sources (``file:line``).

    Raises ExpansionTooLarge when expanding variables would outgrow MAX_EXPANSION_CHARS.
    """
    budget = budget or _Budget(path)
    env: list[EnvSetting] = []
    commands: list[Command] = []
    notes: list[str] = []
    known: dict[str, str] = dict(variables or {})
    known_lines: dict[str, Any] = dict(variable_lines or {})  # name -> line, or [(array part, line), ...]
    branches = _Branches()
    lexer = _Lexer(text, first_line, budget, spans)
    auto_export = False
    sbatch: dict[str, tuple[str, int]] = {}
    _define_slurm_variables(text, first_line, known, known_lines, budget)
    loops: dict[str, tuple[str, ...]] = {}  # loop variable -> the values its passes take (when they differ)
    while True:
        item = lexer.next_command(known)
        if lexer.heredocs:
            docs, lexer.heredocs = lexer.heredocs, []
            for doc in docs:
                if branches.active and _runs_as_script(doc.owner):
                    exported = _exported(env, auto_export)
                    job = _read_heredoc(doc, path, known, known_lines, budget, exported)
                    env.extend(job.env)
                    commands.extend(job.commands)
                    notes.extend(job.notes)
                    sbatch.update(job.sbatch)
        if item is None:
            break
        words, sep = item
        if any("\0" in w.text for w in words):
            words = _expand_markers(words, known, known_lines, budget)
        words = branches.step(words, sep)
        if branches.settled:
            _settle(budget, branches)
        if not branches.active:
            continue
        while words and words[0].text in _KEYWORDS_DROP and not words[0].quoted:
            words = words[1:]
        if not words or (words[0].text in _KEYWORDS_END and not words[0].quoted):
            continue
        # leading NAME=value words
        prefixes: list[Word] = []
        while words and _ASSIGN.match(words[0].text) and not words[0].text.startswith(("'", '"')):
            prefixes.append(words[0])
            words = words[1:]
        if not words:
            for word in prefixes:
                name, value = _split_assignment(word.text, known)
                _remember(known, known_lines, name, value, word)
                _note_origin(budget, branches, name, word, known[name])
                env.append(EnvSetting(name, value, word.line, "export" if auto_export else "shell", file=path))
            continue
        head = words[0].text
        if head == "for" and not words[0].quoted and len(words) >= 3 and words[2].text == "in":
            _for_loop(words, known, known_lines, loops, budget, branches, env, notes, path)
            continue
        if head == "read" and not words[0].quoted:
            _read_builtin(words, prefixes, known, known_lines, loops, budget, branches, env, notes, path)
            continue
        if head in ("export", "declare", "typeset", "local", "readonly") and not words[0].quoted:
            exporting = head == "export"
            args = list(words[1:])
            flags = [w.text for w in args if w.text.startswith("-")]
            if head != "export" and any("x" in f for f in flags):
                exporting = True
            if head == "export" and "-n" in flags:
                exporting = False
            for word in args:
                if word.text.startswith("-"):
                    continue
                if _ASSIGN.match(word.text):
                    name, value = _split_assignment(word.text, known)
                    _remember(known, known_lines, name, value, word)
                    _note_origin(budget, branches, name, word, known[name])
                    env.append(
                        EnvSetting(name, value, word.line, "export" if exporting or auto_export else "shell", file=path)
                    )
                elif _IDENT.fullmatch(word.text) and exporting:
                    env.append(EnvSetting(word.text, None, word.line, "export", file=path))
            continue
        if head == "unset" and not words[0].quoted:
            for word in words[1:]:
                if _IDENT.fullmatch(word.text):
                    known.pop(word.text, None)
                    env.append(EnvSetting(word.text, None, word.line, "unset", file=path))
            continue
        if head == "set" and len(words) > 1:
            for word in words[1:]:
                if word.text.startswith("-") and "a" in word.text and not word.text.startswith("--"):
                    auto_export = True
                elif word.text.startswith("+") and "a" in word.text:
                    auto_export = False
            continue
        if head in ("source", ".") and len(words) > 1:
            notes.append(f"{path or 'script'}:{words[0].line}: sources {words[1].text}; its settings are not followed")
            continue
        # `env A=B cmd`
        if head == "env" or head.endswith("/env"):
            rest = list(words[1:])
            while rest and (rest[0].text.startswith("-") or _ASSIGN.match(rest[0].text)):
                if _ASSIGN.match(rest[0].text):
                    prefixes.append(rest[0])
                rest = rest[1:]
            words = rest
            if not words:
                continue
        command_line = words[0].line
        prefix_settings = []
        for word in prefixes:
            name, value = _split_assignment(word.text, known)
            prefix_settings.append(EnvSetting(name, value, word.line, "prefix", command_line=command_line, file=path))
        env.extend(prefix_settings)
        # bash -c "..." / sh -c "...": parse the inner script too
        inner = _inner_script(words)
        if inner is not None:
            sub = parse_text(inner.text, path, inner.line, known, known_lines, budget, inner.spans)
            # `srun --nodes=4 --ntasks-per-node=4 bash -c "..."`: srun's options still decide
            # how many copies of the inner command run
            outer_launchers, _, _, outer_options = _split_launcher(words)
            for setting in sub.env:
                env.append(setting)
                if setting.value is not None:
                    known[setting.name] = setting.value
            for cmd in sub.commands:
                commands.append(
                    Command(
                        cmd.words,
                        tuple(prefix_settings) + cmd.env_prefix,
                        outer_launchers + cmd.launcher,
                        cmd.program,
                        cmd.program_args,
                        {**outer_options, **cmd.launcher_options},
                        # words expanded from a variable set before the inner script run where
                        # the expansion stands in it: at the latest, its end
                        inner.line + inner.text.count("\n") if cmd.line < inner.line else cmd.run_line,
                    )
                )
            notes.extend(sub.notes)
            continue
        launchers, program, program_args, options = _split_launcher(words)
        commands.append(Command(tuple(words), tuple(prefix_settings), launchers, program, program_args, options))
    sbatch = {**lexer.sbatch, **sbatch}
    return LaunchScript(
        path, tuple(env), tuple(commands), sbatch, tuple(notes), lexer.unclosed, None, dict(budget.substitutions)
    )


_LOOP_VALUE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def _assign(
    name: str,
    value: str,
    line: int,
    known: dict[str, str],
    known_lines: dict[str, Any],
    budget: _Budget,
    branches: _Branches,
    env: list[EnvSetting],
    path: str,
) -> None:
    """Record ``name=value`` made by a builtin (``for``, ``read``) as a plain assignment."""
    word = Word(f"{name}={value}", line, False)
    _remember(known, known_lines, name, value, word)
    _note_origin(budget, branches, name, word, value)
    env.append(EnvSetting(name, value, line, "shell", file=path))


def _for_loop(
    words: Sequence[Word],
    known: dict[str, str],
    known_lines: dict[str, Any],
    loops: dict[str, tuple[str, ...]],
    budget: _Budget,
    branches: _Branches,
    env: list[EnvSetting],
    notes: list[str],
    path: str,
) -> None:
    """``for NAME in a b c``: the body is read once, so NAME is known only when every pass
    gives it the same value; otherwise its values are kept, and what the body derives from
    them (``read TP PP <<< "$NAME"``) is known where all passes agree."""
    name = words[1].text
    values = tuple(w.text for w in words[3:] if w.text not in (";", "do"))
    if not _IDENT.fullmatch(name) or not values or any("$" in v or "`" in v or "\0" in v for v in values):
        known.pop(name, None)
        loops.pop(name, None)
        return
    if len(set(values)) == 1:
        loops.pop(name, None)
        _assign(name, values[0], words[0].line, known, known_lines, budget, branches, env, path)
        return
    known.pop(name, None)
    loops[name] = values
    notes.append(
        f"{path or 'script'}:{words[0].line}: the loop runs {len(values)} passes with {name} = "
        + ", ".join(values[:6])
        + ("..." if len(values) > 6 else "")
        + "; a value that differs between passes is only known per pass"
    )


def _read_builtin(
    words: Sequence[Word],
    prefixes: Sequence[Word],
    known: dict[str, str],
    known_lines: dict[str, Any],
    loops: dict[str, tuple[str, ...]],
    budget: _Budget,
    branches: _Branches,
    env: list[EnvSetting],
    notes: list[str],
    path: str,
) -> None:
    """``IFS=',' read -r A B C <<< "$X"``: split the here-string as bash would (the last name
    takes the rest). From a loop variable, each name is known when every pass splits to the
    same value for it; a name whose value differs, or a read from stdin, stays unknown."""
    names: list[str] = []
    data: Word | None = None
    i = 1
    while i < len(words):
        text = words[i].text
        if text == "<<<":
            data = words[i + 1] if i + 1 < len(words) else None
            break
        if text in ("-a", "-d", "-n", "-N", "-p", "-t", "-u"):
            i += 2
            continue
        if not text.startswith("-") and _IDENT.fullmatch(text):
            names.append(text)
        i += 1
    for name in names:
        known.pop(name, None)
        loops.pop(name, None)
    if data is None or not names:
        return
    ifs = " \t\n"
    for word in prefixes:
        if word.text.startswith("IFS="):
            ifs = _split_assignment(word.text, known)[1] or ifs

    def split(text: str) -> list[str]:
        pieces = re.split("[" + re.escape(ifs) + "]", text.strip(" \t\n"), maxsplit=len(names) - 1)
        return pieces + [""] * (len(names) - len(pieces))

    passes: list[list[str]]
    source = _LOOP_VALUE.match(data.text)
    if "$" not in data.text and "`" not in data.text:
        passes = [split(data.text)]
    elif source is not None and source.group(1) in loops:
        passes = [split(value) for value in loops[source.group(1)]]
    else:
        return
    for idx, name in enumerate(names):
        got = {p[idx] for p in passes}
        if len(got) == 1:
            _assign(name, got.pop(), data.line, known, known_lines, budget, branches, env, path)
        else:
            loops[name] = tuple(p[idx] for p in passes)


def _define_slurm_variables(
    text: str, first_line: int, known: dict[str, str], known_lines: dict[str, Any], budget: _Budget
) -> None:
    """The ``SLURM_*`` variables a job submitted with this text's ``#SBATCH`` lines starts with
    (``--nodes=24`` -> ``SLURM_NNODES=24``), each remembering the directive it came from; a
    variable the script or its submitter already set is left alone."""
    if "#SBATCH" not in text:
        return
    from memtune.readers.launch.world import SLURM_SOURCE, sbatch_directives, slurm_variables

    for name, (value, line, directive) in slurm_variables(sbatch_directives(text)).items():
        if name in known:
            continue
        line += first_line - 1
        known[name] = value
        known_lines[name] = line
        budget.origins[name] = (f"${name} = {value}, {SLURM_SOURCE} {directive} (line {line})",)


_SHELLS = {"bash", "sh", "zsh", "dash"}


_BEFORE_SHELL = {"srun", "salloc", "nohup", "env", "time", "exec", "command", "stdbuf", "timeout"}


def _runs_as_script(owner: Sequence[Word]) -> bool:
    """Is a heredoc fed to this command the job's own script (``sbatch <<EOF``, ``bash <<'EOF'``,
    ``srun bash <<EOF``)? A shell given ``-c`` or a script file reads no script from stdin,
    and a heredoc for any other program (``cat > f``, ``python -``) is data, not shell."""
    texts = [w.text for w in owner if not _ASSIGN.match(w.text)]
    i = 0
    while i < len(texts):
        base = os.path.basename(texts[i])
        if base == "sbatch":
            return True
        if base in _SHELLS:
            rest = texts[i + 1 :]
            if "-s" in rest:
                return True
            inline = any(t.startswith("-") and not t.startswith("--") and "c" in t[1:] for t in rest)
            return not inline and all(t.startswith(("-", "+")) for t in rest)
        if base not in _BEFORE_SHELL:
            return False
        # `srun --nodes 1 bash`: its options (some with values) come before the shell
        shell = next((j for j in range(i + 1, len(texts)) if os.path.basename(texts[j]) in _SHELLS), None)
        if shell is None or any(_PY.match(os.path.basename(t)) or t.endswith(".py") for t in texts[i + 1 : shell]):
            return False
        i = shell
    return False


def _exported(env: Sequence[EnvSetting], auto_export: bool) -> set[str]:
    """Names exported so far: the environment a job started from here inherits."""
    names: set[str] = set()
    for setting in env:
        if setting.how == "export" or (auto_export and setting.how == "shell"):
            names.add(setting.name)
        elif setting.how == "unset":
            names.discard(setting.name)
    return names


def _read_heredoc(
    doc: Heredoc,
    path: str,
    known: Mapping[str, str],
    known_lines: Mapping[str, Any],
    budget: _Budget,
    exported: set[str],
) -> LaunchScript:
    """The job script a heredoc holds, read as bash would run it; nothing is executed.

    With an unquoted delimiter bash first expands ``$VAR`` / ``${...}`` / ``$((...))`` in the
    body from the submitting shell (quotes are plain text at that step; a backslash keeps
    a ``$`` for the job). With a quoted one (``<<'EOF'``) the body is taken as written. Either way
    the job is a new shell: it sees only the exported variables and its own assignments, so
    anything else stays ``$VAR`` (only known when the job runs).
    """
    environment = {name: known[name] for name in exported if name in known}
    lines = {name: known_lines[name] for name in environment if name in known_lines}
    if doc.quoted:
        return parse_text(doc.body, path, doc.first_line, environment, lines, budget)
    text, spans = _expand_heredoc(doc, known, known_lines, budget)
    return parse_text(text, path, doc.first_line, environment, lines, budget, spans)


def _expand_heredoc(
    doc: Heredoc, known: Mapping[str, str], known_lines: Mapping[str, Any], budget: _Budget
) -> tuple[str, list[Span]]:
    """The first step of an unquoted heredoc: expansions filled in, quotes left as text."""
    body = doc.body
    lexer = _Lexer(body, doc.first_line, budget)
    out: list[str] = []
    spans: list[Span] = []
    size = 0
    line = doc.first_line
    i, n = 0, len(body)

    def emit(text: str, pieces: Sequence[Span]) -> None:
        nonlocal size
        out.append(text)
        spans.extend(Span(p.start + size, p.end + size, p.line, p.notes) for p in pieces)
        size += len(text)

    while i < n:
        ch = body[i]
        if ch == "\\" and i + 1 < n and body[i + 1] in "$`\\\n":
            if body[i + 1] == "\n":
                line += 1
            else:
                emit(body[i + 1], [Span(0, 1, line)])
            i += 2
            continue
        if ch == "$":
            lexer.i, lexer.line = i, line
            text, end = lexer._expand(i, known)
            line = lexer.line
            pieces = list(lexer.last_spans)
            if "\0" in text:
                elements = _expand_markers([Word(text, line, False, (), tuple(pieces))], known, known_lines, budget)
                for idx, element in enumerate(elements):
                    emit(element.text, [Span(0, len(element.text), element.line, element.assumed)])
                    if idx < len(elements) - 1:
                        emit(" ", [])
            else:
                emit(text, pieces)
            i = end
            continue
        stop = i + 1
        while stop < n and body[stop] not in "\\$\n":
            stop += 1
        emit(body[i:stop], [Span(0, stop - i, line)])
        if stop < n and body[stop] == "\n":
            emit("\n", [Span(0, 1, line)])
            line += 1
            stop += 1
        i = stop
    return "".join(out), spans


class _Branches:
    """if / elif / else / fi and case / esac, with conditions evaluated when every operand is known.

    A branch whose condition is known false is skipped; an unknown condition keeps every
    branch (the conservative reading: settings from all of them are seen). A ``case`` on a
    known word takes the first clause whose pattern matches, as bash does (Megatron-LM's
    Mamba example picks its model size this way; reading every clause would take the last).
    A condition may be a list (``[ a ] && [ b ] || [[ c ]]``): its parts arrive as separate
    commands and are gathered until the list ends. Each branch that may run remembers the
    variables it sets, so a variable every branch sets to the same value is no guess.
    """

    def __init__(self) -> None:
        # [this branch: True/False/None, some branch taken: True/False/None] for `if`;
        # a `case` frame adds [subject or None when unknown, "patterns" | "body", patterns so far]
        self.frames: list[list[Any]] = []
        # per frame: what each branch that may run sets (None for a branch that cannot run),
        # and whether the branches cover every case (an `else`, a `*)` clause)
        self.sets: list[list[dict[str, tuple[str, tuple[str, ...]]] | None]] = []
        self.exhaustive: list[bool] = []
        self.clause_ends = False  # the command just read ended a case clause (`;;`)
        self.pending: tuple[str, list[tuple[Sequence[Word], str]]] | None = None  # condition list being read
        self.settled: dict[str, tuple[str, tuple[str, ...]]] = {}  # set alike in every branch (read by the caller)

    @property
    def active(self) -> bool:
        return all(frame[0] is not False for frame in self.frames)

    @property
    def uncertain(self) -> bool:
        """Inside a branch that may or may not run (its condition is unknown)?"""
        return any(frame[0] is None for frame in self.frames)

    def record(self, name: str, value: str, notes: tuple[str, ...]) -> None:
        """An assignment in the current branch (``notes``: what the value assumes, no branch guess)."""
        if self.sets and self.sets[-1] and self.sets[-1][-1] is not None:
            branch = self.sets[-1][-1]
            assert branch is not None
            branch[name] = (value, notes)

    def _begin_branch(self, state: bool | None) -> None:
        self.sets[-1].append(None if state is False else {})

    def _push(self, frame: list[Any]) -> None:
        self.frames.append(frame)
        self.sets.append([])
        self.exhaustive.append(False)

    def _pop(self) -> None:
        """Close the innermost if/case: what every branch that may run sets alike stands.

        Such a variable is set in the enclosing branch as surely as if the if/case were not
        there; at the top level the caller drops the branch guess from it.
        """
        self.frames.pop()
        branches = self.sets.pop()
        exhaustive = self.exhaustive.pop()
        runnable = [b for b in branches if b is not None]
        if not runnable or not exhaustive:
            return
        first, rest = runnable[0], runnable[1:]
        same = {name: got for name, got in first.items() if all(b.get(name, (None,))[0] == got[0] for b in rest)}
        if not same:
            return
        if self.sets:
            parent = self.sets[-1][-1] if self.sets[-1] else None
            if parent is not None:
                parent.update(same)
        else:
            self.settled.update(same)

    def step(self, words: list[Word], sep: str) -> list[Word]:
        """Consume leading if/elif/else/fi and case words; return what is left to run."""
        if self.pending is not None:
            head, parts = self.pending
            parts.append((words, sep))
            if sep in ("&&", "||"):
                return []
            self.pending = None
            self._condition_ends(head, _condition(parts))
            return []
        if self.clause_ends:
            self.clause_ends = False
            if self.frames and len(self.frames[-1]) > 2:
                self.frames[-1][0], self.frames[-1][3], self.frames[-1][4] = False, "patterns", []
        if self.frames and len(self.frames[-1]) > 2:
            words = self._case_step(words, sep)
            if not words:
                return []
        if words and not words[0].quoted and words[0].text == "case" and len(words) >= 3:
            subject = words[1].text
            known = not any(mark in subject for mark in ("$", "`", "\0"))
            self._push([False, False, subject if known else None, "patterns", []])
            rest = words[3:] if words[2].text == "in" else []
            return self._case_step(rest, sep) if rest else []
        while words and not words[0].quoted and words[0].text in ("if", "elif", "else", "fi", "then"):
            head = words[0].text
            if head == "then":
                words = words[1:]
                continue
            if head in ("if", "elif"):
                if head == "elif" and not self.frames:
                    return []
                if sep in ("&&", "||"):
                    self.pending = (head, [(words[1:], sep)])
                    return []
                self._condition_ends(head, _condition([(words[1:], sep)]))
                return []
            if head == "fi":
                if self.frames:
                    self._pop()
                words = words[1:]
                continue
            if not self.frames:
                words = words[1:]
                continue
            frame = self.frames[-1]
            taken = frame[1]
            # else
            frame[0] = False if taken is True else (True if taken is False else None)
            frame[1] = True if frame[0] is True else taken
            self._begin_branch(frame[0])
            self.exhaustive[-1] = True
            words = words[1:]
        return words

    def _condition_ends(self, head: str, cond: bool | None) -> None:
        """The condition of an ``if`` / ``elif`` is read: open the branch it guards."""
        if head == "if":
            cond = cond if self.active else False
            self._push([cond, cond])
            self._begin_branch(cond)
            return
        frame = self.frames[-1]
        taken = frame[1]
        branch = False if taken is True else (cond if taken is False else (None if cond is not False else False))
        frame[0] = branch
        frame[1] = True if branch is True else (None if branch is None or taken is None else taken)
        self._begin_branch(branch)

    def _case_step(self, words: list[Word], sep: str) -> list[Word]:
        """Inside a case: collect ``pat | pat )`` patterns, open the clause, or close at ``esac``."""
        frame = self.frames[-1]
        if frame[3] == "body":
            if words and not words[0].quoted and words[0].text == "esac":
                self._pop()
                return words[1:]
            if sep == ";;":
                self.clause_ends = True
            return words
        if words and not words[0].quoted and words[0].text == "esac":
            self._pop()
            return words[1:]
        frame[4].extend(w.text for w in words if w.text != "(")
        if sep != ")":
            return []  # `a | b )`: more patterns follow
        patterns, frame[4] = frame[4], []
        subject, taken = frame[2], frame[1]
        if taken is True:
            branch: bool | None = False
        elif subject is None or any("$" in p or "`" in p for p in patterns):
            branch = None
        else:
            branch = any(fnmatch.fnmatchcase(subject, p) for p in patterns)
        if branch is False and taken is None:
            branch = False
        frame[0], frame[3] = branch, "body"
        frame[1] = True if branch is True else (None if branch is None or taken is None else taken)
        self._begin_branch(branch)
        if "*" in patterns:
            self.exhaustive[-1] = True
        return []


def _note_origin(budget: _Budget, branches: _Branches, name: str, word: Word, value: str) -> None:
    """Remember what the new value of ``name`` assumes, so every word made from it says so.

    A value built from an unset variable's default, or set in a branch whose condition is
    only known at run time (the reader keeps the last such value), is a guess the helpers
    must show next to the setting it feeds, never use silently.
    """
    notes = list(word.assumed)
    appended = "+=" in word.text.split("=", 1)[0] + "="
    previous_spans = budget.spans.get(name)
    previous_notes = budget.origins.get(name, ())
    if appended:
        notes = list(budget.origins.get(name, ())) + notes
    branches.record(name, value, tuple(dict.fromkeys(notes)))
    guess: tuple[str, ...] = ()
    if branches.uncertain:
        guess = (f"{name} is set on line {word.line} {BRANCH_GUESS}; the last value the script sets was used",)
        notes.extend(guess)
    if notes:
        budget.origins[name] = tuple(dict.fromkeys(notes))
    else:
        budget.origins.pop(name, None)
    budget.spans.pop(name, None)
    if value.startswith("("):
        return  # arrays keep each part's own line (expansion._remember) and are read when used
    own_start = word.text.index("=") + 1
    own_len = len(word.text) - own_start
    own = slice_spans(word.spans, own_start, len(word.text), len(value) - own_len - own_start)
    before: list[Span] = []
    if appended and len(value) > own_len:
        old_len = len(value) - own_len
        before = [Span(0, old_len, word.line, previous_notes)]
        kept = previous_spans
        if kept is not None and kept[0] == value[:old_len]:
            before = list(kept[1])
    spans = [Span(sp.start, sp.end, sp.line, tuple(dict.fromkeys(sp.notes + guess))) for sp in before + own]
    budget.spans[name] = (value, tuple(spans))


def _settle(budget: _Budget, branches: _Branches) -> None:
    """Variables every branch of an undecided if/case set to the same value are no guess."""
    for name, (_, notes) in branches.settled.items():
        if notes:
            budget.origins[name] = notes
        else:
            budget.origins.pop(name, None)
        kept = budget.spans.get(name)
        if kept is not None:
            own = f"{name} is set on line "
            spans = tuple(
                Span(
                    sp.start,
                    sp.end,
                    sp.line,
                    tuple(n for n in sp.notes if not (n.startswith(own) and BRANCH_GUESS in n)),
                )
                for sp in kept[1]
            )
            budget.spans[name] = (kept[0], spans)
    branches.settled.clear()


def _condition(parts: Sequence[tuple[Sequence[Word], str]]) -> bool | None:
    """An if/elif condition list (``[ a ] && [[ b || c ]] || test d``) when every operand is known.

    Parts joined by ``&&`` / ``||`` (the lexer splits there, even inside ``[[ ]]``) are
    evaluated left to right with bash's precedence; an unknown part makes the result unknown
    unless the other side decides it (``false && x`` is false whatever x is).
    """
    tokens: list[tuple[str, bool]] = []
    for words, sep in parts:
        # a word made from a value picked between undecided branches is as unknown as `$X`
        tokens.extend(("$?" if any(BRANCH_GUESS in n for n in w.assumed) else w.text, False) for w in words)
        if sep in ("&&", "||"):
            tokens.append((sep, True))
    reader = _ConditionReader(tokens)
    try:
        result = reader.command_list()
    except _Unreadable:
        return None
    return result if reader.at_end() else None


class _Unreadable(Exception):
    """A condition the reader does not understand (it is then unknown, never guessed)."""


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return False if a is False and b is False else None


class _ConditionReader:
    """Recursive descent over a condition's words; ``(text, True)`` tokens are ``&&`` / ``||``."""

    def __init__(self, tokens: Sequence[tuple[str, bool]]) -> None:
        self.tokens = list(tokens)
        self.i = 0

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def _peek(self) -> tuple[str, bool] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def command_list(self) -> bool | None:
        """``cmd (&&|| cmd)*``: in a shell list both operators bind alike, left to right."""
        result = self._command()
        while (token := self._peek()) is not None and token[1]:
            self.i += 1
            right = self._command()
            result = _and(result, right) if token[0] == "&&" else _or(result, right)
        return result

    def _command(self) -> bool | None:
        token = self._peek()
        if token is None or token[1]:
            raise _Unreadable
        if token[0] == "!":
            self.i += 1
            inner = self._command()
            return None if inner is None else not inner
        if token[0] == "[[":
            self.i += 1
            result = self._double_or()
            if self._peek() != ("]]", False):
                raise _Unreadable
            self.i += 1
            return result
        if token[0] in ("[", "test"):
            closer = "]" if token[0] == "[" else None
            self.i += 1
            words = self._words_until(closer)
            if closer is not None:
                if self._peek() != ("]", False):
                    raise _Unreadable
                self.i += 1
            return _primary(words)
        self._words_until(None)  # some other command (grep -q ...): its status is unknown
        return None

    def _words_until(self, closer: str | None) -> list[str]:
        words: list[str] = []
        while (token := self._peek()) is not None and not token[1] and token[0] != closer:
            words.append(token[0])
            self.i += 1
        return words

    def _double_or(self) -> bool | None:
        """Inside ``[[ ]]``: ``&&`` binds tighter than ``||``."""
        result = self._double_and()
        while self._peek() == ("||", True):
            self.i += 1
            result = _or(result, self._double_and())
        return result

    def _double_and(self) -> bool | None:
        result = self._double_not()
        while self._peek() == ("&&", True):
            self.i += 1
            result = _and(result, self._double_not())
        return result

    def _double_not(self) -> bool | None:
        if self._peek() == ("!", False):
            self.i += 1
            inner = self._double_not()
            return None if inner is None else not inner
        words: list[str] = []
        while (token := self._peek()) is not None and not token[1] and token[0] != "]]":
            words.append(token[0])
            self.i += 1
        return _primary(words)


_NUMERIC = {"-eq", "-ne", "-lt", "-gt", "-le", "-ge"}


def _primary(inner: Sequence[str]) -> bool | None:
    """One test (``a == b``, ``-z a``, ``a -lt b``, a lone word) when its operands are known."""
    if inner[:1] == ["!"]:
        rest = _primary(inner[1:])
        return None if rest is None else not rest
    if any("$" in t or "`" in t or "\0" in t for t in inner):
        return None
    if len(inner) == 0:
        return False
    if len(inner) == 1:
        return inner[0] != ""  # `[ word ]`: true when the word is not empty
    if len(inner) == 2 and inner[0] in ("-z", "-n"):
        return (inner[1] == "") == (inner[0] == "-z")
    if len(inner) == 3 and inner[1] in ("==", "=", "!="):
        if any(ch in inner[2] for ch in "*?[") and inner[1] != "=":
            return None  # glob pattern
        return (inner[0] == inner[2]) != (inner[1] == "!=")
    if len(inner) == 3 and inner[1] in _NUMERIC:
        try:
            a, b = int(inner[0]), int(inner[2])
        except ValueError:
            return None
        return {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-gt": a > b, "-le": a <= b, "-ge": a >= b}[inner[1]]
    return None


def _inner_script(words: Sequence[Word]) -> Word | None:
    """The script text of ``bash [options] -c "..."`` (``-lc``, ``-x -c``, ``-o pipefail -c`` ...).

    Bash reads its options first; with ``-c`` among them the first word that is no option
    is the script. Anything else (``bash train.sh``, ``bash -x``) has no inline script.
    """
    for idx, word in enumerate(words[:-1]):
        if os.path.basename(word.text) not in ("bash", "sh", "zsh", "dash"):
            continue
        has_c = False
        j = idx + 1
        while j < len(words):
            text = words[j].text
            if text in ("-o", "+o", "-O", "+O"):
                j += 2
                continue
            if text == "--":
                j += 1
                break
            if text.startswith("--"):
                j += 1
                continue
            if len(text) > 1 and text[0] in "-+" and text[1:].isalpha():
                has_c = has_c or (text[0] == "-" and "c" in text[1:])
                j += 1
                continue
            break
        if has_c and j < len(words):
            return words[j]
    return None


def parse_file(path: str) -> LaunchScript:
    """A launch script from disk; a binary file is bad input (a stray Latin-1 byte is not)."""
    from memtune.files.textfile import read_text

    text = read_text(path, "a bash / sbatch launch script", strict=False)
    script = parse_text(text, path)
    crlf = text.find("\r\n")
    if crlf >= 0:
        # The reader drops the CR so the rest of the check still works; bash does not, and
        # the check rules report what that does to the run (MT024).
        script = replace(script, crlf_line=text.count("\n", 0, crlf) + 1)
    if script.unclosed_quote is not None:
        # bash itself stops with "unexpected EOF while looking for matching quote"; checking
        # the rest of the file as one long word would only produce nonsense findings
        quote, line = script.unclosed_quote
        raise InputError(
            f"{path}:{line}: the {quote} quote opened on this line is never closed "
            "(bash: unexpected EOF while looking for matching quote); close it"
        )
    return script


def iter_words(script: LaunchScript) -> Iterator[Word]:
    for command in script.commands:
        yield from command.words
