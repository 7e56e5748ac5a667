"""What kind of input a trace side is, and how to read a file as it was at a git revision.

trace_regression.py takes two inputs of any kind (a launch script, a Megatron Bridge YAML,
a YAML/JSON mapping of Megatron-LM flags, or something a run printed) and must decide per
file which reader applies, without asking the user to label each one. The decision uses
the file's shape only; nothing in a file is executed.

For ``--git A..B -- path`` the revisions are read with ``git show REV:./path`` (the path
relative to the working directory, as the user typed it): git runs with a list of
arguments, never a shell, and a revision that is not a plain revision name is refused
before git sees it, so text like ``--output=x`` cannot become a git option.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.errors import InputError

BRIDGE = "bridge-config"
MEGATRON = "megatron-args"
MEASUREMENT = "measurement"
KINDS = (BRIDGE, MEGATRON, MEASUREMENT)

#: Lines only a run prints: Megatron's report_memory, torch.cuda.memory_summary(), nvidia-smi,
#: torch.cuda.memory_stats() keys. A launch script or a config never holds them.
_MEASUREMENT_MARKS = re.compile(
    r"memory \(MB\) \||max allocated:|PyTorch CUDA memory summary|NVIDIA-SMI \d|memory\.used \[MiB\]|"
    r"allocated_bytes\.all\.peak|MiB / +\d+MiB",
)
#: A pickle (a torch.cuda.memory snapshot) starts with the PROTO opcode.
_PICKLE_START = b"\x80"
_GZIP_START = b"\x1f\x8b"  # a compressed log
#: Flags every Megatron-LM launch names (model shape or layout): a text with none is not a launch.
_LAUNCH_MARKS = re.compile(
    r"--(num-layers|hidden-size|tensor-model-parallel-size|pipeline-model-parallel-size|micro-batch-size|"
    r"seq-length|num-attention-heads|global-batch-size)\b"
)
_SNIFF = 1 << 20


def classify(path: str | Path) -> str:
    """One of :data:`KINDS` for the file at ``path``; InputError when it is none of them."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: a directory; give one file per side (a launch script, a Bridge YAML or a run's log)")
    if p.exists() and not p.is_file():
        raise InputError(f"{p}: not a regular file (a device or a pipe); give a saved file per side")
    if not p.is_file():
        raise InputError(f"{p}: no such file; give a launch script, a Bridge YAML, a flag mapping or a run's log")
    with open(p, "rb") as handle:
        head = handle.read(_SNIFF)
    if head.startswith((_PICKLE_START, _GZIP_START)):
        return MEASUREMENT
    text = head.decode("utf-8", errors="replace")
    if _MEASUREMENT_MARKS.search(text):
        return MEASUREMENT
    if p.suffix.lower() in (".yaml", ".yml", ".json") or text.lstrip().startswith("{"):
        return _mapping_kind(p)
    if _LAUNCH_MARKS.search(text):
        return MEGATRON
    # Neither shape is obvious (a launcher that passes recipe overrides, a stats dump in an
    # unusual layout): it is a measurement when the measurement reader finds one, else a
    # launch script, whose reader then names what it expected.
    from memtune.runtime.read import read_measurements

    try:
        read_measurements([p])
    except InputError:
        return MEGATRON
    return MEASUREMENT


def _mapping_kind(p: Path) -> str:
    """A YAML/JSON file: a Megatron-LM flag mapping ({'--num-layers': 32}) or a Bridge config."""
    from memtune.files import yaml_guard
    from memtune.files.textfile import read_text, yaml_syntax_error

    text = read_text(p, "a Bridge YAML or a YAML/JSON mapping of Megatron flags")
    try:
        data: Any = yaml_guard.safe_load(text)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure is bad input
        raise yaml_syntax_error(p, exc) from None
    if not isinstance(data, Mapping) or not data:
        raise InputError(f"{p}: expected a Bridge config (model:, train:, ...) or a mapping of Megatron flags")
    flags = data.get("MODEL_ARGS", data)
    if isinstance(flags, Mapping) and flags and all(isinstance(k, str) and k.startswith("-") for k in flags):
        return MEGATRON
    return BRIDGE


# ------------------------------------------------------------------------------ git
_REV = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./~^@{}-]*")


@dataclass(frozen=True)
class Revision:
    """A commit that touched the traced file (``commit`` is the full hash)."""

    commit: str
    subject: str


def split_range(text: str) -> tuple[str, str]:
    """'A..B' -> ('A', 'B'); InputError for anything else."""
    parts = text.split("..")
    if len(parts) != 2 or not all(_REV.fullmatch(part) for part in parts) or "..." in text:
        raise InputError(f"--git {text!r}: expected a range like main..HEAD or v1.2..abc123")
    return parts[0], parts[1]


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise InputError("--git needs the git program on PATH") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {args[0]} took over 60 s; check the repository") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise InputError(f"git {' '.join(args)}: {reason}")
    return done.stdout


def relative_path(path: str, cwd: Path) -> str:
    """``path`` as ``./x/y`` relative to ``cwd``: git reads ``REV:./x/y`` relative to the
    working directory, which is how the user typed it."""
    p = Path(path)
    rel = p.resolve().relative_to(cwd.resolve()) if p.is_absolute() else p
    text = rel.as_posix()
    if text.startswith("-") or ".." in rel.parts:
        raise InputError(f"{path}: give the traced file's path inside the repository (no '..')")
    return "./" + text.removeprefix("./")


def commits_between(start: str, end: str, path: str, cwd: Path) -> list[Revision]:
    """Commits after ``start`` up to ``end`` that changed ``path``, oldest first."""
    for rev in (start, end):
        if not _REV.fullmatch(rev):
            raise InputError(f"--git: {rev!r} is not a revision name")
    rel = relative_path(path, cwd)
    out = _git(["log", "--reverse", "--format=%H%x09%s", f"{start}..{end}", "--", rel], cwd)
    revisions = []
    for line in out.splitlines():
        commit, _, subject = line.partition("\t")
        if commit:
            revisions.append(Revision(commit, subject))
    return revisions


def resolve(rev: str, cwd: Path) -> str:
    """The full commit hash of ``rev`` (InputError naming it when git does not know it)."""
    if not _REV.fullmatch(rev):
        raise InputError(f"--git: {rev!r} is not a revision name")
    return _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], cwd).strip()


def show(rev: str, path: str, cwd: Path) -> bytes:
    """The bytes of ``path`` at ``rev``; InputError when the file did not exist there."""
    rel = relative_path(path, cwd)
    try:
        done = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=cwd, capture_output=True, timeout=60, check=False)
    except FileNotFoundError:
        raise InputError("--git needs the git program on PATH") from None
    except subprocess.TimeoutExpired:
        raise InputError("git show took over 60 s; check the repository") from None
    if done.returncode != 0:
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"])[-1]
        raise InputError(f"{path} at {rev[:12]}: {reason}")
    return done.stdout
