"""The package being linted: its root, its rule tables, and the files it ships.

"Shipped" means what a user receives: ``npx skills add`` copies the whole folder minus
``.git``, ``__pycache__`` and ``__pypackages__``, so every file git would commit is in
scope. In a git checkout that is ``git ls-files --cached --others --exclude-standard``
(tracked plus new files that are not ignored), what installing the pushed repository
copies. In a plain folder (an installed copy, a test's temp copy) it is everything the
skills CLI would copy, virtualenvs and build folders included: a local install of that
folder ships them. The git-ignored folders of a checkout are listed separately, because a
local ``npx skills add DIR`` of the checkout ships those too.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.files import paths
from memtune.files.data_yaml import load_data_mapping
from memtune.release.shipped_files import EXCLUDED_DIR_NAMES

LINT_DATA_DIR = paths.DATA_DIR / "lint"

# Folders that never ship when walking a tree that is not a git checkout: only what the
# skills CLI itself leaves out. A .venv, venv, build/ or *.egg-info in the folder ships.
WALK_SKIP_DIRS = EXCLUDED_DIR_NAMES


@functools.cache
def load_rules(name: str) -> dict[str, Any]:
    """A rule table from ``memtune/data/lint/<name>.yaml`` (read once per process).

    The tables come from the linter's own install, not from the package being linted,
    so a broken copy cannot weaken the rules it is checked against.
    """
    return load_data_mapping(LINT_DATA_DIR / f"{name}.yaml")


@dataclass(frozen=True)
class Package:
    root: Path

    def rel(self, path: Path) -> str:
        """``path`` relative to the root, with forward slashes (how findings name files)."""
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return path.as_posix()

    def read_text(self, relative: str) -> str | None:
        """The file's text, or None when it does not exist."""
        path = self.root / relative
        if not path.is_file():
            return None
        return path.read_text(encoding="utf-8", errors="replace")


def shipped_files(root: Path) -> tuple[list[Path], str]:
    """Every file the package ships, sorted, and how the list was made (for the report)."""
    listed = _git_files(root)
    if listed is not None:
        return listed, "git ls-files"
    return _walk_files(root), "directory walk"


def _git_files(root: Path) -> list[Path] | None:
    """Files git would commit, or None when ``root`` is not the top of a git work tree."""
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return None
    try:
        top = subprocess.run(
            [git, "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        if Path(top).resolve() != root.resolve():
            return None
        out = subprocess.run(
            [git, "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    names = sorted({name for name in out.decode("utf-8", "surrogateescape").split("\0") if name})
    # A tracked file deleted in the work tree does not ship.
    return [root / name for name in names if (root / name).is_file()]


def _walk_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in WALK_SKIP_DIRS)
        found.extend(Path(directory) / name for name in filenames)
    return sorted(path for path in found if path.is_file())


def ignored_but_installable(root: Path) -> list[str]:
    """Git-ignored paths of a checkout that a local ``npx skills add DIR`` would still copy
    (``.venv/``, ``build/``, ``*.egg-info/``...): not scanned as shipped, named instead."""
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return []
    try:
        out = subprocess.run(
            [git, "-C", str(root), "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    return sorted(n for n in names if not set(Path(n).parts) & WALK_SKIP_DIRS)
