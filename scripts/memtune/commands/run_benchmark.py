"""run_benchmark.py: Tier-3 evals — the agent with and without the skill — and BENCHMARK.md.

Only the standard library and stdlib-only memtune modules are imported at top level, so
--help works in a bare interpreter; jsonschema, yaml and llama_cpp load when needed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import click

from memtune.cli import FC, Group, invoke, option
from memtune.commands.options import POSITIVE, compose, json_option
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError
from memtune.files import paths
from memtune.files.writing import writing

if TYPE_CHECKING:  # the bench library loads jsonschema and YAML: imported when a command runs
    from memtune.bench.dataset import Dataset
    from memtune.bench.grading import SecurityRule
    from memtune.bench.report import Record, Regrader
    from memtune.bench.results import RunFile

PATH = click.Path(path_type=Path)

DESCRIPTION = """\
Measure what the skill changes in an agent's answers. Every case in evals/evals.json runs
with the skill installed and without it, --attempts times each; answers are graded
deterministically from each case's `checks`; raw results are appended to
evals/results/<run-id>.jsonl as they finish (re-run the same command to resume), and
`report` writes BENCHMARK.md from those raw results alone.

agents:
  local            Qwen2.5-Coder-1.5B-Instruct (GGUF) via llama-cpp-python in an agent loop: it sees the
                   skill catalog, may load a skill and run its helpers (sandboxed), then answers;
                   needs pip install -e '.[local-llm]' (the model is assembled once into
                   ${XDG_CACHE_HOME:-~/.cache}/memtune and checked against its pinned sha256)
  local-gemma      the earlier Gemma 3 270M base-model completion agent (no tools)
  claude-code      `claude -p` in a fresh project dir; skill installed with npx skills@1.5.16
  codex            `codex exec --json`, same isolation and installation
  command:PROGRAM  any program reading the prompt on stdin (split with shlex, no shell)
A missing agent is reported on one line with exit code 2."""

EPILOG = """\
examples:
  python3 scripts/run_benchmark.py run --agent local --attempts 3
  python3 scripts/run_benchmark.py run --agent local --attempts 1 --cases frag-log-diagnosis,vpp-myth
  python3 scripts/run_benchmark.py run --agent local --activation forced --attempts 3   # uplift given activation
  python3 scripts/run_benchmark.py run --agent 'command:python3 tests/bench_fake_agent.py' --attempts 1
  python3 scripts/run_benchmark.py run --agent claude-code --attempts 3 --workers 4 --judge 'python3 judge.py'
  python3 scripts/run_benchmark.py report                # BENCHMARK.md from the latest run
  python3 scripts/run_benchmark.py report --check        # exit 1 if BENCHMARK.md is stale
  python3 scripts/run_benchmark.py regrade --run local-a3-1a2b3c4d
  python3 scripts/run_benchmark.py validate              # evals.json against its JSON Schema
  python3 scripts/run_benchmark.py grade --task frag-log-diagnosis --answer-file answer.md --json
  python3 scripts/run_benchmark.py calibrate --json      # floors (empty/echo/SKILL.md) and oracles
  python3 scripts/run_benchmark.py calibrate --write     # also record them for BENCHMARK.md"""

HARNESS_VERSION = "memtune-bench 4"  # 4: load turns kept, fenced helper runs, forced mode; 3: tool loop; 2: seeds


def _default_evals() -> Path:
    return paths.EVALS_DIR / "evals.json"


def _schema_for(evals: Path) -> Path:
    return evals.parent / "evals.schema.json"


def _harness_file(evals: Path, name: str) -> Path:
    return evals.parent / "harness" / name


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(paths.SKILL_ROOT).as_posix()
    except ValueError:
        return str(path)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "agent"


