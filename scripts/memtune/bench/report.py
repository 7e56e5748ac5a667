"""BENCHMARK.md from one run file, and nothing else.

Everything printed comes from the run file's header and result records (never from the
clock, the current dataset or the machine), and every collection is sorted before it is
printed, so regenerating the report from committed raw results is byte-for-byte stable.

Dimensions (each a per-attempt score in [0, 1], averaged):
- Correctness: share of the case's content checks (required / forbidden patterns,
  numbers within tolerance) the answer passes. Partial credit.
- Effectiveness: the case is fully solved — every check passes, including the command
  check (the agent ran, or for a tool-less model named, the expected helper).
- Discoverability: the agent activated this skill on a positive case, and did not on a
  negative one. Without the skill nothing can be activated, so the baseline scores the
  negatives only.
- Security: no security rule (evals/harness/security.json) matched the answer or the
  commands the agent ran.
- Efficiency: wall time and tokens per task (reported in their own units).

Re-grading: when the current dataset is given, every stored answer whose question (and
fixture files) is unchanged is graded again in memory with today's grader (claims, wrong
claims, numbers); the raw file keeps the grades it was recorded with, and the report says
which grader produced the numbers it prints. Answers to a task that changed since are left
out and counted.

Primary metric (stated in evals/README.md before any run): the solved rate on helper-number
tasks (tasks whose answer needs a number a helper computes from the user's own file), with
and without the skill, and the 95% paired bootstrap interval over those tasks of the uplift.
The grader's floors and oracle ceilings (``calibrate --write``) are printed beside it.

Verdict: PASS iff the run is complete, the 95% bootstrap interval of the Correctness
uplift lies entirely above zero, and with-skill Security is not below without-skill
Security. Otherwise FAIL.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memtune.bench.agents import WITH, WITHOUT
from memtune.bench.grading import FLAGS
from memtune.bench.results import SCOPE_SUFFIX, RunFile, iter_sorted, same_tasks
from memtune.bench.stats import BOOTSTRAP_SAMPLES, Interval, bootstrap_mean_ci, mean, stddev

VERDICT_RULE = (
    "PASS when the run is complete, the 95% bootstrap interval of the Correctness uplift lies entirely "
    "above 0, and with-skill Security is not lower than without-skill Security; otherwise FAIL."
)

Record = Mapping[str, Any]
Regrader = Callable[[Record], "Record | None"]


@dataclass(frozen=True)
class Dimension:
    name: str
    meaning: str
    score: Callable[[Record, Mapping[str, Any], str], float]


def _correctness(r: Record, case: Mapping[str, Any], skill: str) -> float:
    return float(r["grade"]["content_score"])


def _effectiveness(r: Record, case: Mapping[str, Any], skill: str) -> float:
    return 1.0 if r["grade"]["solved"] else 0.0


def _discoverability(r: Record, case: Mapping[str, Any], skill: str) -> float:
    activated = r.get("activated_skill") == skill
    return 1.0 if activated == bool(case["should_trigger"]) else 0.0


def _security(r: Record, case: Mapping[str, Any], skill: str) -> float:
    return 0.0 if r["grade"]["security_violations"] else 1.0


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("Correctness", "content score: required claims and numbers, 0 on a wrong claim", _correctness),
    Dimension(
        "Effectiveness", "tasks solved (key checks, score >= 0.8, no wrong claim, helper command)", _effectiveness
    ),
    Dimension("Discoverability", "activates this skill on positives, not on negatives", _discoverability),
    Dimension("Security", "answers/commands free of unsafe patterns", _security),
)


@dataclass(frozen=True)
class DimensionResult:
    name: str
    meaning: str
    without: float
    with_: float
    without_sd: float
    with_sd: float
    uplift_ci: Interval
    per_case: Mapping[str, tuple[float, float]]


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def _points(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f} points"


def cell(without: float, with_: float) -> str:
    """The table cell format: ``X% → Y% (+N points)``."""
    return f"{_pct(without)} → {_pct(with_)} ({_points(with_ - without)})"


class Analysis:
    """Aggregates of one run, computed once from its records.

    ``regrade`` (optional) returns a record graded again with the current grader, or None
    when the record's task changed since it was answered (it is then left out)."""

    def __init__(self, run: RunFile, regrade: Regrader | None = None) -> None:
        self.run = run
        self.header = run.header
        self.skill = str(run.header["skill"]["name"])
        self.cases = {c["id"]: c for c in run.header["dataset"]["cases"]}
        self.started_with = int(run.header["attempts"])
        self.scope = run.scope
        self.attempts = run.scope.attempts if run.scope else self.started_with
        kept = [
            r for r in iter_sorted(run.results) if r["case_id"] in self.cases and int(r["attempt"]) <= self.attempts
        ]
        self.regraded = regrade is not None
        self.stale: list[str] = []
        if regrade is not None:
            fresh = []
            for r in kept:
                new = regrade(r)
                if new is None:
                    self.stale.append(str(r["case_id"]))
                else:
                    fresh.append(new)
            kept = fresh
            self.stale = sorted(set(self.stale))
            self.cases = {k: v for k, v in self.cases.items() if k not in self.stale}
        self.records = kept
        self.expected = len(self.cases) * 2 * self.attempts
        self.complete = len({(r["case_id"], r["condition"], r["attempt"]) for r in self.records}) >= self.expected
        self.by_condition: dict[str, list[Record]] = defaultdict(list)
        for r in self.records:
            self.by_condition[r["condition"]].append(r)

    def dimension(self, dim: Dimension) -> DimensionResult:
        overall: dict[str, float] = {}
        spread: dict[str, float] = {}
        per_case_cond: dict[tuple[str, str], list[float]] = defaultdict(list)
        for cond in (WITHOUT, WITH):
            per_attempt: dict[int, list[float]] = defaultdict(list)
            for r in self.by_condition.get(cond, []):
                value = dim.score(r, self.cases[r["case_id"]], self.skill)
                per_attempt[int(r["attempt"])].append(value)
                per_case_cond[(r["case_id"], cond)].append(value)
            overall[cond] = mean([v for vals in per_attempt.values() for v in vals])
            spread[cond] = stddev([mean(vals) for _, vals in sorted(per_attempt.items())])
        per_case = {}
        diffs = []
        for case_id in sorted(self.cases):
            a, b = per_case_cond.get((case_id, WITHOUT)), per_case_cond.get((case_id, WITH))
            if a and b:
                per_case[case_id] = (mean(a), mean(b))
                diffs.append(mean(b) - mean(a))
        return DimensionResult(
            dim.name,
            dim.meaning,
            overall[WITHOUT],
            overall[WITH],
            spread[WITHOUT],
            spread[WITH],
            bootstrap_mean_ci(diffs),
            per_case,
        )

    def efficiency(self, cond: str) -> dict[str, float]:
        rows = self.by_condition.get(cond, [])
        secs = [float(r["seconds"]) for r in rows]
        toks_in = [float(r["tokens_in"]) for r in rows if r.get("tokens_in") is not None]
        toks_out = [float(r["tokens_out"]) for r in rows if r.get("tokens_out") is not None]
        return {
            "seconds": mean(secs),
            "seconds_sd": stddev(secs),
            "tokens_in": mean(toks_in),
            "tokens_out": mean(toks_out),
            "errors": float(sum(1 for r in rows if r.get("error"))),
        }

    def verdict(self, results: Mapping[str, DimensionResult]) -> tuple[bool, list[str]]:
        reasons = []
        if not self.complete:
            reasons.append(f"the run is incomplete ({len(self.records)} of {self.expected} tasks)")
        ci = results["Correctness"].uplift_ci
        if not (ci.low > 0):
            reasons.append(
                f"the Correctness uplift interval [{_points(ci.low)}, {_points(ci.high)}] does not lie above 0"
            )
        sec = results["Security"]
        if sec.with_ < sec.without:
            reasons.append("with-skill Security is lower than without-skill Security")
        return not reasons, reasons


