"""run_benchmark.py end to end against a tiny deterministic `command:` agent (no model)."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

from helper_cli import Result, invoke

REPO = Path(__file__).resolve().parent.parent
FAKE = f"command:{sys.executable} {REPO / 'tests' / 'bench_fake_agent.py'}"
CASES = "frag-first-fix,frag-log-diagnosis,cudagraph-nccl-register,neg-nsys-profile"
N_CASES = 4


def bench(*args: str, env: dict | None = None) -> Result:
    return invoke("run_benchmark", *args, env=env)


def run_fake(results: Path, *extra: str, attempts: int = 2, env: dict | None = None) -> Result:
    return bench(
        "run",
        "--agent",
        FAKE,
        "--attempts",
        str(attempts),
        "--workers",
        "2",
        "--cases",
        CASES,
        "--run-id",
        "fake",
        "--results-dir",
        str(results),
        *extra,
        env=env,
    )


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("results")
    proc = run_fake(results)
    assert proc.returncode == 0, proc.stderr
    return results


@pytest.mark.slow
def test_end_to_end_run_and_report(finished_run: Path, tmp_path: Path) -> None:
    lines = records(finished_run / "fake.jsonl")
    header, results = lines[0], lines[1:]
    assert header["type"] == "run" and header["attempts"] == 2
    assert len(results) == N_CASES * 2 * 2
    assert {(r["condition"], r["attempt"]) for r in results} == {
        (c, a) for c in ("with_skill", "without_skill") for a in (1, 2)
    }
    # the fake agent only knows what the installed SKILL.md copy tells it
    with_skill = [r for r in results if r["condition"] == "with_skill" and r["case_id"] == "cudagraph-nccl-register"]
    assert all("NCCL_GRAPH_REGISTER=0" in r["answer"] for r in with_skill)
    assert all(r["activated_skill"] == "nemo-mbridge-perf-memory-tuning" for r in with_skill)

    out = tmp_path / "BENCHMARK.md"
    proc = bench("report", "--results-dir", str(finished_run), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert f"- Dataset: {N_CASES} evaluation tasks" in text
    assert re.search(r"^- Overall verdict: (PASS|FAIL)$", text, re.M)
    row = re.search(r"^\| Correctness \|[^|]*\| (\d+\.\d)% → (\d+\.\d)% \(([+-]\d+\.\d) points\) \|", text, re.M)
    assert row, text
    before, after, uplift = map(float, row.groups())
    assert after > before and abs((after - before) - uplift) < 0.11
    assert header["dataset"]["sha256"] in text
    assert "python3 scripts/run_benchmark.py run --agent" in text


@pytest.mark.slow
def test_report_is_byte_for_byte_deterministic(finished_run: Path, tmp_path: Path) -> None:
    first = bench("report", "--results-dir", str(finished_run), "--output", "-").stdout
    # the order results were appended in depends on thread timing: it must not matter
    lines = (finished_run / "fake.jsonl").read_text().splitlines()
    shuffled = lines[1:]
    random.Random(7).shuffle(shuffled)
    other = tmp_path / "results"
    other.mkdir()
    (other / "fake.jsonl").write_text("\n".join([lines[0], *shuffled]) + "\n")
    second = bench("report", "--results-dir", str(other), "--output", "-").stdout
    assert first and first == second
    out = tmp_path / "B.md"
    out.write_text(first)
    assert bench("report", "--results-dir", str(other), "--output", str(out), "--check").returncode == 0
    out.write_text(first + "edited\n")
    assert bench("report", "--results-dir", str(other), "--output", str(out), "--check").returncode == 1


@pytest.mark.slow
def test_resume_after_crash_runs_only_missing_tasks(tmp_path: Path) -> None:
    results = tmp_path / "results"
    log = tmp_path / "calls.log"
    assert run_fake(results, attempts=1, env={"FAKE_AGENT_LOG": str(log)}).returncode == 0
    path = results / "fake.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    # simulate a crash: five tasks were written, the sixth was cut off mid-line
    path.write_text("".join(lines[:6]) + lines[6][: len(lines[6]) // 2])
    kept = {(r["case_id"], r["condition"], r["attempt"]) for r in records_prefix(lines[1:6])}
    log.write_text("")
    proc = run_fake(results, attempts=1, env={"FAKE_AGENT_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert "already done" in proc.stderr
    rerun = {tuple(line.split()) for line in log.read_text().splitlines()}
    assert len(rerun) == N_CASES * 2 - 5
    assert not {(c, cond, str(a)) for c, cond, a in kept} & rerun
    final = records(path)[1:]  # parses: the torn line is gone
    keys = [(r["case_id"], r["condition"], r["attempt"]) for r in final]
    assert len(keys) == len(set(keys)) == N_CASES * 2


def records_prefix(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_resume_refuses_a_run_with_other_settings(tmp_path: Path) -> None:
    results = tmp_path / "results"
    assert run_fake(results, attempts=1).returncode == 0
    proc = run_fake(results, attempts=2)
    assert proc.returncode == 2
    assert "attempts" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_agent_failure_is_a_recorded_result(tmp_path: Path) -> None:
    proc = run_fake(tmp_path, attempts=1, env={"FAKE_AGENT_FAIL_CASE": "frag-first-fix"})
    assert proc.returncode == 0, proc.stderr
    failed = [r for r in records(tmp_path / "fake.jsonl")[1:] if r["error"]]
    assert {r["case_id"] for r in failed} == {"frag-first-fix"}
    assert all(r["grade"]["content_score"] < 1 for r in failed)


@pytest.mark.parametrize(
    "agent, needle",
    [
        ("command:/nonexistent/agent-program", "agent-program"),
        ("command:surely-not-a-program-xyz", "surely-not-a-program-xyz"),
        ("claude-code", "claude"),
        ("codex", "codex"),
    ],
)
def test_missing_agent_exits_2_with_one_line(tmp_path: Path, agent: str, needle: str) -> None:
    env = {"PATH": str(tmp_path)}  # an empty PATH: neither claude, codex nor npx is found
    proc = bench("run", "--agent", agent, "--results-dir", str(tmp_path / "r"), env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_unknown_agent_and_unknown_case_exit_2(tmp_path: Path) -> None:
    assert bench("run", "--agent", "gpt-9", "--results-dir", str(tmp_path)).returncode == 2
    proc = bench("run", "--agent", FAKE, "--cases", "no-such-case", "--results-dir", str(tmp_path))
    assert proc.returncode == 2 and "no-such-case" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "field, case_id", [("question_sha256", "frag-first-fix"), ("files_sha256", "frag-log-diagnosis")]
)
def test_regrade_refuses_answers_to_a_changed_task(
    finished_run: Path, tmp_path: Path, field: str, case_id: str
) -> None:
    lines = (finished_run / "fake.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if f'"case_id": "{case_id}"' in line)
    record = json.loads(lines[index])
    record[field] = "0" * 64
    lines[index] = json.dumps(record)
    (tmp_path / "fake.jsonl").write_text("\n".join(lines) + "\n")
    proc = bench("regrade", "--results-dir", str(tmp_path), "--run", "fake")
    assert proc.returncode == 2 and "question changed" in proc.stderr and case_id in proc.stderr


@pytest.mark.slow
def test_regrade_rewrites_grades_in_place(finished_run: Path, tmp_path: Path) -> None:
    original = (finished_run / "fake.jsonl").read_text().splitlines()
    record = json.loads(original[1])
    record["grade"]["content_score"] = 0.123  # a stale grade
    (tmp_path / "fake.jsonl").write_text("\n".join([original[0], json.dumps(record), *original[2:]]) + "\n")
    proc = bench("regrade", "--results-dir", str(tmp_path), "--run", "fake")
    assert proc.returncode == 0, proc.stderr
    regraded = records(tmp_path / "fake.jsonl")
    assert regraded[1]["grade"]["content_score"] != 0.123
    assert [r["answer"] for r in regraded[1:]] == [json.loads(x)["answer"] for x in original[1:]]


def test_validate_command() -> None:
    proc = bench("validate", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["valid"] and doc["cases"] >= 56 and doc["negatives"] >= 12 and doc["positives"] >= 40


def test_committed_benchmark_matches_committed_raw_results() -> None:
    """BENCHMARK.md is generated: regenerating it from evals/results must give the same bytes."""
    runs = sorted((REPO / "evals" / "results").glob("*.jsonl"))
    assert runs, "no committed run under evals/results"
    proc = bench("report", "--check")
    assert proc.returncode == 0, proc.stderr
    text = (REPO / "BENCHMARK.md").read_text()
    assert re.search(r"^- Dataset: \d+ evaluation tasks", text, re.M)
    assert re.search(r"^- Overall verdict: (PASS|FAIL)$", text, re.M)


def test_committed_runs_are_complete_and_regraded_by_the_current_grader() -> None:
    """Committed raw results are never edited (issue 23): a run recorded against an older
    dataset stays as it is, and the report re-grades its stored answers with today's grader.
    Every run must be complete, and every answer to a task whose question and files are
    unchanged must be re-gradable."""
    from memtune.bench.dataset import load_dataset
    from memtune.bench.results import read_run
    from memtune.commands.run_benchmark import _regrader

    cases = load_dataset(REPO / "evals" / "evals.json").by_id()
    regrade, helper_tasks = _regrader(REPO / "evals" / "evals.json")
    assert len(helper_tasks) >= 20
    for path in sorted((REPO / "evals" / "results").glob("*.jsonl")):
        run = read_run(path)
        header = run.header
        # three attempts, or fewer with the reason in <run>.scope.json (read_run refuses an empty one)
        attempts = run.scope.attempts if run.scope else header["attempts"]
        assert attempts >= 3 or run.scope is not None
        keys = {(r["case_id"], r["condition"], r["attempt"]) for r in run.results if r["attempt"] <= attempts}
        assert len(keys) == len(header["dataset"]["cases"]) * 2 * attempts, f"{path.name}: incomplete"
        for record in run.results:
            case = cases.get(record["case_id"])
            unchanged = case is not None and record.get("question_sha256") == case.question_sha256
            regraded = regrade(record)
            assert (regraded is not None) == (
                unchanged and record.get("files_sha256", case.files_sha256) == case.files_sha256
            )
            if regraded is not None:
                assert 0.0 <= regraded["grade"]["content_score"] <= 1.0


@pytest.mark.slow
def test_smoke_runs_are_labelled_and_never_the_headline(finished_run: Path, tmp_path: Path) -> None:
    lines = records(finished_run / "fake.jsonl")
    assert lines[0]["smoke"] is True  # --cases makes a smoke run
    results = tmp_path / "results"
    results.mkdir()
    full = dict(lines[0], run_id="full", smoke=False, started_at="2026-01-01T00:00:00+00:00")
    smoke = dict(lines[0], run_id="smoke", started_at="2026-06-01T00:00:00+00:00")  # the newer one
    for name, header in (("full", full), ("smoke", smoke)):
        (results / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [header, *lines[1:]]))
    proc = bench("report", "--results-dir", str(results), "--output", "-")
    assert proc.returncode == 0, proc.stderr
    assert "from the raw results in `evals/results/full.jsonl`" in proc.stdout
    assert "### `smoke` (SMOKE run: 4 tasks only, a harness check, not a measurement)" in proc.stdout


def _run_as(results: Path, run_id: str, *extra: str, env: dict | None = None) -> Result:
    return bench(
        "run", "--agent", FAKE, "--attempts", "1", "--workers", "2", "--cases", CASES,
        "--run-id", run_id, "--results-dir", str(results), *extra, env=env,
    )  # fmt: skip


def test_baseline_from_copies_the_without_skill_attempts_and_runs_only_the_rest(tmp_path: Path) -> None:
    results, log = tmp_path / "results", tmp_path / "calls.log"
    assert _run_as(results, "first").returncode == 0
    proc = _run_as(results, "second", "--baseline-from", "first", env={"FAKE_AGENT_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert f"{N_CASES} without-skill attempts copied from first" in proc.stderr
    ran = {tuple(line.split()) for line in log.read_text().splitlines()}
    assert {cond for _, cond, _ in ran} == {"with_skill"} and len(ran) == N_CASES
    first = {
        (r["case_id"], r["attempt"]): r
        for r in records(results / "first.jsonl")[1:]
        if r["condition"] == "without_skill"
    }
    header, *second = records(results / "second.jsonl")
    assert header["baseline_from"] == "first" and "--baseline-from first" in header["command"]
    without = [r for r in second if r["condition"] == "without_skill"]
    assert len(without) == N_CASES and all(r["baseline_from"] == "first" for r in without)
    for r in without:
        assert r["answer"] == first[(r["case_id"], r["attempt"])]["answer"]
    assert not any("baseline_from" in r for r in second if r["condition"] == "with_skill")
    # resuming copies nothing twice and runs nothing
    log.write_text("")
    again = _run_as(results, "second", "--baseline-from", "first", env={"FAKE_AGENT_LOG": str(log)})
    assert again.returncode == 0 and log.read_text() == "" and "0 without-skill attempts copied" in again.stderr
    assert len(records(results / "second.jsonl")) == 1 + 2 * N_CASES


@pytest.mark.parametrize(
    ("tamper", "needle"),
    [
        (lambda h: h.update(model="another model"), "differs in model"),
        (lambda h: h["skill"].update(sha256="0" * 64), "differs in SKILL.md sha256"),
        (lambda h: h.setdefault("agent_settings", {}).update(max_turns=99), "differs in agent setting max_turns"),
    ],
)
def test_baseline_from_refuses_another_condition_before_writing(tmp_path: Path, tamper, needle: str) -> None:
    results = tmp_path / "results"
    assert _run_as(results, "first").returncode == 0
    path = results / "first.jsonl"
    header, *rest = path.read_text().splitlines()
    h = json.loads(header)
    tamper(h)
    path.write_text("\n".join([json.dumps(h), *rest]) + "\n")
    proc = _run_as(results, "second", "--baseline-from", "first")
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (results / "second.jsonl").exists()


def test_baseline_from_a_missing_run_or_itself_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    proc = _run_as(results, "second", "--baseline-from", "nope")
    assert proc.returncode == 2 and "--baseline-from nope: no such run" in proc.stderr
    proc = _run_as(results, "second", "--baseline-from", "second")
    assert proc.returncode == 2 and "that is this run" in proc.stderr
    assert not (results / "second.jsonl").exists()


def test_activation_alone_may_differ_between_baseline_and_run() -> None:
    from memtune.bench.baseline import baseline_mismatch

    base = {
        "harness": "h", "agent": "local", "model": "m", "security_rules_sha256": "r",
        "dataset": {"sha256": "d", "cases": [{"id": "a"}, {"id": "b"}]}, "skill": {"sha256": "s"},
        "agent_settings": {"activation": "forced", "max_turns": 6, "threads": 2},
    }  # fmt: skip
    discover = json.loads(json.dumps(base))
    discover["agent_settings"]["activation"] = "discover"
    assert baseline_mismatch(base, discover) == []
    subset = json.loads(json.dumps(discover))
    subset["dataset"]["cases"] = [{"id": "a"}]
    assert baseline_mismatch(base, subset) == []  # a run over fewer cases may copy
    wider = json.loads(json.dumps(discover))
    wider["dataset"]["cases"].append({"id": "c"})
    assert baseline_mismatch(base, wider) == ["cases"]
    wider["agent_settings"]["threads"] = 4
    assert baseline_mismatch(base, wider) == ["cases", "agent setting threads"]


def test_a_run_resumes_after_a_grader_change_but_not_after_a_task_change(tmp_path: Path) -> None:
    import shutil

    evals = tmp_path / "evals"
    shutil.copytree(REPO / "evals", evals, ignore=shutil.ignore_patterns("results"))
    results = tmp_path / "results"
    first = CASES.split(",")[0]

    def edit(change) -> None:
        cases = json.loads((evals / "evals.json").read_text())
        change(next(c for c in cases if c["id"] == first))
        (evals / "evals.json").write_text(json.dumps(cases, indent=2))

    assert _run_as(results, "r", "--evals", str(evals / "evals.json")).returncode == 0
    edit(lambda c: c["checks"].setdefault("claims", []).append({"label": "extra", "patterns": ["extra"]}))
    again = _run_as(results, "r", "--evals", str(evals / "evals.json"))
    assert again.returncode == 0 and "0 of" in again.stderr  # nothing left to run, nothing refused
    edit(lambda c: c.update(question=c["question"] + " Also, why?"))
    changed = _run_as(results, "r", "--evals", str(evals / "evals.json"))
    assert changed.returncode == 2 and "tasks (questions, files)" in changed.stderr


def test_a_baseline_from_before_a_grader_change_still_matches() -> None:
    from memtune.bench.baseline import baseline_mismatch

    def header(file_sha: str, tasks_sha: str | None) -> dict:
        dataset = {"sha256": file_sha, "cases": [{"id": "a"}]}
        if tasks_sha:
            dataset["tasks_sha256"] = tasks_sha
        return {"harness": "h", "agent": "local", "model": "m", "dataset": dataset, "skill": {"sha256": "s"}}

    assert baseline_mismatch(header("f1", "t"), header("f2", "t")) == []  # only the checks changed
    assert baseline_mismatch(header("f1", "t1"), header("f1", "t2")) == ["tasks (questions, files)"]
    assert baseline_mismatch(header("f1", None), header("f2", "t")) == ["tasks (questions, files)"]  # an older run
    assert baseline_mismatch(header("f1", None), header("f1", "t")) == []  # an older run, the same file


def test_a_run_does_not_resume_over_changed_helpers(tmp_path: Path) -> None:
    """SKILL.md's digest alone let a resumed run mix two versions of the helpers; the header
    now carries a digest of everything the installed skill runs or shows the agent."""
    results = tmp_path / "results"
    assert _run_as(results, "r").returncode == 0
    path = results / "r.jsonl"
    header, *rest = records(path)
    assert len(header["skill"]["files_sha256"]) == 64

    def with_files_digest(value: str | None) -> None:
        skill = {k: v for k, v in header["skill"].items() if k != "files_sha256"}
        if value is not None:
            skill["files_sha256"] = value
        path.write_text("".join(json.dumps(r) + "\n" for r in [dict(header, skill=skill), *rest]))

    with_files_digest("0" * 64)  # recorded with other helpers
    refused = _run_as(results, "r")
    assert refused.returncode == 2 and "helpers and references" in refused.stderr
    with_files_digest(None)  # recorded before the digest existed: SKILL.md guards it
    assert _run_as(results, "r").returncode == 0


def test_the_skill_files_digest_follows_the_helpers_not_the_harness_or_the_evals(tmp_path: Path) -> None:
    import subprocess

    from memtune.bench.skill import skill_files_sha256

    assert skill_files_sha256(tmp_path) is None  # no git: nothing to list
    for rel in ("SKILL.md", "scripts/diagnose.py", "scripts/memtune/bench/grading.py", "evals/evals.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("v1\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    first = skill_files_sha256(tmp_path)
    for harness_side in ("scripts/memtune/bench/grading.py", "evals/evals.json"):
        (tmp_path / harness_side).write_text("v2\n")
        assert skill_files_sha256(tmp_path) == first, harness_side
    (tmp_path / "scripts/diagnose.py").write_text("v2\n")
    assert skill_files_sha256(tmp_path) not in (None, first)
