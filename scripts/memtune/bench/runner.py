"""Run every (case, condition, attempt) that is not yet in the run file.

Tasks are ordered attempt by attempt, and within an attempt case by case with both
conditions side by side, so a run stopped half-way still holds comparable with/without
pairs. Workers are threads: the agents spend their time in subprocesses or in
llama.cpp, which release the GIL.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from memtune.bench.agents import CONDITIONS, WITH, Agent, AgentResult, Task
from memtune.bench.dataset import Case, Dataset, fixture_path
from memtune.bench.grading import SecurityRule, grade_answer
from memtune.bench.results import Key, RunWriter
from memtune.bench.skill import SkillDoc


@dataclass(frozen=True)
class Job:
    case: Case
    condition: str
    attempt: int

    @property
    def key(self) -> Key:
        return (self.case.id, self.condition, self.attempt)


def plan_jobs(dataset: Dataset, attempts: int, done: set[Key]) -> list[Job]:
    jobs = []
    for attempt in range(1, attempts + 1):
        for case in dataset.cases:
            for condition in CONDITIONS:
                job = Job(case, condition, attempt)
                if job.key not in done:
                    jobs.append(job)
    return jobs


class Progress:
    """A one-line progress bar on stderr (one line per task when stderr is not a terminal)."""

    def __init__(self, total: int, done: int, stream: TextIO | None = None, width: int = 28) -> None:
        self.total, self.done, self.width = total, done, width
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.started_with = done
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()

    def line(self, label: str) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.start
        ran = self.done - self.started_with
        eta = (elapsed / ran) * (self.total - self.done) if ran else 0.0
        return (
            f"[{bar}] {self.done}/{self.total} {frac:4.0%} | {_clock(elapsed)} elapsed, ~{_clock(eta)} left | {label}"
        )

    def advance(self, label: str) -> None:
        with self._lock:
            self.done += 1
            text = self.line(label)
            if self.tty:
                self.stream.write("\r\x1b[2K" + text)
                if self.done == self.total:
                    self.stream.write("\n")
            else:
                self.stream.write(text + "\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def run_judge(command: str, case: Case, answer: str, timeout: float = 300.0) -> float | None:
    """Grade ``expected_behavior`` with an external judge program.

    It gets one JSON object on stdin (question, ground_truth, expected_behavior, answer)
    and prints ``{"score": 0..1}`` or ``{"behaviors": [true, false, ...]}``. A judge
    that fails yields None (recorded, not guessed)."""
    payload = {
        "question": case.question,
        "ground_truth": case.ground_truth,
        "expected_behavior": list(case.expected_behavior),
        "answer": answer,
    }
    try:
        proc = subprocess.run(
            shlex.split(command), input=json.dumps(payload), capture_output=True, text=True, timeout=timeout
        )
        doc = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        return None
    if proc.returncode != 0 or not isinstance(doc, dict):
        return None
    if isinstance(doc.get("behaviors"), list) and doc["behaviors"]:
        return sum(bool(b) for b in doc["behaviors"]) / len(doc["behaviors"])
    if isinstance(doc.get("score"), (int, float)):
        return max(0.0, min(1.0, float(doc["score"])))
    return None


def make_record(job: Job, result: AgentResult, rules: Sequence[SecurityRule], judge: str | None) -> dict[str, Any]:
    grade = grade_answer(job.case.checks, result.answer, result.commands, rules)
    record: dict[str, Any] = {
        "type": "result",
        "case_id": job.case.id,
        "condition": job.condition,
        "attempt": job.attempt,
        "question_sha256": job.case.question_sha256,
        "files_sha256": job.case.files_sha256,
        "answer": result.answer,
        "activated_skill": result.activated_skill,
        "commands": list(result.commands),
        "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
        "seconds": round(result.seconds, 2),
        "error": result.error,
        "extra": result.extra,
        "grade": grade.to_json(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if judge:
        record["judge_score"] = run_judge(judge, job.case, result.answer)
    return record


class Runner:
    def __init__(
        self,
        agent: Agent,
        dataset: Dataset,
        skill: SkillDoc,
        writer: RunWriter,
        rules: Sequence[SecurityRule],
        judge: str | None = None,
        workers: int = 1,
        keep_workdirs: bool = False,
        progress: Progress | None = None,
        on_record: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.agent, self.dataset, self.skill, self.writer = agent, dataset, skill, writer
        self.rules, self.judge, self.workers = rules, judge, max(1, workers)
        self.keep_workdirs, self.progress, self.on_record = keep_workdirs, progress, on_record
        self._staged: Path | None = None
        self._stage_lock = threading.Lock()
        self._tmp_root = Path(tempfile.mkdtemp(prefix="memtune-bench-"))

    def staged_skill(self) -> Path:
        """A clean copy of the package (what ships), made once per run."""
        from memtune.bench.skill import stage_clean_copy

        with self._stage_lock:
            if self._staged is None:
                self._staged = stage_clean_copy(self.skill.root, self._tmp_root / "staged" / self.skill.name)
            return self._staged

    def _task(self, job: Job) -> tuple[Task, Path | None]:
        files = {
            name: fixture_path(self.dataset, name).read_text(encoding="utf-8", errors="replace")
            for name in job.case.files
        }
        skill = self.skill if job.condition == WITH else None
        workdir = None
        if self.agent.needs_workdir:
            workdir = Path(
                tempfile.mkdtemp(prefix=f"{job.case.id}-{job.condition}-a{job.attempt}-", dir=self._tmp_root)
            )
            for name in job.case.files:
                shutil.copy2(fixture_path(self.dataset, name), workdir / name)
            if skill is not None:
                self.agent.install_skill(workdir, skill, self.staged_skill())
        return Task(job.case, job.condition, job.attempt, workdir or self._tmp_root, files, skill), workdir

    def run_one(self, job: Job) -> dict[str, Any]:
        workdir = None
        try:
            task, workdir = self._task(job)
            result = self.agent.run(task)
        except subprocess.TimeoutExpired as exc:
            result = AgentResult(error=f"timeout after {exc.timeout:.0f} s")
        except Exception as exc:  # noqa: BLE001 - one failed task is a recorded result, not a crashed run
            result = AgentResult(error=f"{type(exc).__name__}: {exc}")
        finally:
            if workdir is not None and not self.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)
        record = make_record(job, result, self.rules, self.judge)
        self.writer.append(record)
        if self.on_record:
            self.on_record(record)
        if self.progress:
            self.progress.advance(f"{job.case.id} {job.condition} #{job.attempt} ({result.seconds:.1f} s)")
        return record

    def run(self, jobs: Sequence[Job]) -> int:
        """Run the jobs; returns how many ended with an agent error."""
        errors = 0
        try:
            if self.workers == 1:
                for job in jobs:
                    errors += self.run_one(job)["error"] is not None
            else:
                with ThreadPoolExecutor(max_workers=self.workers) as pool:
                    for future in as_completed([pool.submit(self.run_one, job) for job in jobs]):
                        errors += future.result()["error"] is not None
        finally:
            if not self.keep_workdirs:
                shutil.rmtree(self._tmp_root, ignore_errors=True)
        return errors