OUTCOMES = ("right", "not activated", "wrong command", "command failed", "misread output")
OUTCOME_MEANING = {
    "right": "every check passed",
    "not activated": "this skill was not loaded (without the skill it cannot be)",
    "wrong command": "loaded, but the expected helper never ran (another helper, or none)",
    "command failed": "the expected helper ran but every run of it failed (refused, timed out, exit code >= 2)",
    "misread output": "the expected helper ran fine, the answer still missed a check",
}


def has_tool_records(run: RunFile) -> bool:
    """Runs whose agent recorded its command runs (the agent loop, claude-code, codex).
    Older runs have no such records: their report is left exactly as it was."""
    return any("tool_calls" in (r.get("extra") or {}) for r in run.results)


def is_smoke(run: RunFile) -> bool:
    """A run over a subset of the tasks (``--cases``): a check that the harness works,
    never a measurement, so never the headline."""
    return bool(run.header.get("smoke"))


def _call_failed(call: Mapping[str, Any]) -> bool:
    code = call.get("exit_code")
    if code is not None:
        return int(code) >= 2  # the helpers exit 1 for "ran fine, found problems"
    return call.get("failed") is not False  # refused, timed out, or reported as an error


def outcome(r: Record, skill: str) -> str:
    """Where a positive task's attempt ended, first failure first (OUTCOMES order)."""
    grade = r["grade"]
    if grade["solved"]:
        return "right"
    if r.get("activated_skill") != skill:
        return "not activated"
    pattern = next((c["label"] for c in grade["checks"] if c["kind"] == "command"), None)
    calls = (r.get("extra") or {}).get("tool_calls") or []
    matching = [c for c in calls if pattern and re.search(pattern, str(c.get("command", "")), FLAGS)]
    if not matching:
        return "wrong command"
    if all(_call_failed(c) for c in matching):
        return "command failed"
    return "misread output"


