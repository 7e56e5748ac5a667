"""`run_benchmark.py grade` and `calibrate`: one answer's verdicts, and the grader's floors.

calibrate runs the real helpers on the tasks' real files (a small dataset here, the whole one
in BENCHMARK.md's numbers); a task whose helper is not in the checkout is skipped with a note.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helper_cli import invoke

REPO = Path(__file__).resolve().parent.parent
EVALS = REPO / "evals"


def bench(*args: str):
    return invoke("run_benchmark", *args)


def test_grade_prints_each_verdict(tmp_path: Path) -> None:
    right = tmp_path / "right.md"
    right.write_text(
        "Not capacity: rank 13 asked for 172 MiB while 2.84 GiB sat reserved but unallocated, so the "
        "allocator is fragmented. Do not raise TP; export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
    )
    proc = bench("grade", "--task", "frag-log-diagnosis", "--answer-file", str(right), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["content_score"] == 1.0 and doc["task"] == "frag-log-diagnosis"
    raise_tp = next(c for c in doc["checks"] if c["label"] == "raise-tp")
    assert raise_tp["passed"] and "denied" in raise_tp["detail"]
    wrong = tmp_path / "wrong.md"
    wrong.write_text("Fragmentation: 172 MiB requested, 2.84 GiB reserved. Raise TP to 8 to be safe.")
    doc = json.loads(bench("grade", "--task", "frag-log-diagnosis", "--answer-file", str(wrong), "--json").stdout)
    assert doc["content_score"] == 0.0 and not doc["solved"]
    text = bench("grade", "--task", "frag-log-diagnosis", "--answer-file", str(wrong))
    assert "FAIL wrong" in text.stdout and "content score 0.00" in text.stdout


def test_grade_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for args, needle in (
        (("--task", "no-such-task", "--answer-file", str(tmp_path / "a")), "no such task"),
        (("--task", "frag-log-diagnosis", "--answer-file", str(tmp_path / "missing.md")), "no such file"),
    ):
        proc = bench("grade", *args)
        assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_calibrate_runs_the_oracle_helpers_and_skips_missing_ones(tmp_path: Path) -> None:
    cases = {c["id"]: c for c in json.loads((EVALS / "evals.json").read_text())}
    frag = cases["frag-log-diagnosis"]
    pending = dict(
        cases["trace-leak-one-rank"],
        files=[],
        oracle={"command": "python3 scripts/not_here.py x.log", "helper_from": "branch x"},
    )
    negative = cases["neg-nan-loss"]
    (tmp_path / "files").mkdir()
    for name in frag["files"]:
        shutil.copy(EVALS / "files" / name, tmp_path / "files" / name)
    shutil.copy(EVALS / "claims.yaml", tmp_path / "claims.yaml")
    shutil.copy(EVALS / "evals.schema.json", tmp_path / "evals.schema.json")
    (tmp_path / "evals.json").write_text(json.dumps([frag, pending, negative]))
    proc = bench("calibrate", "--evals", str(tmp_path / "evals.json"), "--json")
    doc = json.loads(proc.stdout)
    per = doc["per_case"]
    assert per["frag-log-diagnosis"]["oracle"] == 1.0  # diagnose.py on the log states every claim and number
    assert all(per[c]["empty"] == 0.0 and per[c]["echo"] <= 0.15 for c in per)
    assert per["frag-log-diagnosis"]["skill"] < 0.25  # SKILL.md cannot know this log's numbers
    assert doc["skipped"] == [
        {
            "case_id": "trace-leak-one-rank",
            "why": "scripts/not_here.py is not in this checkout (it lands with branch x)",
        }
    ]
    assert "oracle" not in per["trace-leak-one-rank"]
    bars = {f["kind"]: f for f in doc["floors"]}
    assert bars["empty"]["ok"] and bars["oracle"]["ok"] and bars["oracle+skill"]["bar"] == "reported"
    assert proc.returncode == (0 if doc["ok"] else 1)


def test_committed_calibration_is_of_the_current_dataset() -> None:
    """BENCHMARK.md prints results/calibration.json: it must describe today's evals.json."""
    import hashlib

    doc = json.loads((EVALS / "results" / "calibration.json").read_text())
    assert doc["dataset_sha256"] == hashlib.sha256((EVALS / "evals.json").read_bytes()).hexdigest()
    bars = {f["kind"]: f for f in doc["floors"]}
    assert all(bars[k]["ok"] for k in ("empty", "echo", "skill", "oracle")), doc["floors"]