@click.group(
    "run-benchmark",
    cls=Group,
    short_help="Tier-3 evals: an agent with and without the skill",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@json_option("print a one-document JSON summary on stdout")
@click.pass_context
def command(ctx: click.Context, as_json: bool) -> None:
    if ctx.invoked_subcommand is None:
        raise InputError("choose a command: run, report, regrade, validate, grade or calibrate (see --help)")
    ctx.obj = as_json  # --json before the command counts as well as after it


def _common(func: FC) -> FC:
    """--evals, --results-dir and --json, which every command takes."""
    return compose(
        option("--evals", type=PATH, default=None, help="dataset (default: evals/evals.json)"),
        option("--results-dir", type=PATH, default=None, help="raw results folder (default: evals/results)"),
        json_option("one JSON document on stdout"),
    )(func)


def _args(params: dict[str, object]) -> tuple[SimpleNamespace, Path, Path]:
    """The parsed options (``as_json`` also set by the group's --json), the dataset and the results folder."""
    ctx = click.get_current_context()
    args = SimpleNamespace(**params)
    args.as_json = bool(args.as_json or (ctx.parent is not None and ctx.parent.obj))
    evals = (args.evals or _default_evals()).resolve()
    results_dir = (args.results_dir or evals.parent / "results").resolve()
    return args, evals, results_dir


@command.command(
    "run",
    help="Run every case with and without the skill; resumes an existing run file.",
    short_help="run the cases with and without the skill (resumable)",
)
@_common
@option("--agent", required=True, help="local | claude-code | codex | command:PROGRAM ARGS")
@option("--attempts", type=POSITIVE, default=3, help="attempts per case and condition (default 3)")
@option("--workers", type=POSITIVE, default=1, help="parallel tasks (default 1)")
@option("--run-id", help="name of the run file (default: <agent>-a<attempts>-<dataset digest>)")
@option("--fresh", is_flag=True, help="discard an existing run file with this id and start over")
@option("--cases", help="comma-separated case ids to run (a smoke run; default all)")
@option("--judge", help='program grading expected_behavior: JSON on stdin, {"score": 0..1} on stdout')
@option("--model", type=PATH, help="local agent: a GGUF file (default: assemble the PyPI model package)")
@option(
    "--max-tokens",
    type=POSITIVE,
    default=None,
    help="local agents: tokens generated per turn (default 384 for local, 160 for local-gemma)",
)
@option(
    "--max-turns",
    type=POSITIVE,
    default=6,
    help="local agent: model replies per task, loads and commands included (default 6)",
)
@option(
    "--activation",
    type=click.Choice(("discover", "forced", "always")),
    default="discover",
    help="local agents: 'discover' (the model decides from the skill catalog whether to load the skill; "
    "default) or 'forced' (the body is loaded up front in every with-skill task: uplift given activation, "
    "apart from discovery; 'always' is the same, its older name)",
)
@option(
    "--threads",
    type=POSITIVE,
    default=None,
    help="local agents: llama.cpp threads (default 2 for local, 1 per worker for local-gemma)",
)
@option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=900.0,
    help="seconds per task for CLI/command agents (default 900)",
)
@option("--skill-dir", type=PATH, default=None, help="the skill under test (default: this package)")
@option("--keep-workdirs", is_flag=True, help="keep each task's project directory for inspection")
@option(
    "--baseline-from",
    metavar="RUN_ID",
    help="copy the without-skill attempts of this earlier run (same agent, model, loop settings, dataset and "
    "SKILL.md; only the activation may differ) instead of sampling them again",
)
def run_command(**params: object) -> int:
    args, evals, results_dir = _args(params)
    return cmd_run(args, evals, results_dir)


@command.command(
    "report",
    help=(
        "Write BENCHMARK.md from one run file (default: the latest).\n\n"
        'A <run id>.scope.json beside the run file, {"attempts": N, "why_fewer": "..."},\n'
        "limits the report to the run's first N attempts and prints the reason."
    ),
    short_help="write BENCHMARK.md from the raw results",
)
@_common
@option("--run", help="run id (file name without .jsonl); default: the latest run")
@option("--output", type=PATH, default=None, help="default: BENCHMARK.md at the skill root; '-' for stdout")
@option("--check", is_flag=True, help="do not write; exit 1 if the output file differs")
def report_command(**params: object) -> int:
    args, _evals, results_dir = _args(params)
    return cmd_report(args, results_dir)


