"""The skill under test, as agents see it.

Agents load skills by progressive disclosure: at start-up they read only each skill's
frontmatter ``name`` and ``description`` (discovery); the SKILL.md body enters the
context only when the agent decides the skill applies (activation). The harness
reproduces that split for agents it drives itself, and stages a clean copy of the
package for agents that install it through the skills CLI.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from memtune.errors import InputError


@dataclass(frozen=True)
class SkillDoc:
    name: str
    description: str
    body: str
    sha256: str
    root: Path


def split_frontmatter(text: str) -> tuple[str, str]:
    """(frontmatter YAML, body) of a SKILL.md; the frontmatter sits between two '---' lines."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise InputError("SKILL.md: no YAML frontmatter (the file must start with a '---' line)")
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :]).lstrip("\n")
    raise InputError("SKILL.md: frontmatter is not closed by a '---' line")


def load_skill(root: Path) -> SkillDoc:
    import yaml  # third-party, imported lazily (see memtune.bootstrap)

    path = root / "SKILL.md"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: not found (pass --skill-dir, the folder holding SKILL.md)") from None
    front, body = split_frontmatter(raw.decode("utf-8"))
    meta = yaml.safe_load(front) or {}
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("description"):
        raise InputError(f"{path}: frontmatter needs 'name' and 'description'")
    description = " ".join(str(meta["description"]).split())
    return SkillDoc(str(meta["name"]), description, body, hashlib.sha256(raw).hexdigest(), root)


#: Package paths whose content the agent reads or runs in a task, and the benchmark harness
#: inside them, which HARNESS_VERSION tracks instead (a grader fix must not orphan a run).
_AGENT_FACING = ("SKILL.md", "references/", "scripts/")
_HARNESS = ("scripts/run_benchmark.py", "scripts/memtune/bench/", "scripts/memtune/commands/bench_",
            "scripts/memtune/commands/run_benchmark.py")  # fmt: skip


def _tracked_files(root: Path) -> list[str]:
    """The files git tracks under ``root`` (raw results left out), or [] without git."""
    try:
        listed = (
            subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True, timeout=60)
            .stdout.decode("utf-8")
            .split("\0")
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [f for f in listed if f and not f.startswith("evals/results/")]


def skill_files_sha256(root: Path) -> str | None:
    """One digest of what the agent meets once the skill is installed: SKILL.md, the
    references and the helpers with the library they run, without the benchmark harness.

    Why: a run is resumed across sessions, and a helper whose output changed between two
    sessions would put two skills in one run while SKILL.md's digest stays the same. None
    without git (then only SKILL.md's digest guards a resume)."""
    files = sorted(f for f in _tracked_files(root) if f.startswith(_AGENT_FACING) and not f.startswith(_HARNESS))
    if not files:
        return None
    digest = hashlib.sha256()
    for rel in files:
        path = root / rel
        if path.is_file():
            digest.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def stage_clean_copy(root: Path, dest: Path) -> Path:
    """Copy the files git tracks (the package as it ships) into ``dest``.

    ``npx skills add <dir>`` copies a whole folder; pointing it at a working tree would
    also copy a virtualenv, caches and raw results. Without git, fall back to the
    shipped top-level entries.
    """
    dest.mkdir(parents=True, exist_ok=True)
    files = _tracked_files(root)
    if not files:
        for entry in ("SKILL.md", "skill-card.md", "card.yaml", "README.md", "LICENSE", "references", "scripts"):
            src = root / entry
            if src.is_dir():
                shutil.copytree(src, dest / entry, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.is_file():
                shutil.copy2(src, dest / entry)
        return dest
    for rel in files:
        src = root / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest
