"""Recognise what a developer's working checkout leaves in an installed copy of the skill.

`npx skills add DIR` copies a local folder whole, skipping only ``.git``, ``__pycache__``,
``__pypackages__`` and ``metadata.json`` (skills@1.5.16). Installed from a checkout someone
has worked in, the copy also holds the virtualenv, the test and linter caches and the build
metadata: thousands of files the signature never covered. Strict verification must still
fail on them (they are unsigned content), but the user should read *why* in one line and
how to reinstall, instead of thousands of "added" paths that bury a genuinely planted file.

The list of leftover names is fixed here, in signed code, and deliberately not read from
the copy's own ``.gitignore``: model_signing never hashes ``.gitignore``, so anyone could
widen it to make a planted file look like a harmless cache. A candidate folder that holds
any signed path is never a leftover: whatever the package itself ships is judged as content.

Only the standard library is used: ``sign_skill.py verify`` needs nothing else besides
model-signing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

# Folder names that are a tool's cache or output wherever they appear.
CACHE_DIRS: dict[str, str] = {
    ".hypothesis": "Hypothesis example database",
    ".pytest_cache": "pytest cache",
    ".mypy_cache": "mypy cache",
    ".ruff_cache": "ruff cache",
    ".ipynb_checkpoints": "Jupyter checkpoints",
    ".tox": "tox environments",
    ".nox": "nox environments",
    ".eggs": "setuptools eggs",
}
# Folder names that are build output or an environment only at the top of the package
# (a nested folder named `build` may well be content).
TOP_DIRS: dict[str, str] = {
    ".venv": "virtualenv",
    "venv": "virtualenv",
    "build": "build output",
    "dist": "build output",
    "htmlcov": "coverage report",
    "node_modules": "npm packages",
}
# This repository's own generated folders (its .gitignore: /benchmarks/out/).
PROJECT_DIRS: dict[str, str] = {
    "benchmarks/out": "benchmark output",
}
EGG_INFO_SUFFIX = ".egg-info"
VENV_MARKER = "pyvenv.cfg"  # written by `python -m venv` and virtualenv at the env's root
# Single files: coverage data, Finder metadata, interrupted Tier-3 result files.
FILE_NAMES: dict[str, str] = {
    ".coverage": "coverage data",
    "coverage.xml": "coverage data",
    ".DS_Store": "Finder metadata",
}
PROJECT_FILE_GLOBS: dict[str, str] = {
    "evals/results/*.tmp": "interrupted benchmark result",
}

MAX_GROUPS_SHOWN = 5
REINSTALL = (
    "reinstall from the repository URL or from a clean export "
    "(git -C CHECKOUT archive HEAD | tar -x -C DIR, then npx --yes skills@1.5.16 add DIR ...)"
)


@dataclass(frozen=True)
class LeftoverGroup:
    """One leftover folder (or single file) and how many shipped files it holds."""

    path: str
    kind: str
    files: int

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "files": self.files}


@dataclass(frozen=True)
class LeftoverSplit:
    """Shipped paths split into working-checkout leftovers and everything else."""

    groups: tuple[LeftoverGroup, ...] = ()
    leftover_files: tuple[str, ...] = ()
    other: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.groups)


def _candidate(rel: str, venvs: Collection[str]) -> tuple[str, str] | None:
    """(group path, kind) when ``rel`` lies in a leftover location, else None."""
    parts = PurePosixPath(rel).parts
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        name = parts[depth - 1]
        if depth == 1 and name in TOP_DIRS:
            return folder, TOP_DIRS[name]
        if folder in PROJECT_DIRS:
            return folder, PROJECT_DIRS[folder]
        if name in CACHE_DIRS:
            return folder, CACHE_DIRS[name]
        if name.endswith(EGG_INFO_SUFFIX):
            return folder, "package build metadata"
        if folder in venvs:
            return folder, "virtualenv"
    name = parts[-1]
    if name in FILE_NAMES or name.startswith(".coverage."):
        return rel, FILE_NAMES.get(name, "coverage data")
    for pattern, kind in PROJECT_FILE_GLOBS.items():
        if PurePosixPath(rel).match(pattern) and len(parts) == len(PurePosixPath(pattern).parts):
            return rel, kind
    return None


def in_named_leftover(rel: str) -> bool:
    """Is ``rel`` in a leftover location known by name alone (``.venv``, caches, egg-info)?

    Usable before the whole listing is known; a virtualenv under another name is found by
    its marker only in :func:`split_leftovers`.
    """
    return _candidate(rel, ()) is not None


def split_leftovers(paths: Iterable[str], signed: Collection[str] = ()) -> LeftoverSplit:
    """Group ``paths`` (POSIX, relative to the package root) into leftovers and the rest.

    A folder with a ``pyvenv.cfg`` at its top is a virtualenv whatever its name. A group
    that contains any ``signed`` path is not a leftover: its files count as ordinary content.
    """
    paths = list(paths)
    venvs = {str(PurePosixPath(p).parent) for p in paths if PurePosixPath(p).name == VENV_MARKER}
    venvs.discard(".")  # a pyvenv.cfg at the package root would make everything a "leftover"
    found: dict[str, tuple[str, list[str]]] = {}
    other: list[str] = []
    for rel in paths:
        hit = _candidate(rel, venvs)
        if hit is None:
            other.append(rel)
        else:
            found.setdefault(hit[0], (hit[1], []))[1].append(rel)
    signed_set = set(signed)
    groups: list[LeftoverGroup] = []
    leftover: list[str] = []
    for path, (kind, members) in found.items():
        if any(s == path or s.startswith(path + "/") for s in signed_set):
            other.extend(members)
            continue
        groups.append(LeftoverGroup(path=path, kind=kind, files=len(members)))
        leftover.extend(members)
    groups.sort(key=lambda g: (-g.files, g.path))
    return LeftoverSplit(groups=tuple(groups), leftover_files=tuple(sorted(leftover)), other=tuple(sorted(other)))


def belongs_to(rel: str, groups: Iterable[LeftoverGroup]) -> bool:
    """Is ``rel`` inside (or equal to) one of the leftover groups?"""
    return any(rel == g.path or rel.startswith(g.path + "/") for g in groups)


def describe(groups: Collection[LeftoverGroup], limit: int = MAX_GROUPS_SHOWN) -> str:
    """``.venv (9,412 files), .hypothesis (3 files), … and 2 more``: short whatever the count."""
    shown = [f"{g.path} ({g.files:,} file{'s' if g.files != 1 else ''})" for g in list(groups)[:limit]]
    rest = len(groups) - len(shown)
    return ", ".join(shown) + (f", … and {rest} more" if rest > 0 else "")


def message(groups: Collection[LeftoverGroup]) -> str:
    """The one-line failure for a copy whose only problem is leftovers."""
    total = sum(g.files for g in groups)
    return (
        f"installed from a working checkout: {describe(groups)} are not part of the skill "
        f"({total:,} unsigned file{'s' if total != 1 else ''}, none of them covered by the signature); "
        f"the signed files themselves verify; {REINSTALL}"
    )
