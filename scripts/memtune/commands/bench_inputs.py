"""What the run_benchmark commands share: where the dataset and its harness files live, how a
path is shown, the dataset and security rules loaded, the harness version a run records.

Only the standard library and stdlib-only memtune modules at top level (--help stays fast)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from memtune.files import paths

if TYPE_CHECKING:
    from memtune.bench.dataset import Dataset
    from memtune.bench.grading import SecurityRule

HARNESS_VERSION = "memtune-bench 6"  # 6: a line asking for the answer after helper output, a repeat ends the attempt, template slots refused; 5: runtime_memory and trace_regression allowed; 4: load turns kept, fenced helper runs, forced mode; 3: tool loop; 2: seeds


def default_evals() -> Path:
    return paths.EVALS_DIR / "evals.json"


def schema_for(evals: Path) -> Path:
    return evals.parent / "evals.schema.json"


def harness_file(evals: Path, name: str) -> Path:
    return evals.parent / "harness" / name


def display(path: Path) -> str:
    try:
        return path.resolve().relative_to(paths.SKILL_ROOT).as_posix()
    except ValueError:
        return str(path)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "agent"


def load_dataset_file(evals: Path) -> Dataset:
    from memtune.bench.dataset import load_dataset

    return load_dataset(evals, schema_for(evals))


def security_rules(evals: Path) -> tuple[tuple[SecurityRule, ...], str]:
    from memtune.bench.dataset import read_json
    from memtune.bench.grading import load_security_rules

    path = harness_file(evals, "security.json")
    import hashlib

    return load_security_rules(read_json(path, "security rules")), hashlib.sha256(path.read_bytes()).hexdigest()


def now_utc() -> str:
    """The run's start time; datetime is imported here, not at start-up (--help stays fast)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")