@command.command(
    "regrade",
    help="Re-grade a run's stored answers with the current evals.json checks.",
    short_help="re-grade stored answers with the current checks",
)
@_common
@option("--run", help="run id; default: the latest run")
def regrade_command(**params: object) -> int:
    args, evals, results_dir = _args(params)
    return cmd_regrade(args, evals, results_dir)


@command.command(
    "validate",
    help="Validate evals.json against evals.schema.json.",
    short_help="validate evals.json against evals.schema.json",
)
@_common
def validate_command(**params: object) -> int:
    args, evals, _results_dir = _args(params)
    return cmd_validate(evals, args.as_json)


@command.command(
    "grade",
    help=(
        "Grade one answer to one task and print each check's verdict.\n\n"
        "The content score is 0 when the answer asserts one of the task's wrong claims, at most "
        "0.2 when it misses a key claim or number, otherwise the share of required claims and "
        "numbers it makes. A claim counts only where the answer asserts it: 'do not raise TP' "
        "is not 'raise TP'. Claims shared by tasks are in evals/claims.yaml."
    ),
    short_help="grade one answer to one task (claims, wrong claims, numbers)",
)
@_common
@option("--task", required=True, help="task id in evals.json")
@option("--answer-file", required=True, type=PATH, help="the answer (text or Markdown); '-' reads stdin")
@option("--command-ran", "commands", multiple=True, help="a command the agent ran (repeatable; for the command check)")
def grade_command(**params: object) -> int:
    args, evals, _results_dir = _args(params)
    return cmd_grade(args, evals)


@command.command(
    "calibrate",
    help=(
        "Score scripted answers on every task: empty, the question echoed, SKILL.md pasted, and two "
        "oracles (the output of the helper the task names, run with the right arguments on the "
        "task's own files; that output followed by SKILL.md). Bars: empty <= 0.05 and echo <= "
        "0.15 on all tasks, SKILL.md <= 0.30 and the helper-output oracle >= 0.85 on positives; "
        "the oracle followed by SKILL.md is reported beside them. Exit 1 when a bar fails. A task "
        "whose helper is not in this checkout is skipped with a note."
    ),
    short_help="floors and oracle ceilings of the grader on the whole dataset",
)
@_common
@option(
    "--write",
    is_flag=True,
    help="also write evals/results/calibration.json, which BENCHMARK.md prints beside the uplift",
)
@option(
    "--skill-dir", type=PATH, default=None, help="the skill whose SKILL.md and helpers are used (default: this package)"
)
def calibrate_command(**params: object) -> int:
    args, evals, results_dir = _args(params)
    return cmd_calibrate(args, evals, results_dir)


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "run_benchmark.py", argv)


def _load(evals: Path) -> Dataset:
    from memtune.bench.dataset import load_dataset

    return load_dataset(evals, _schema_for(evals))


def _security_rules(evals: Path) -> tuple[tuple[SecurityRule, ...], str]:
    from memtune.bench.dataset import read_json
    from memtune.bench.grading import load_security_rules

    path = _harness_file(evals, "security.json")
    import hashlib

    return load_security_rules(read_json(path, "security rules")), hashlib.sha256(path.read_bytes()).hexdigest()


def cmd_validate(evals: Path, as_json: bool) -> int:
    dataset = _load(evals)
    summary = {
        "dataset": _display(evals),
        "sha256": dataset.sha256,
        "cases": len(dataset.cases),
        "positives": dataset.positives,
        "negatives": dataset.negatives,
        "valid": True,
    }
    if as_json:
        from memtune.cli import print_json

        print_json(summary)
    else:
        print(
            f"{_display(evals)}: {len(dataset.cases)} cases ({dataset.positives} positive, "
            f"{dataset.negatives} negative) valid against {_schema_for(evals).name}; sha256 {dataset.sha256}"
        )
    return EXIT_OK


