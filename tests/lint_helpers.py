"""Shared helpers for the lint tests: copy the package, mutate it, lint it."""

from __future__ import annotations

import shutil
from pathlib import Path

from memtune.lint.package import shipped_files
from memtune.lint.runner import Options, Report, lint

REPO_ROOT = Path(__file__).resolve().parent.parent
SKILL_NAME = "nemo-mbridge-perf-memory-tuning"


def copy_package(dest_parent: Path, folder: str = SKILL_NAME) -> Path:
    """Copy every shipped file of the repository into ``dest_parent/folder``."""
    dest = dest_parent / folder
    files, _ = shipped_files(REPO_ROOT)
    for path in files:
        target = dest / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not found in {path}: the fixture no longer matches the package"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def run(root: Path, **options) -> Report:
    return lint(root, Options(**options))


def rules(report: Report, severity: str = "error") -> set[str]:
    return {f.rule for f in report.findings if f.severity == severity}


def messages(report: Report, rule: str) -> list[str]:
    return [f.message for f in report.findings if f.rule == rule]