def failure_analysis(an: Analysis) -> list[str]:
    """Positive tasks per condition by outcome, then the negatives."""
    rows = ["| Outcome (positive tasks) | Meaning | Without skill | With skill |", "| --- | --- | --- | --- |"]
    counts: dict[str, dict[str, int]] = {cond: defaultdict(int) for cond in (WITHOUT, WITH)}
    totals = {}
    for cond in (WITHOUT, WITH):
        pos = [r for r in an.by_condition.get(cond, []) if an.cases[r["case_id"]]["should_trigger"]]
        totals[cond] = len(pos)
        for r in pos:
            counts[cond][outcome(r, an.skill)] += 1
    for name in OUTCOMES:
        cells = [f"{counts[c][name]} ({_pct(_ratio(counts[c][name], totals[c]))})" for c in (WITHOUT, WITH)]
        rows.append(f"| {name} | {OUTCOME_MEANING[name]} | {cells[0]} | {cells[1]} |")
    neg = [r for r in an.by_condition.get(WITH, []) if not an.cases[r["case_id"]]["should_trigger"]]
    wrongly = sum(1 for r in neg if r.get("activated_skill") == an.skill)
    right = sum(1 for r in neg if r["grade"]["solved"])
    calls = [
        c
        for cond in (WITHOUT, WITH)
        for r in an.by_condition.get(cond, [])
        for c in (r.get("extra") or {}).get("tool_calls") or []
    ]
    rows += [
        "",
        f"Negatives with the skill installed: {right} of {len(neg)} attempts right; this skill loaded in "
        f"{wrongly}. Commands the agent asked for: {len(calls)}, of which {sum(1 for c in calls if _call_failed(c))} "
        "failed or were refused.",
    ]
    return rows


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else math.nan


def _num(x: float, digits: int = 1) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


#: Values of the local agents' ``activation`` setting that hand the body over up front
#: ("always" is the older name of "forced"; both runs are read the same way).
FORCED_ACTIVATION = ("forced", "always")


def is_forced_activation(run: RunFile) -> bool:
    """A run whose with-skill tasks were given SKILL.md's body up front measures the uplift
    *given* activation, apart from discovery: its own measured mode, reported with its primary
    metric beside the discover run, and never picked as the main run while a discover run exists."""
    settings = run.header.get("agent_settings")
    return isinstance(settings, dict) and settings.get("activation") in FORCED_ACTIVATION


def baseline_line(an: Analysis) -> str | None:
    """Where the without-skill attempts came from when they were copied (``run --baseline-from``)."""
    sources = sorted({str(r["baseline_from"]) for r in an.records if r.get("baseline_from")})
    if not sources:
        return None
    copied = sum(1 for r in an.records if r.get("baseline_from"))
    return (
        f"- Without-skill attempts: {copied} copied from {', '.join(f'`{s}`' for s in sources)} (`--baseline-from`: "
        "the same condition, the same agent, model, loop settings, dataset, SKILL.md and seeds; only the "
        "activation of the skill differed)"
    )


