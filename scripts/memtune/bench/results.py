"""Raw results: one JSONL file per run under evals/results/, appended as tasks finish.

Line 1 is the run header (``"type": "run"``: agent, model, dataset digest, attempts,
the command that reproduces it); every other line is one finished task
(``"type": "result"``). Each record is written with a single write and fsync, so a crash
loses at most the line being written; a torn last line is dropped on resume. Re-running
the same command resumes: (case, condition, attempt) keys already present are skipped.

A run may be reported on fewer attempts than it was started with (a local model on two
shared cores needs hours per attempt): a sidecar ``<run id>.scope.json`` next to the run file,
``{"attempts": N, "why_fewer": "..."}``, limits every report of that run to attempts 1..N
and carries the reason into BENCHMARK.md. The raw file itself is never cut or edited.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.errors import InputError

Key = tuple[str, str, int]

SCOPE_SUFFIX = ".scope.json"


@dataclass(frozen=True)
class ReportScope:
    """Report a run on its first ``attempts`` attempts only, for the stated reason."""

    attempts: int
    why_fewer: str


@dataclass(frozen=True)
class RunFile:
    path: Path
    header: dict[str, Any]
    results: tuple[dict[str, Any], ...]
    scope: ReportScope | None = None

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def done_keys(self) -> set[Key]:
        return {result_key(r) for r in self.results}


def result_key(record: Mapping[str, Any]) -> Key:
    return (str(record["case_id"]), str(record["condition"]), int(record["attempt"]))


def same_tasks(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two run headers pose the same tasks to the agent.

    Both headers carry ``tasks_sha256`` (ids, questions, fixture bytes, should_trigger): that
    decides, so an edit to the checks alone keeps a run resumable and paired with its twin
    (the report grades stored answers again anyway). A header written before that digest
    existed is compared by the whole dataset file's sha256."""
    da, db = a.get("dataset") or {}, b.get("dataset") or {}
    if da.get("tasks_sha256") and db.get("tasks_sha256"):
        return bool(da["tasks_sha256"] == db["tasks_sha256"])
    return bool(da.get("sha256") == db.get("sha256"))


def _parse_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records in order, and the byte length of the intact prefix (a torn last line is cut)."""
    data = path.read_bytes()
    records: list[dict[str, Any]] = []
    good = 0
    offset = 0
    for raw in data.splitlines(keepends=True):
        offset += len(raw)
        text = raw.strip()
        if not text:
            good = offset
            continue
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError:
            if offset == len(data):  # only the last line may be torn
                break
            raise InputError(f"{path}: line {len(records) + 1} is not JSON; the file is damaged") from None
        good = offset
    return records, good


def read_run(path: Path) -> RunFile:
    records, _ = _parse_lines(path)
    if not records or records[0].get("type") != "run":
        raise InputError(f"{path}: not a run file (first line must be the run header)")
    results = tuple(r for r in records[1:] if r.get("type") == "result")
    return RunFile(path, records[0], results, read_scope(path, int(records[0].get("attempts") or 0)))


def read_scope(run_path: Path, started_with: int) -> ReportScope | None:
    """The sidecar scope of the run at ``run_path`` (None when there is none).

    Refused, as bad input, when it is not an object with a whole ``attempts`` from 1 to the
    attempts the run was started with and a non-empty ``why_fewer``: a report on fewer
    attempts must say why.
    """
    path = run_path.with_name(run_path.name.removesuffix(".jsonl") + SCOPE_SUFFIX)
    if not path.is_file():
        return None
    fix = f'write {{"attempts": N, "why_fewer": "..."}} with 1 <= N <= {started_with}, or delete the file'
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not JSON ({exc}); {fix}") from None
    if not isinstance(data, dict) or set(data) != {"attempts", "why_fewer"}:
        raise InputError(f"{path}: expected exactly the keys attempts and why_fewer; {fix}")
    attempts, why = data["attempts"], data["why_fewer"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= started_with:
        raise InputError(f"{path}: attempts {attempts!r} is outside 1..{started_with}; {fix}")
    if not isinstance(why, str) or not why.strip():
        raise InputError(f"{path}: why_fewer is empty; {fix}")
    return ReportScope(attempts, " ".join(why.split()))


def list_runs(results_dir: Path) -> list[RunFile]:
    """Every run file in the folder, oldest first by the header's start time then name."""
    runs = [read_run(p) for p in sorted(results_dir.glob("*.jsonl"))]
    return sorted(runs, key=lambda r: (str(r.header.get("started_at", "")), r.path.name))


class RunWriter:
    """Appends records to a run file; safe to call from worker threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, header: Mapping[str, Any]) -> RunWriter:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = cls(path)
        with path.open("x", encoding="utf-8") as handle:  # never silently overwrite a run
            handle.write(json.dumps(dict(header), sort_keys=True) + "\n")
        return writer

    @classmethod
    def resume(cls, path: Path) -> RunWriter:
        """Cut a torn last line (the crash happened mid-write), then append after it."""
        _, good = _parse_lines(path)
        if good < path.stat().st_size:
            with path.open("r+b") as handle:
                handle.truncate(good)
        return cls(path)

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(dict(record), sort_keys=True, ensure_ascii=False) + "\n"
        with self._lock:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())


def rewrite(path: Path, header: Mapping[str, Any], results: Iterable[Mapping[str, Any]]) -> None:
    """Replace a run file atomically (used by ``regrade``)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps(dict(header), sort_keys=True) + "\n")
        for record in results:
            handle.write(json.dumps(dict(record), sort_keys=True, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def iter_sorted(results: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Results in key order: the order a run finished in depends on thread timing."""
    return iter(sorted(results, key=result_key))
