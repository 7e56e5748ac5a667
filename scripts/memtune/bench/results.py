"""Raw results: one JSONL file per run under evals/results/, appended as tasks finish.

Line 1 is the run header (``"type": "run"``: agent, model, dataset digest, attempts,
the command that reproduces it); every other line is one finished task
(``"type": "result"``). Each record is written with a single write and fsync, so a crash
loses at most the line being written; a torn last line is dropped on resume. Re-running
the same command resumes: (case, condition, attempt) keys already present are skipped.
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


@dataclass(frozen=True)
class RunFile:
    path: Path
    header: dict[str, Any]
    results: tuple[dict[str, Any], ...]

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def done_keys(self) -> set[Key]:
        return {result_key(r) for r in self.results}


def result_key(record: Mapping[str, Any]) -> Key:
    return (str(record["case_id"]), str(record["condition"]), int(record["attempt"]))


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
    return RunFile(path, records[0], results)


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