def _reproduce_command(args: SimpleNamespace, run_id: str) -> str:
    parts = [
        "python3 scripts/run_benchmark.py run",
        f"--agent {_quote(args.agent)}",
        f"--attempts {args.attempts}",
        f"--workers {args.workers}",
    ]
    if args.agent in ("local", "local-gemma") and args.max_tokens is not None:
        parts.append(f"--max-tokens {args.max_tokens}")
    if args.agent == "local" and args.max_turns != 6:
        parts.append(f"--max-turns {args.max_turns}")
    if args.agent in ("local", "local-gemma") and args.activation != "discover":
        parts.append(f"--activation {args.activation}")
    if args.cases:
        parts.append(f"--cases {args.cases}")
    if args.judge:
        parts.append(f"--judge {_quote(args.judge)}")
    if args.baseline_from:
        parts.append(f"--baseline-from {args.baseline_from}")
    parts.append(f"--run-id {run_id}")
    return " ".join(parts)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def cmd_run(args: SimpleNamespace, evals: Path, results_dir: Path) -> int:
    from memtune.bench.agents import AgentUnavailable, make_agent
    from memtune.bench.baseline import baseline_records
    from memtune.bench.dataset import Dataset, read_json
    from memtune.bench.results import RunWriter, read_run, result_key
    from memtune.bench.runner import Progress, Runner, plan_jobs
    from memtune.bench.skill import load_skill

    dataset = _load(evals)
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        known = dataset.by_id()
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise InputError(f"--cases: unknown case id(s) {', '.join(unknown)} (see {_display(evals)})")
        dataset = Dataset(dataset.path, dataset.sha256, tuple(known[c] for c in wanted))
    skill = load_skill((args.skill_dir or paths.SKILL_ROOT).resolve())
    rules, rules_sha = _security_rules(evals)
    catalog = read_json(_harness_file(evals, "skill_catalog.json"), "skill catalog").get("skills", [])
    try:
        agent = make_agent(
            args.agent,
            model_path=args.model,
            catalog=catalog,
            workers=args.workers,
            timeout=args.timeout,
            max_tokens=args.max_tokens,
            threads=args.threads,
            activation=args.activation,
            max_turns=args.max_turns,
        )
        agent.prepare()
    except AgentUnavailable as exc:
        raise InputError(f"agent unavailable: {exc}") from None  # one line, exit 2, named by the runner

    run_id = args.run_id or f"{_slug(args.agent)}-a{args.attempts}-{dataset.sha256[:8]}"
    if args.agent in ("local", "local-gemma") and args.activation != "discover" and not args.run_id:
        run_id += f"-{args.activation}"
    if args.cases and not args.run_id:  # a smoke run must not resume into (or block) the full run's file
        import hashlib

        run_id += "-cases-" + hashlib.sha256(args.cases.encode()).hexdigest()[:6]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run_id):
        raise InputError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-' only")
    path = results_dir / f"{run_id}.jsonl"
    info = agent.describe()
    header = {
        "type": "run",
        "run_id": run_id,
        "harness": HARNESS_VERSION,
        "agent": args.agent,
        "model": agent.model,
        "agent_settings": info.get("settings", {}),
        "attempts": args.attempts,
        "workers": args.workers,
        "judge": args.judge,
        "started_at": _now_utc(),
        "smoke": bool(args.cases),
        "command": _reproduce_command(args, run_id),
        "dataset": {
            "path": _display(evals),
            "sha256": dataset.sha256,
            "cases": [
                {
                    "id": c.id,
                    "category": c.category,
                    "should_trigger": c.should_trigger,
                    "expected_script": c.expected_script,
                }
                for c in dataset.cases
            ],
        },
        "skill": {"name": skill.name, "sha256": skill.sha256},
        "security_rules_sha256": rules_sha,
    }
    if args.baseline_from:
        header["baseline_from"] = args.baseline_from
    baseline = _baseline_source(args, results_dir, run_id, header)
    if path.exists() and args.fresh:
        path.unlink()
    if path.exists():
        existing = read_run(path)
        h = existing.header
        mismatch = [
            name
            for name, old, new in (
                ("harness", h.get("harness"), HARNESS_VERSION),
                ("agent", h.get("agent"), args.agent),
                ("attempts", h.get("attempts"), args.attempts),
                *(
                    (key, h.get("agent_settings", {}).get(key), agent.describe().get("settings", {}).get(key))
                    for key in ("activation", "max_turns", "max_tokens_per_turn", "output_cap_chars")
                ),
                ("dataset sha256", h["dataset"]["sha256"], dataset.sha256),
                ("SKILL.md sha256", h["skill"]["sha256"], skill.sha256),
                ("cases", [c["id"] for c in h["dataset"]["cases"]], [c.id for c in dataset.cases]),
            )
            if old != new
        ]
        if mismatch:
            raise InputError(
                f"{path}: existing run differs in {', '.join(mismatch)}; pass --fresh to start over or a new --run-id"
            )
        writer = RunWriter.resume(path)
        done = read_run(path).done_keys()
    else:
        writer = RunWriter.create(path, header)
        done = set()
    if baseline is not None:
        copied = baseline_records(baseline, args.attempts, [c.id for c in dataset.cases], done)
        for record in copied:
            writer.append(record)
            done.add(result_key(record))
        sys.stderr.write(
            f"run {run_id}: {len(copied)} without-skill attempts copied from {baseline.run_id} (--baseline-from)\n"
        )
    jobs = plan_jobs(dataset, args.attempts, done)
    total = len(dataset.cases) * 2 * args.attempts
    sys.stderr.write(
        f"run {run_id}: {len(jobs)} of {total} tasks to run ({total - len(jobs)} already done) "
        f"with agent {args.agent} [{agent.model}]; raw results: {_display(path)}\n"
    )
    progress = Progress(total, total - len(jobs))
    runner = Runner(
        agent,
        dataset,
        skill,
        writer,
        rules,
        judge=args.judge,
        workers=args.workers,
        keep_workdirs=args.keep_workdirs,
        progress=progress,
    )
    errors = runner.run(jobs)
    summary = {"run_id": run_id, "results": _display(path), "ran": len(jobs), "total": total, "agent_errors": errors}
    if args.as_json:
        from memtune.cli import print_json

        print_json(summary)
    else:
        print(
            f"{run_id}: {total} of {total} tasks recorded in {_display(path)} ({errors} agent errors this session); "
            f"write the report with: python3 scripts/run_benchmark.py report --run {run_id}"
        )
    return EXIT_OK


