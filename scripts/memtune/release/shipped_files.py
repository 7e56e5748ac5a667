"""Which files ship with the skill, and therefore which files the signature covers.

`npx skills add` copies the whole package folder minus directories named ``.git``,
``__pycache__`` or ``__pypackages__`` and files named ``metadata.json`` (skills@1.5.16,
``EXCLUDE_DIRS`` / ``EXCLUDE_FILES`` in its cli.mjs). From a git repository only the
tracked files exist in the clone it copies, so:

* a git work tree (a folder with ``.git`` at its top) ships its tracked files;
* any other folder (an installed copy, an export) ships every file under it.

model_signing itself never hashes a handful of git metadata paths at the top of the
tree (``.git``, ``.gitattributes``, ``.github``, ``.gitignore``) unless told otherwise on
*both* sides; the plain ``model_signing verify`` command users run keeps that default, so
those files ship but cannot be covered. They are listed as ``unsignable``, not hidden.

Only the standard library is imported here: ``--help`` of the signing helper must work in a
bare interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memtune.errors import InputError
from memtune.release.names import SIGNATURE_NAME

__all__ = ["SIGNATURE_NAME"]
# What the skills CLI leaves out of every copy it installs.
EXCLUDED_DIR_NAMES = frozenset({".git", "__pycache__", "__pypackages__"})
EXCLUDED_FILE_NAMES = frozenset({"metadata.json"})
# What model_signing skips at the top of the tree by default (hashing.Config.hash).
MODEL_SIGNING_GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")

BYTECODE_SUFFIXES = (".pyc", ".pyo")
BYTECODE_DIR = "__pycache__"
VENV_DIR_NAMES = frozenset({".venv", "venv"})

MODE_GIT = "git-tracked"
MODE_DIRECTORY = "directory"


@dataclass(frozen=True)
class ShippedSet:
    """The files of one package tree as the skills CLI would ship them.

    ``files`` are the paths the signature covers, ``unsignable`` the shipped paths
    model_signing skips by default, ``missing`` tracked paths absent from the work tree,
    ``untracked`` files present in a git work tree that would not ship from the repo.
    All paths are POSIX strings relative to ``root``.
    """

    root: Path
    mode: str
    files: tuple[str, ...]
    unsignable: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    untracked: tuple[str, ...] = ()


def is_git_root(root: Path) -> bool:
    """True when ``root`` is the top of a git work tree (``.git`` dir, or file for worktrees).

    A package installed *inside* some other git project is not a git root: its files ship
    as a plain folder, whatever that project tracks.
    """
    return (root / ".git").exists()


def is_excluded(rel: str) -> bool:
    """Would the skills CLI leave this relative path out of an installed copy?"""
    parts = PurePosixPath(rel).parts
    if any(part in EXCLUDED_DIR_NAMES for part in parts[:-1]):
        return True
    return parts[-1] in EXCLUDED_FILE_NAMES or parts[-1] == ".git"


def is_unsignable(rel: str) -> bool:
    """Paths that model_signing's default configuration never hashes."""
    top = PurePosixPath(rel).parts[0]
    return top in MODEL_SIGNING_GIT_PATHS


def _git(root: Path, *args: str) -> str:
    try:
        result = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise InputError(f"{root} is a git work tree but the `git` command is not installed; install git") from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise InputError(f"git {' '.join(args)} failed in {root}: {detail}")
    return result.stdout


def _split_z(output: str) -> list[str]:
    return [p for p in output.split("\0") if p]


def git_head(root: Path) -> str:
    """The commit a signature of this work tree corresponds to."""
    return _git(root, "rev-parse", "HEAD").strip()


