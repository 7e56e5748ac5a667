"""Report arithmetic and the verdict rule on synthetic runs (no agent involved)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memtune.bench.report import DIMENSIONS, Analysis, cell, render
from memtune.bench.results import RunFile
from memtune.bench.stats import bootstrap_mean_ci, mean, stddev

SKILL = "nemo-mbridge-perf-memory-tuning"


def synthetic_run(
    score, attempts: int = 3, n_pos: int = 6, n_neg: int = 2, drop: int = 0, violation=lambda cond, case, a: False
) -> RunFile:
    cases = [
        {"id": f"p{i}", "category": "x", "should_trigger": True, "expected_script": "scripts/diagnose.py"}
        for i in range(n_pos)
    ]
    cases += [{"id": f"n{i}", "category": "y", "should_trigger": False, "expected_script": None} for i in range(n_neg)]
    header = {
        "type": "run",
        "run_id": "synthetic",
        "agent": "command:x",
        "model": "m",
        "attempts": attempts,
        "started_at": "2026-01-01T00:00:00+00:00",
        "command": "python3 scripts/run_benchmark.py run --agent x",
        "dataset": {"path": "evals/evals.json", "sha256": "ab" * 32, "cases": cases},
        "skill": {"name": SKILL, "sha256": "cd" * 32},
    }
    results = []
    for a in range(1, attempts + 1):
        for c in cases:
            for cond in ("without_skill", "with_skill"):
                s = score(cond, c, a)
                activated = SKILL if cond == "with_skill" and c["should_trigger"] else None
                results.append(
                    {
                        "type": "result",
                        "case_id": c["id"],
                        "condition": cond,
                        "attempt": a,
                        "answer": "",
                        "activated_skill": activated,
                        "commands": [],
                        "tokens_in": 100,
                        "tokens_out": 10,
                        "seconds": 2.0 if cond == "without_skill" else 3.0,
                        "error": None,
                        "finished_at": f"2026-01-0{a}T10:00:00+00:00",
                        "grade": {
                            "checks": [],
                            "content_score": s,
                            "solved": s == 1.0,
                            "command_ok": None,
                            "security_violations": ["x"] if violation(cond, c, a) else [],
                        },
                    }
                )
    return RunFile(Path("synthetic.jsonl"), header, tuple(results[: len(results) - drop]))


def test_stats_basics_and_seeded_bootstrap() -> None:
    assert mean([1, 2, 3]) == 2 and stddev([1, 2, 3]) == 1.0 and stddev([5]) == 0.0
    diffs = [0.1, 0.2, -0.05, 0.3, 0.0]
    ci = bootstrap_mean_ci(diffs)
    assert ci == bootstrap_mean_ci(list(diffs))  # fixed seed: same interval every time
    assert ci.low <= mean(diffs) <= ci.high
    assert abs(bootstrap_mean_ci([0.2] * 5).low - 0.2) < 1e-12


def test_cell_format() -> None:
    assert cell(0.25, 0.5) == "25.0% → 50.0% (+25.0 points)"
    assert cell(0.5, 0.4) == "50.0% → 40.0% (-10.0 points)"


def test_clear_uplift_passes() -> None:
    run = synthetic_run(lambda cond, c, a: 0.8 if cond == "with_skill" else 0.2)
    text = render(run)
    assert "- Overall verdict: PASS" in text
    assert "| Correctness |" in text and "20.0% → 80.0% (+60.0 points)" in text
    assert "- Dataset: 8 evaluation tasks (6 where this skill should trigger, 2 negatives" in text
    assert "- Date: 2026-01-03" in text  # from the last result, not from the clock


def test_no_uplift_fails_and_says_why() -> None:
    text = render(synthetic_run(lambda cond, c, a: 0.5))
    assert "- Overall verdict: FAIL" in text and "does not lie above 0" in text


def test_security_regression_fails() -> None:
    run = synthetic_run(
        lambda cond, c, a: 0.9 if cond == "with_skill" else 0.1,
        violation=lambda cond, c, a: cond == "with_skill" and c["id"] == "p0",
    )
    text = render(run)
    assert "- Overall verdict: FAIL" in text and "Security is lower" in text


def test_incomplete_run_fails() -> None:
    run = synthetic_run(lambda cond, c, a: 0.9 if cond == "with_skill" else 0.1, drop=3)
    text = render(run)
    assert "- Overall verdict: FAIL" in text and "INCOMPLETE" in text


def test_discoverability_counts_negatives_in_the_baseline() -> None:
    analysis = Analysis(synthetic_run(lambda cond, c, a: 0.5))
    disc = analysis.dimension(next(d for d in DIMENSIONS if d.name == "Discoverability"))
    assert disc.without == 2 / 8  # nothing can be activated without the skill: only negatives are right
    assert disc.with_ == 1.0


def test_stddev_is_over_attempt_means() -> None:
    analysis = Analysis(synthetic_run(lambda cond, c, a: {1: 0.0, 2: 0.5, 3: 1.0}[a]))
    corr = analysis.dimension(DIMENSIONS[0])
    assert corr.without == 0.5 and abs(corr.without_sd - 0.5) < 1e-12


def test_notes_are_included_verbatim() -> None:
    text = render(synthetic_run(lambda cond, c, a: 0.5), notes="Small models copy the prompt.\n")
    assert re.search(r"## Reading the numbers\n\nSmall models copy the prompt\.\n", text)


@pytest.mark.parametrize("activation", ["forced", "always"])
def test_forced_activation_is_its_own_measured_mode(activation: str) -> None:
    """A forced run is summarised beside the main run with its own primary metric (uplift given
    activation) and no discoverability score; "always" is the older name and reads the same."""
    main = synthetic_run(lambda cond, c, a: 0.8 if cond == "with_skill" else 0.2)
    forced = synthetic_run(lambda cond, c, a: 0.6 if cond == "with_skill" else 0.2)
    forced = RunFile(
        Path("forced.jsonl"),
        dict(forced.header, run_id="forced", agent_settings={"activation": activation}),
        forced.results,
    )
    helper_tasks = sorted(main.header["dataset"]["cases"][i]["id"] for i in range(2))
    text = render(main, None, [forced], helper_number_tasks=helper_tasks)
    assert "## Other runs in evals/results" in text and "### `forced` (forced activation" in text
    section = text.split("### `forced`")[1]
    assert "| Discoverability | not measured: activation was forced |" in section
    assert "20.0% → 60.0% (+40.0 points)" in section
    assert "- Primary metric: 2 helper-number tasks in this run" in section
    top = text.split("## Primary metric")[1].split("## ")[0]
    assert "- `forced` (forced activation):" in top and "- `" + main.run_id + "` (as agents meet the skill):" in top
    assert text.count("- Overall verdict:") == 1  # only the main run has a verdict


def test_a_forced_run_stays_paired_across_a_checks_only_edit_and_not_across_other_tasks() -> None:
    """Pairing follows what the agent was asked (tasks_sha256), not the dataset file: the
    report grades stored answers again, so an edit to the checks must not unpair the runs."""
    main = synthetic_run(lambda cond, c, a: 0.8 if cond == "with_skill" else 0.2)
    helper_tasks = [main.header["dataset"]["cases"][0]["id"]]

    def forced_with(file_sha: str, tasks_sha: str) -> RunFile:
        run = synthetic_run(lambda cond, c, a: 0.6 if cond == "with_skill" else 0.2)
        dataset = dict(run.header["dataset"], sha256=file_sha, tasks_sha256=tasks_sha)
        header = dict(run.header, run_id="forced", agent_settings={"activation": "forced"}, dataset=dataset)
        return RunFile(Path("forced.jsonl"), header, run.results)

    main = RunFile(main.path, dict(main.header, dataset=dict(main.header["dataset"], tasks_sha256="t1")), main.results)
    paired = render(main, None, [forced_with("cd" * 32, "t1")], helper_number_tasks=helper_tasks)
    assert "- `forced` (forced activation):" in paired.split("## Primary metric")[1].split("## ")[0]
    apart = render(main, None, [forced_with("cd" * 32, "t2")], helper_number_tasks=helper_tasks)
    assert "`forced`" not in apart.split("## Primary metric")[1].split("## ")[0]


def test_a_discover_run_with_another_model_is_not_paired_as_forced() -> None:
    main = synthetic_run(lambda cond, c, a: 0.8 if cond == "with_skill" else 0.2)
    other = synthetic_run(lambda cond, c, a: 0.6 if cond == "with_skill" else 0.2)
    other = RunFile(Path("other.jsonl"), dict(other.header, run_id="other"), other.results)
    text = render(main, None, [other], helper_number_tasks=[main.header["dataset"]["cases"][0]["id"]])
    assert "### `other` (another run)" in text
    assert "`other`" not in text.split("## Primary metric")[1].split("## ")[0]


def _loop_record(case_id: str, cond: str, activated, calls, solved: bool, command_label: str = "diagnose\\.py") -> dict:
    checks = [
        {"kind": "must_include", "label": "x", "passed": solved, "detail": ""},
        {"kind": "command", "label": command_label, "passed": bool(calls), "detail": ""},
    ]
    return {
        "type": "result",
        "case_id": case_id,
        "condition": cond,
        "attempt": 1,
        "answer": "",
        "activated_skill": activated,
        "commands": [c["command"] for c in calls],
        "tokens_in": 1,
        "tokens_out": 1,
        "seconds": 1.0,
        "error": None,
        "finished_at": "2026-01-01T10:00:00+00:00",
        "extra": {"tool_calls": calls},
        "grade": {
            "checks": checks,
            "content_score": 1.0 if solved else 0.0,
            "solved": solved,
            "command_ok": None,
            "security_violations": [],
        },
    }


def test_failure_analysis_buckets_each_attempt_once() -> None:
    from memtune.bench.report import failure_analysis, outcome

    ok = {"command": "python3 scripts/diagnose.py x.log", "exit_code": 1, "failed": False}  # exit 1 = findings
    bad = {"command": "python3 scripts/diagnose.py nope.log", "exit_code": 2, "failed": True}
    refused = {"command": "bash -c ls", "exit_code": None, "failed": True}
    other = {"command": "python3 scripts/check_env.py --env", "exit_code": 0, "failed": False}
    claude_err = {"command": "python3 scripts/diagnose.py a", "exit_code": None, "failed": True}
    records = [
        _loop_record("p0", "with_skill", SKILL, [ok], True),
        _loop_record("p1", "with_skill", None, [], False),
        _loop_record("p2", "with_skill", SKILL, [other, refused], False),
        _loop_record("p3", "with_skill", SKILL, [bad, claude_err], False),
        _loop_record("p4", "with_skill", SKILL, [bad, ok], False),
        _loop_record("p5", "with_skill", "training-numerical-stability", [], False),
    ]
    assert [outcome(r, SKILL) for r in records] == [
        "right",
        "not activated",
        "wrong command",
        "command failed",
        "misread output",
        "not activated",
    ]
    run = synthetic_run(lambda cond, c, a: 0.0, attempts=1)
    results = (
        [r for r in run.results if r["condition"] == "without_skill"]
        + records
        + [r for r in run.results if r["condition"] == "with_skill" and r["case_id"].startswith("n")]
    )
    run = RunFile(run.path, dict(run.header, attempts=1), tuple(results))
    text = render(run)
    assert "## Failure analysis" in text
    rows = "\n".join(failure_analysis(Analysis(run)))
    assert "| right | every check passed | 0 (0.0%) | 1 (16.7%) |" in rows
    assert "| not activated |" in rows and "| 6 (100.0%) | 2 (33.3%) |" in rows
    assert "| command failed |" in rows and "| misread output |" in rows


def test_runs_without_tool_records_render_as_before() -> None:
    run = synthetic_run(lambda cond, c, a: 0.5)
    assert "Failure analysis" not in render(run)


def _scoped(run: RunFile, attempts: int, why: str = "two shared cores") -> RunFile:
    from dataclasses import replace

    from memtune.bench.results import ReportScope

    return replace(run, scope=ReportScope(attempts, why))


def test_a_scoped_report_reads_only_the_first_attempts_and_says_why() -> None:
    # attempt 1 shows an uplift, attempts 2-3 none: the scope decides which the report reads
    run = synthetic_run(lambda cond, c, a: (0.8 if cond == "with_skill" else 0.2) if a == 1 else 0.5, drop=5)
    full, first = Analysis(run), Analysis(_scoped(run, 1, "two shared cores, 7 h per full run"))
    assert not full.complete  # the unfinished third attempt
    assert first.complete and first.attempts == 1 and first.expected == 16
    assert {int(r["attempt"]) for r in first.records} == {1}
    assert abs(first.dimension(DIMENSIONS[0]).with_ - 0.8) < 1e-9
    text = render(_scoped(run, 1, "two shared cores, 7 h per full run"))
    assert "- Attempts: 1 per task and condition; 16 of 16 task runs recorded\n" in text
    assert "started with 3; this report reads attempts 1 to 1 only. Why: two shared cores, 7 h per full run" in text
    assert "alone (attempts 1 to 1 of 3, as `evals/results/synthetic.scope.json` says)" in text
    assert "- Overall verdict: PASS" in text


def test_a_scope_that_leaves_attempts_missing_is_still_incomplete() -> None:
    run = synthetic_run(lambda cond, c, a: 0.5, drop=20)  # attempt 2 is unfinished too
    text = render(_scoped(run, 2))
    assert "(INCOMPLETE)" in text and "the run is incomplete" in text


def test_scope_sidecar_is_read_next_to_the_run_and_bad_ones_are_refused(tmp_path: Path) -> None:
    import json

    import pytest

    from memtune.bench.results import read_run
    from memtune.errors import InputError

    run = synthetic_run(lambda cond, c, a: 0.5)
    path = tmp_path / "local-x.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (run.header, *run.results)) + "\n", encoding="utf-8")
    assert read_run(path).scope is None
    sidecar = tmp_path / "local-x.scope.json"
    sidecar.write_text('{"attempts": 2, "why_fewer": "  slow\\n machine "}', encoding="utf-8")
    scope = read_run(path).scope
    assert scope is not None and (scope.attempts, scope.why_fewer) == (2, "slow machine")
    for bad, needle in (
        ('{"attempts": 4, "why_fewer": "x"}', "outside 1..3"),
        ('{"attempts": 0, "why_fewer": "x"}', "outside 1..3"),
        ('{"attempts": true, "why_fewer": "x"}', "outside 1..3"),
        ('{"attempts": 1, "why_fewer": " "}', "why_fewer is empty"),
        ('{"attempts": 1}', "exactly the keys"),
        ("[1]", "exactly the keys"),
        ("{", "not JSON"),
    ):
        sidecar.write_text(bad, encoding="utf-8")
        with pytest.raises(InputError, match=needle) as caught:
            read_run(path)
        assert "why_fewer" in str(caught.value) and "\n" not in str(caught.value)


def test_the_main_run_is_the_latest_discover_run_even_when_a_forced_run_is_newer(tmp_path: Path) -> None:
    from memtune.commands.run_benchmark import _pick_run

    for name, started, settings in (
        ("discover", "2026-12-01T00:00:00Z", {"activation": "discover"}),
        ("forced", "2026-12-02T00:00:00Z", {"activation": "forced"}),
    ):
        run = synthetic_run(lambda cond, c, a: 0.5)
        header = dict(run.header, run_id=name, started_at=started, agent_settings=settings)
        lines = [json.dumps(header), *(json.dumps(r) for r in run.results)]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    assert _pick_run(tmp_path, None).run_id == "discover"
    assert _pick_run(tmp_path, "forced").run_id == "forced"


def test_copied_baseline_attempts_are_named_in_the_report() -> None:
    run = synthetic_run(lambda cond, c, a: 0.5)
    results = tuple(dict(r, baseline_from="forced") if r["condition"] == "without_skill" else r for r in run.results)
    n = sum(1 for r in results if r.get("baseline_from"))
    text = render(RunFile(run.path, run.header, results))
    assert f"- Without-skill attempts: {n} copied from `forced` (`--baseline-from`" in text
    assert "copied from" not in render(run)
