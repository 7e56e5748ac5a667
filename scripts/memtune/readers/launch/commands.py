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

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from memtune.errors import InputError
from memtune.readers.launch.branches import _Branches, _note_origin, _settle
from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.expansion import _ASSIGN, _expand_markers, _remember, _split_assignment
from memtune.readers.launch.lexer import _IDENT, Heredoc, _Lexer
from memtune.readers.launch.loops import define_slurm_variables, for_loop, read_builtin
from memtune.readers.launch.script import Command, EnvSetting, LaunchScript, Span, Word

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
    define_slurm_variables(text, first_line, known, known_lines, budget)
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
            for_loop(words, known, known_lines, loops, budget, branches, env, notes, path)
            continue
        if head == "read" and not words[0].quoted:
            read_builtin(words, prefixes, known, known_lines, loops, budget, branches, env, notes, path)
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