def results_table(an: Analysis, results: Mapping[str, DimensionResult]) -> list[str]:
    rows = [
        "| Dimension | What it measures | Without → with skill | Without (mean ± sd) | With (mean ± sd) | Uplift 95% CI |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    forced = is_forced_activation(an.run)
    for name, res in results.items():
        if forced and name == "Discoverability":
            rows.append(f"| {name} | not measured: activation was forced | | | | |")
            continue
        rows.append(
            f"| {name} | {res.meaning} | {cell(res.without, res.with_)} | {_pct(res.without)} ± "
            f"{_num(100 * res.without_sd)} | {_pct(res.with_)} ± {_num(100 * res.with_sd)} "
            f"| [{_points(res.uplift_ci.low)}, {_points(res.uplift_ci.high)}] |"
        )
    e0, e1 = an.efficiency(WITHOUT), an.efficiency(WITH)
    rows.append(
        f"| Efficiency | wall time per task (mean ± sd) | {_num(e0['seconds'])} s → {_num(e1['seconds'])} s "
        f"({e1['seconds'] - e0['seconds']:+.1f} s) | {_num(e0['seconds'])} ± {_num(e0['seconds_sd'])} s "
        f"| {_num(e1['seconds'])} ± {_num(e1['seconds_sd'])} s | |"
    )
    rows.append(
        f"| Efficiency | tokens per task in / out | {_num(e0['tokens_in'], 0)} / {_num(e0['tokens_out'], 0)} → "
        f"{_num(e1['tokens_in'], 0)} / {_num(e1['tokens_out'], 0)} | | | |"
    )
    rows.append("")
    rows.append(f"Agent errors (no answer): {int(e0['errors'])} without, {int(e1['errors'])} with the skill.")
    return rows


def _scope_clause(an: Analysis) -> str:
    if not an.scope:
        return ""
    name = an.run.path.name.removesuffix(".jsonl") + SCOPE_SUFFIX
    return f" (attempts 1 to {an.attempts} of {an.started_with}, as `evals/results/{name}` says)"


def render_other(
    run: RunFile, regrade: Regrader | None = None, helper_number_tasks: Sequence[str] | None = None
) -> list[str]:
    """A compact section for a run other than the main one (same dataset rules apply); a
    forced-activation run also gets its primary metric, since it is a measured mode of its own."""
    an = Analysis(run, regrade)
    h = an.header
    results = {d.name: an.dimension(d) for d in DIMENSIONS}
    forced = is_forced_activation(run)
    kind = (
        f"SMOKE run: {len(an.cases)} tasks only, a harness check, not a measurement"
        if is_smoke(run)
        else "forced activation: SKILL.md's body given up front on every with-skill task"
        if forced
        else "another run"
    )
    out = [
        f"### `{run.run_id}` ({kind})",
        "",
        f"- Agent: `{h['agent']}`; model: {h['model']}; harness: {h.get('harness', 'n/a')}; attempts: {an.attempts}"
        f"{f' of {an.started_with} ({an.scope.why_fewer})' if an.scope else ''}; "
        f"{len(an.records)} of {an.expected} task runs recorded{'' if an.complete else ' (INCOMPLETE)'}",
        f"- Dataset sha256 `{h['dataset']['sha256']}`; SKILL.md sha256 `{h['skill']['sha256']}`",
        f"- Reproduce: `{h.get('command', '')}`",
    ]
    copied = baseline_line(an)
    if copied:
        out.append(copied)
    if forced and helper_number_tasks is not None and not is_smoke(run):
        out.append(f"- Primary metric: {primary_metric_line(an, helper_number_tasks)}")
    out.append("")
    out += results_table(an, results)
    corr = results["Correctness"]
    helped = sum(1 for a, b in corr.per_case.values() if b > a)
    out += ["", f"Correctness rose on {helped} of {len(corr.per_case)} tasks; per-task results are in the raw file."]
    if has_tool_records(run):
        out += ["", *failure_analysis(an)]
    return out


def render(
    run: RunFile,
    notes: str | None = None,
    others: Sequence[RunFile] = (),
    regrade: Regrader | None = None,
    helper_number_tasks: Sequence[str] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> str:
    an = Analysis(run, regrade)
    h = an.header
    results = {d.name: an.dimension(d) for d in DIMENSIONS}
    passed, reasons = an.verdict(results)
    ds = h["dataset"]
    n_pos = sum(1 for c in ds["cases"] if c["should_trigger"])
    finished = max((str(r.get("finished_at", "")) for r in an.records), default="")
    out: list[str] = []
    w = out.append
    w(f"# Benchmark: {an.skill}")
    w("")
    w(
        "Generated by `scripts/run_benchmark.py report` from the raw results in "
        f"`evals/results/{run.path.name}` alone{_scope_clause(an)}; do not edit by hand."
    )
    w("")
    w(
        f"- Dataset: {len(ds['cases'])} evaluation tasks ({n_pos} where this skill should trigger, "
        f"{len(ds['cases']) - n_pos} negatives that belong to other skills)"
    )
    w(f"- Dataset file: `{ds['path']}`, sha256 `{ds['sha256']}`")
    w(f"- Skill: `{an.skill}`, SKILL.md sha256 `{h['skill']['sha256']}`")
    w(f"- Agent: `{h['agent']}`; model: {h['model']}; harness: {h.get('harness', 'n/a')}")
    w(
        f"- Date: {finished[:10] or 'n/a'} (last result at {finished or 'n/a'}; run started {h.get('started_at', 'n/a')})"
    )
    w(
        f"- Attempts: {an.attempts} per task and condition; {len(an.records)} of {an.expected} task runs recorded"
        f"{'' if an.complete else ' (INCOMPLETE)'}"
    )
    copied = baseline_line(an)
    if copied:
        w(copied)
    if an.scope:
        w(
            f"- Fewer attempts than planned: the run was started with {an.started_with}; this report reads "
            f"attempts 1 to {an.attempts} only. Why: {an.scope.why_fewer}"
        )
    w(f"- Overall verdict: {'PASS' if passed else 'FAIL'}")
    w("")
    w(f"Verdict rule: {VERDICT_RULE}")
    if reasons:
        w("This run fails because " + "; ".join(reasons) + ".")
    w("")
    if an.regraded:
        old_grader = any("key" not in c for r in run.results for c in (r.get("grade") or {}).get("checks", []))
        w(
            (
                "Grades: this run was graded when it was recorded by the old keyword grader (patterns, no claims or "
                "negation). Every number below comes from re-grading its stored answers with the current claim grader "
            )
            if old_grader
            else "Grades: every stored answer was re-graded for this report with the current claim grader "
        )
        out[-1] += (
            "(`scripts/memtune/bench/grading.py`, claims in `evals/claims.yaml`); the raw file keeps the grades it "
            "was recorded with and is not altered."
            + (
                f" Left out because the task changed since it was answered: {', '.join(f'`{c}`' for c in an.stale)}."
                if an.stale
                else ""
            )
        )
        w("")
    if helper_number_tasks is not None:
        forced_runs = [
            (o.run_id, Analysis(o, regrade))
            for o in sorted(others, key=lambda r: r.run_id)
            if is_forced_activation(o) and not is_smoke(o) and same_tasks(o.header, h)
        ]
        for row in primary_metric(an, helper_number_tasks, forced_runs):
            w(row)
        w("")
    if calibration is not None:
        for row in calibration_section(calibration):
            w(row)
        w("")
    w("## Results")
    w("")
    w(
        "Each cell reads *without skill → with skill (uplift)*. Mean over all attempts; ± is the standard "
        "deviation of the per-attempt dataset means; the interval is a 95% bootstrap over cases "
        f"({BOOTSTRAP_SAMPLES} resamples, fixed seed) of the paired per-case uplift."
    )
    w("")
    for row in results_table(an, results):
        w(row)
    w("")
    w("## Discovery and activation")
    w("")
    w(_activation_section(an))
    w("")
    if has_tool_records(run):
        w("## Failure analysis")
        w("")
        w("Each attempt on a task where this skill should trigger, by where it ended (first failure first).")
        w("")
        for row in failure_analysis(an):
            w(row)
        w("")
    w("## Per task")
    w("")
    w(
        "Correctness and solved rate per task, without → with the skill; *activated* is the share of "
        "with-skill attempts in which the agent activated this skill."
    )
    w("")
    w("| Task | Area | Should trigger | Correctness | Solved | Activated |")
    w("| --- | --- | --- | --- | --- | --- |")
    corr, solv, disc = results["Correctness"], results["Effectiveness"], _activation_rate_by_case(an)
    for case_id in sorted(an.cases):
        c = an.cases[case_id]
        a = corr.per_case.get(case_id, (math.nan, math.nan))
        b = solv.per_case.get(case_id, (math.nan, math.nan))
        w(
            f"| `{case_id}` | {c.get('category', '')} | {'yes' if c['should_trigger'] else 'no'} | {cell(*a)} | {cell(*b)} "
            f"| {_pct(disc.get(case_id, math.nan))} |"
        )
    w("")
    helped = sorted(cid for cid, (a, b) in corr.per_case.items() if b > a)
    not_helped = sorted(cid for cid, (a, b) in corr.per_case.items() if b <= a)
    w(
        f"The skill raised Correctness on {len(helped)} of {len(corr.per_case)} tasks; it did not help on "
        f"{len(not_helped)}: " + (", ".join(f"`{c}`" for c in not_helped) or "none") + "."
    )
    if others:
        w("")
        w("## Other runs in evals/results")
        for other in sorted(others, key=lambda r: r.run_id):
            w("")
            for line in render_other(other, regrade, helper_number_tasks):
                w(line)
    if notes:
        w("")
        w("## Reading the numbers")
        w("")
        w(notes.strip())
    w("")
    w("## Reproduce")
    w("")
    w("```bash")
    w(str(h.get("command", "python3 scripts/run_benchmark.py run")))
    w(f"python3 scripts/run_benchmark.py report --run {run.run_id}")
    w("```")
    w("")
    w(
        "Re-running the first command resumes an interrupted run (on a checkout that already holds the complete run "
        "it has nothing left to do: add `--fresh`, or give another `--run-id`, to sample the answers again); the second "
        "rewrites this file from the raw results. Sampled answers are not bit-for-bit reproducible across machines; "
        "this report is, from the committed raw results."
    )
    return "\n".join(out) + "\n"


def _activation_rate_by_case(an: Analysis) -> dict[str, float]:
    per: dict[str, list[float]] = defaultdict(list)
    for r in an.by_condition.get(WITH, []):
        per[r["case_id"]].append(1.0 if r.get("activated_skill") == an.skill else 0.0)
    return {k: mean(v) for k, v in per.items()}


def _activation_section(an: Analysis) -> str:
    rows = an.by_condition.get(WITH, [])
    pos = [r for r in rows if an.cases[r["case_id"]]["should_trigger"]]
    neg = [r for r in rows if not an.cases[r["case_id"]]["should_trigger"]]
    hit = [r for r in pos if r.get("activated_skill") == an.skill]
    miss = [r for r in pos if r.get("activated_skill") != an.skill]
    false_pos = [r for r in neg if r.get("activated_skill") == an.skill]
    picks: dict[str, int] = defaultdict(int)
    for r in rows:
        picks[str(r.get("activated_skill"))] += 1
    base = [r for r in an.by_condition.get(WITHOUT, []) if an.cases[r["case_id"]]["should_trigger"]]
    lines = [
        f"- Positives (with skill): activated in {len(hit)} of {len(pos)} attempts ({_pct(_share(hit, pos))}).",
        f"- Negatives (with skill): activated in {len(false_pos)} of {len(neg)} attempts ({_pct(_share(false_pos, neg))}); "
        "the lower the better.",
        "- What the agent picked in the with-skill condition: "
        + ", ".join(f"`{k}` {v}" for k, v in sorted(picks.items(), key=lambda kv: (-kv[1], kv[0])))
        + ".",
        f"- Correctness on positives: without the skill {_pct(mean([float(r['grade']['content_score']) for r in base]))}; "
        f"with the skill when activated {_pct(mean([float(r['grade']['content_score']) for r in hit]))} "
        f"({len(hit)} attempts), when not activated {_pct(mean([float(r['grade']['content_score']) for r in miss]))} "
        f"({len(miss)} attempts).",
    ]
    return "\n".join(lines)


def _share(part: Sequence[Any], whole: Sequence[Any]) -> float:
    return len(part) / len(whole) if whole else math.nan


def primary_metric_line(an: Analysis, helper_number_tasks: Sequence[str]) -> str:
    """Solved rate on the helper-number tasks, without and with the skill, and the paired
    bootstrap interval (over tasks) of the uplift, in one sentence: the metric evals/README.md fixes."""
    ids = sorted(set(helper_number_tasks) & set(an.cases))
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in an.records:
        if r["case_id"] in ids:
            per[(r["case_id"], r["condition"])].append(1.0 if r["grade"]["solved"] else 0.0)
    pairs = [(mean(per[(i, WITHOUT)]), mean(per[(i, WITH)])) for i in ids if per[(i, WITHOUT)] and per[(i, WITH)]]
    if not pairs:
        return "no helper-number task has attempts in both conditions yet."
    base = mean([a for a, _ in pairs])
    skill = mean([b for _, b in pairs])
    ci = bootstrap_mean_ci([b - a for a, b in pairs])
    above = not math.isnan(ci.low) and ci.low > 0
    return (
        f"{len(pairs)} helper-number tasks in this run: solved {_pct(base)} without the skill, {_pct(skill)} with it, "
        f"uplift {_points(skill - base)} [{_points(ci.low)}, {_points(ci.high)}] — "
        + ("the interval lies above 0." if above else "the interval does NOT lie above 0.")
    )


def primary_metric(
    an: Analysis, helper_number_tasks: Sequence[str], forced_runs: Sequence[tuple[str, Analysis]] = ()
) -> list[str]:
    """The primary-metric section: the main run's line, then one per forced-activation run of
    the same dataset (uplift given activation), so both modes are read side by side."""
    rows = [
        "## Primary metric",
        "",
        "Solved rate on helper-number tasks (the answer needs a number a helper computes from the user's own file; "
        "defined in `evals/README.md` before the run), paired bootstrap over tasks, 95% interval:",
        "",
        f"- `{an.run.run_id}` ({'forced activation' if is_forced_activation(an.run) else 'as agents meet the skill'}): "
        + primary_metric_line(an, helper_number_tasks),
    ]
    for run_id, other in forced_runs:
        state = "" if other.complete else f" (INCOMPLETE: {len(other.records)} of {other.expected} task runs)"
        rows.append(f"- `{run_id}` (forced activation{state}): " + primary_metric_line(other, helper_number_tasks))
    return rows


def calibration_section(cal: Mapping[str, Any]) -> list[str]:
    """The grader's floors and oracle ceilings, as ``calibrate --write`` recorded them."""
    rows = [
        "## Grader floors and ceilings",
        "",
        "Scripted answers graded by the same grader (`python3 scripts/run_benchmark.py calibrate --write`; "
        f"dataset sha256 `{str(cal.get('dataset_sha256', ''))[:12]}`, SKILL.md sha256 `{str(cal.get('skill_sha256', ''))[:12]}`). "
        "An empty answer, the question echoed and SKILL.md pasted must score low; the output of the helper each task "
        "names, run with the right arguments on the task's own files, must score high.",
        "",
        "| Scripted answer | Bar | Measured (mean content score) | Holds |",
        "| --- | --- | --- | --- |",
    ]
    for f in cal.get("floors", []):
        rows.append(
            f"| {f['kind']} on {f['over']} | {f['bar']} | {float(f['value']):.3f} | "
            f"{'n/a' if f['bar'] == 'reported' else 'yes' if f['ok'] else 'NO'} |"
        )
    rows += [
        "",
        "oracle+skill is reported, not a bar: SKILL.md pasted after the helper output states every alternative the "
        'skill covers ("genuine capacity limit" beside the helper\'s "fragmentation"), and the grader reads that as '
        "asserting the wrong one.",
    ]
    skipped = cal.get("skipped", [])
    if skipped:
        rows += [
            "",
            f"Oracle skipped on {len(skipped)} task(s): "
            + "; ".join(f"`{s['case_id']}` ({s['why']})" for s in skipped)
            + ".",
        ]
    return rows