def _baseline_source(
    args: SimpleNamespace, results_dir: Path, run_id: str, header: Mapping[str, Any]
) -> RunFile | None:
    """The run named by --baseline-from, checked before anything is written: its without-skill
    condition must be this run's (memtune.bench.baseline says what must match)."""
    from memtune.bench.baseline import baseline_mismatch
    from memtune.bench.results import read_run

    if not args.baseline_from:
        return None
    if args.baseline_from == run_id:
        raise InputError(f"--baseline-from {args.baseline_from}: that is this run; name an earlier run")
    path = results_dir / f"{args.baseline_from}.jsonl"
    if not path.is_file():
        raise InputError(
            f"--baseline-from {args.baseline_from}: no such run (see the *.jsonl files in {_display(results_dir)})"
        )
    source = read_run(path)
    differs = baseline_mismatch(source.header, header)
    if differs:
        raise InputError(
            f"--baseline-from {args.baseline_from}: its without-skill attempts are another condition "
            f"(differs in {', '.join(differs)}); run without --baseline-from"
        )
    return source


def _pick_run(results_dir: Path, run_id: str | None) -> RunFile:
    """The run the report is about: --run, else the latest run that is neither a
    forced-activation run nor a smoke run over a subset of the tasks."""
    from memtune.bench.report import is_forced_activation, is_smoke
    from memtune.bench.results import list_runs, read_run

    if run_id:
        path = results_dir / f"{run_id}.jsonl"
        if not path.is_file():
            raise InputError(f"{path}: no such run (see the *.jsonl files in {_display(results_dir)})")
        return read_run(path)
    runs = list_runs(results_dir) if results_dir.is_dir() else []
    if not runs:
        raise InputError(f"{_display(results_dir)}: no run files; run `run_benchmark.py run --agent ...` first")
    primary = [r for r in runs if not is_forced_activation(r) and not is_smoke(r)]
    return (primary or runs)[-1]