def git_dirty_paths(root: Path, ignore: tuple[str, ...] = (SIGNATURE_NAME,)) -> list[str]:
    """Modified, staged, deleted or untracked (not ignored) paths, except ``ignore``.

    The signature file itself is left out so that re-signing after a signature change
    (the only change a signing commit makes) is not refused.
    """
    entries = _split_z(_git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all"))
    dirty: list[str] = []
    skip_next = False
    for entry in entries:
        if skip_next:  # the "from" half of a rename record
            skip_next = False
            continue
        status, path = entry[:2], entry[3:]
        if "R" in status or "C" in status:
            skip_next = True
        if path not in ignore:
            dirty.append(path)
    return dirty


def _walk(root: Path) -> list[str]:
    """Every file under ``root`` that the skills CLI would copy (no symlink following)."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIR_NAMES)
        base = Path(dirpath).relative_to(root)
        for name in sorted(filenames):
            rel = (base / name).as_posix()
            if not is_excluded(rel):
                found.append(rel)
    return found


def shipped_set(
    root: Path,
    signature_rel: str | None = SIGNATURE_NAME,
    use_git: bool | None = None,
    symlink_ok: Callable[[str], bool] | None = None,
) -> ShippedSet:
    """The files of ``root`` that ship, split into signed and unsignable paths.

    ``use_git`` None means: git-tracked files when ``root`` is a git work tree, every file
    otherwise. ``signature_rel`` (the signature's path relative to root) never counts.
    ``symlink_ok`` names symlinks to list rather than refuse: a virtualenv is full of them
    (the skills CLI copies their targets), and verification judges it as a leftover anyway.
    """
    if use_git is None:
        use_git = is_git_root(root)
    untracked: list[str] = []
    missing: list[str] = []
    if use_git:
        candidates = _split_z(_git(root, "ls-files", "-z", "--cached"))
        present = [p for p in candidates if os.path.lexists(root / p)]
        missing = [p for p in candidates if p not in set(present) and not is_excluded(p)]
        candidates = present
        untracked = [
            p for p in _split_z(_git(root, "ls-files", "-z", "--others", "--exclude-standard")) if not is_excluded(p)
        ]
        mode = MODE_GIT
    else:
        candidates = _walk(root)
        mode = MODE_DIRECTORY
    # The default signature name never counts, even when this run writes elsewhere:
    # an old skill.oms.sig left in the tree is not content.
    never = {SIGNATURE_NAME, signature_rel}
    shipped = [p for p in candidates if not is_excluded(p) and p not in never]
    for rel in shipped:
        if (root / rel).is_symlink() and not (symlink_ok and symlink_ok(rel)):
            raise InputError(
                f"{root / rel} is a symlink: model_signing refuses symlinks inside a signed tree; "
                "replace it with the file it points to"
            )
    return ShippedSet(
        root=root,
        mode=mode,
        files=tuple(sorted(p for p in shipped if not is_unsignable(p))),
        unsignable=tuple(sorted(p for p in shipped if is_unsignable(p))),
        missing=tuple(sorted(missing)),
        untracked=tuple(sorted(untracked)),
    )


def is_bytecode(rel: str) -> bool:
    """Compiled Python (``*.pyc``, ``*.pyo``, anything in a ``__pycache__`` folder).

    Python runs such files in place of, or without, a source file; the signature covers
    sources only, so bytecode in a verified tree is unsigned executable content.
    """
    path = PurePosixPath(rel)
    return path.suffix in BYTECODE_SUFFIXES or BYTECODE_DIR in path.parts[:-1]


def bytecode_files(root: Path, *, in_caches: bool = True, in_venvs: bool = True) -> tuple[str, ...]:
    """Every bytecode file under ``root`` (relative POSIX paths, symlinks not followed).

    In a git work tree, ``__pycache__`` folders and virtualenvs are the developer's own
    caches, which the helpers never read (their entry points keep bytecode outside the
    tree); ``in_caches=False`` / ``in_venvs=False`` leave them out, while a sourceless
    ``.pyc`` elsewhere is still found: it could shadow a module on ``sys.path``.
    """
    skip = {".git", *(() if in_caches else (BYTECODE_DIR,)), *(() if in_venvs else VENV_DIR_NAMES)}
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        base = Path(dirpath).relative_to(root)
        found.extend((base / name).as_posix() for name in sorted(filenames) if is_bytecode((base / name).as_posix()))
    return tuple(found)


def export(shipped: ShippedSet, dest: Path) -> Path:
    """Copy the shipped files (signed and unsignable) into ``dest``, a new folder.

    Signing and git-mode verification both work on such a copy, so what is hashed is
    exactly what ships — never a virtualenv or cache that happens to sit in the work tree.
    """
    dest.mkdir(parents=True, exist_ok=False)
    for rel in shipped.files + shipped.unsignable:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shipped.root / rel, target)
    return dest
