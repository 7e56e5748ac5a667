"""Where the package's own files are, wherever the skill was installed.

The helpers run from a git checkout, from ``.agents/skills/<name>`` after
``npx skills add``, or through a symlinked ``.claude/skills/<name>``; every path is
derived from this file's resolved location so all three behave the same.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR: Path = Path(__file__).resolve().parent.parent  # this file is memtune/files/paths.py
SCRIPTS_DIR: Path = PACKAGE_DIR.parent
SKILL_ROOT: Path = SCRIPTS_DIR.parent
SKILL_MD: Path = SKILL_ROOT / "SKILL.md"
DATA_DIR: Path = PACKAGE_DIR / "data"
REFERENCES_DIR: Path = SKILL_ROOT / "references"
EVALS_DIR: Path = SKILL_ROOT / "evals"
