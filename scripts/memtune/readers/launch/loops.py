"""The builtins that set variables from a list: ``for NAME in ...`` and ``read A B <<< "$X"``,
and the ``SLURM_*`` variables a job's ``#SBATCH`` lines define.

The loop body is read once, so a variable is known only where every pass of the loop agrees
on its value (a ``PARALLELISM_CONFIGS`` array of one entry, or an ``EP`` every entry shares);
a value that differs between passes stays unknown, with a note saying what the passes are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memtune.readers.launch.branches import _Branches, _note_origin
from memtune.readers.launch.budget import _Budget
from memtune.readers.launch.expansion import _remember, _split_assignment
from memtune.readers.launch.lexer import _IDENT
from memtune.readers.launch.script import EnvSetting, Word

_LOOP_VALUE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def assign(
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


def for_loop(
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
        assign(name, values[0], words[0].line, known, known_lines, budget, branches, env, path)
        return
    known.pop(name, None)
    loops[name] = values
    notes.append(
        f"{path or 'script'}:{words[0].line}: the loop runs {len(values)} passes with {name} = "
        + ", ".join(values[:6])
        + ("..." if len(values) > 6 else "")
        + "; a value that differs between passes is only known per pass"
    )


def read_builtin(
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
            assign(name, got.pop(), data.line, known, known_lines, budget, branches, env, path)
        else:
            loops[name] = tuple(p[idx] for p in passes)


def define_slurm_variables(
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