def cmd_report(args: SimpleNamespace, results_dir: Path) -> int:
    from memtune.bench.report import render
    from memtune.bench.results import list_runs

    run = _pick_run(results_dir, args.run)
    notes_path = run.path.with_suffix(".notes.md")
    notes = notes_path.read_text(encoding="utf-8") if notes_path.is_file() else None
    others = [r for r in list_runs(results_dir) if r.path != run.path]
    regrade, helper_tasks = _regrader(_default_evals() if args.evals is None else args.evals.resolve())
    calibration_path = results_dir / CALIBRATION_FILE
    calibration = None
    if calibration_path.is_file():
        import json

        calibration = json.loads(calibration_path.read_text(encoding="utf-8"))
    text = render(run, notes, others, regrade, helper_tasks, calibration)
    if args.output is not None and str(args.output) == "-":
        sys.stdout.write(text)
        return EXIT_OK
    output = args.output or paths.SKILL_ROOT / "BENCHMARK.md"
    if args.check:
        current = output.read_text(encoding="utf-8") if output.is_file() else ""
        if current != text:
            prog = click.get_current_context().find_root().info_name  # run_benchmark.py, or memtune
            sys.stderr.write(
                f"{prog}: {_display(output)} is stale: regenerate with "
                f"python3 scripts/run_benchmark.py report --run {run.run_id}\n"
            )
            return EXIT_FINDINGS
        print(f"{_display(output)} matches {_display(run.path)}")
        return EXIT_OK
    with writing(output):
        output.write_text(text, encoding="utf-8")
    print(f"wrote {_display(output)} from {_display(run.path)}")
    return EXIT_OK


def _regrader(evals: Path) -> tuple[Regrader, list[str]]:
    """A function grading a stored record again with the current dataset (None for an answer
    to a task that changed since), and the ids of the helper-number tasks."""
    from memtune.bench.grading import grade_answer

    dataset = _load(evals)
    rules, _sha = _security_rules(evals)
    cases = dataset.by_id()

    def regrade(record: Record) -> Record | None:
        case = cases.get(record["case_id"])
        if case is None or record.get("question_sha256", case.question_sha256) != case.question_sha256:
            return None
        if record.get("files_sha256", case.files_sha256) != case.files_sha256:
            return None
        grade = grade_answer(case.checks, record.get("answer", "") or "", record.get("commands", []) or [], rules)
        return dict(record, grade=grade.to_json())

    from memtune.bench.dataset import is_helper_number_task

    helper = [c.id for c in dataset.cases if is_helper_number_task(c)]
    return regrade, helper


def cmd_regrade(args: SimpleNamespace, evals: Path, results_dir: Path) -> int:
    from memtune.bench.grading import grade_answer
    from memtune.bench.results import rewrite

    run = _pick_run(results_dir, args.run)
    dataset = _load(evals)
    rules, rules_sha = _security_rules(evals)
    cases = dataset.by_id()
    # answers to a different question or to different fixture files cannot be re-graded
    # (runs recorded before files_sha256 existed are checked on the question alone)
    changed_questions = sorted(
        {
            r["case_id"]
            for r in run.results
            if r["case_id"] in cases
            and (
                r.get("question_sha256") != cases[r["case_id"]].question_sha256
                or r.get("files_sha256", cases[r["case_id"]].files_sha256) != cases[r["case_id"]].files_sha256
            )
        }
    )
    missing = sorted({r["case_id"] for r in run.results} - set(cases))
    if changed_questions or missing:
        raise InputError(
            f"{run.path.name}: cannot regrade: question changed for {', '.join(changed_questions) or '-'}; "
            f"case removed: {', '.join(missing) or '-'} (rerun those cases instead)"
        )
    new_results = []
    for record in run.results:
        record = dict(record)
        grade = grade_answer(
            cases[record["case_id"]].checks, record.get("answer", ""), record.get("commands", []), rules
        )
        record["grade"] = grade.to_json()
        new_results.append(record)
    header = dict(run.header)
    header["dataset"] = dict(
        header["dataset"],
        sha256=dataset.sha256,
        cases=[
            {
                "id": c.id,
                "category": c.category,
                "should_trigger": c.should_trigger,
                "expected_script": c.expected_script,
            }
            for c in dataset.cases
            if c.id in {x["id"] for x in run.header["dataset"]["cases"]}
        ],
    )
    header["security_rules_sha256"] = rules_sha
    rewrite(run.path, header, new_results)
    print(
        f"regraded {len(new_results)} results in {_display(run.path)} against {_display(evals)} ({dataset.sha256[:12]})"
    )
    return EXIT_OK


def cmd_grade(args: SimpleNamespace, evals: Path) -> int:
    from memtune.bench.grading import grade_answer

    dataset = _load(evals)
    case = dataset.by_id().get(args.task)
    if case is None:
        raise InputError(f"--task {args.task!r}: no such task in {_display(evals)} (see its ids)")
    if str(args.answer_file) == "-":
        answer = sys.stdin.read()
    else:
        try:
            answer = args.answer_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"--answer-file {args.answer_file}: no such file") from None
        except (UnicodeDecodeError, IsADirectoryError) as exc:
            raise InputError(f"--answer-file {args.answer_file}: not a UTF-8 text file ({exc})") from None
    grade = grade_answer(case.checks, answer, list(args.commands))
    doc = {
        "task": case.id,
        "should_trigger": case.should_trigger,
        "content_score": round(grade.content_score, 4),
        "solved": grade.solved,
        "command_ok": grade.command_ok,
        "checks": [
            {"kind": c.kind, "label": c.label, "passed": c.passed, "key": c.key, "detail": c.detail}
            for c in grade.checks
        ],
    }
    if args.as_json:
        from memtune.cli import print_json

        print_json(doc)
        return EXIT_OK
    print(f"{case.id}: content score {grade.content_score:.2f}; solved: {'yes' if grade.solved else 'no'}")
    for c in grade.checks:
        mark = "ok  " if c.passed else "FAIL"
        kind = f"{c.kind}{' (key)' if c.key and c.kind != 'wrong' else ''}"
        print(f"  {mark} {kind:<11} {c.label}{f' -- {c.detail}' if c.detail else ''}")
    return EXIT_OK


CALIBRATION_FILE = "calibration.json"


def cmd_calibrate(args: SimpleNamespace, evals: Path, results_dir: Path) -> int:
    import json

    from memtune.bench.calibrate import KINDS, calibrate
    from memtune.bench.skill import load_skill

    dataset = _load(evals)
    root = (args.skill_dir or paths.SKILL_ROOT).resolve()
    skill = load_skill(root)
    text = (root / "SKILL.md").read_text(encoding="utf-8")
    result = calibrate(dataset, text, skill.sha256, root)
    doc = result.to_json()
    doc["dataset"] = _display(evals)
    if args.write:
        out = results_dir / CALIBRATION_FILE
        with writing(out):
            out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.as_json:
        from memtune.cli import print_json

        print_json(doc)
    else:
        print(
            f"{_display(evals)}: {len(result.positives)} positives, {len(result.negatives)} negatives; "
            "mean content score (solved) of scripted answers:"
        )
        print(f"  {'answer':<13} {'positives':>16} {'negatives':>16} {'all':>16}")
        for kind in KINDS:
            cells = []
            for over in ("positives", "negatives", "all"):
                n_ok, n = result.solved_count(kind, over)
                cells.append(f"{result.mean(kind, over):.3f} ({n_ok}/{n})" if n else "n/a")
            print(f"  {kind:<13} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
        for floor in doc["floors"]:
            print(
                f"  {'ok  ' if floor['ok'] else 'FAIL'} {floor['kind']} on {floor['over']} {floor['bar']}: {floor['value']:.3f}"
            )
        for item in doc["skipped"]:
            print(f"  skipped oracle for {item['case_id']}: {item['why']}")
        if args.write:
            print(f"wrote {_display(results_dir / CALIBRATION_FILE)}")
    return EXIT_OK if doc["ok"] else EXIT_FINDINGS


def _now_utc() -> str:
    """The run's start time; datetime is imported here, not at start-up (--help stays fast)."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")
