"""run_benchmark.py: Tier-3 evals — the agent with and without the skill — and BENCHMARK.md.

Only the standard library and stdlib-only memtune modules are imported at top level, so
--help works in a bare interpreter; jsonschema, yaml and llama_cpp load when needed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import FC, Group, invoke, option
from memtune.commands.bench_inputs import (
    default_evals,
    display,
    load_dataset_file,
    schema_for,
    security_rules,
)
from memtune.commands.options import POSITIVE, compose, json_option
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError
from memtune.files import paths
from memtune.files.writing import writing

if TYPE_CHECKING:  # the bench library loads jsonschema and YAML: imported when a command runs
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
    evals = (args.evals or default_evals()).resolve()
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
    from memtune.commands.bench_run import cmd_run

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


def cmd_validate(evals: Path, as_json: bool) -> int:
    dataset = load_dataset_file(evals)
    summary = {
        "dataset": display(evals),
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
            f"{display(evals)}: {len(dataset.cases)} cases ({dataset.positives} positive, "
            f"{dataset.negatives} negative) valid against {schema_for(evals).name}; sha256 {dataset.sha256}"
        )
    return EXIT_OK


def _pick_run(results_dir: Path, run_id: str | None) -> RunFile:
    """The run the report is about: --run, else the latest run that is neither a
    forced-activation run nor a smoke run over a subset of the tasks."""
    from memtune.bench.report import is_forced_activation, is_smoke
    from memtune.bench.results import list_runs, read_run

    if run_id:
        path = results_dir / f"{run_id}.jsonl"
        if not path.is_file():
            raise InputError(f"{path}: no such run (see the *.jsonl files in {display(results_dir)})")
        return read_run(path)
    runs = list_runs(results_dir) if results_dir.is_dir() else []
    if not runs:
        raise InputError(f"{display(results_dir)}: no run files; run `run_benchmark.py run --agent ...` first")
    primary = [r for r in runs if not is_forced_activation(r) and not is_smoke(r)]
    return (primary or runs)[-1]


def cmd_report(args: SimpleNamespace, results_dir: Path) -> int:
    from memtune.bench.report import render
    from memtune.bench.results import list_runs

    run = _pick_run(results_dir, args.run)
    notes_path = run.path.with_suffix(".notes.md")
    notes = notes_path.read_text(encoding="utf-8") if notes_path.is_file() else None
    others = [r for r in list_runs(results_dir) if r.path != run.path]
    regrade, helper_tasks = _regrader(default_evals() if args.evals is None else args.evals.resolve())
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
                f"{prog}: {display(output)} is stale: regenerate with "
                f"python3 scripts/run_benchmark.py report --run {run.run_id}\n"
            )
            return EXIT_FINDINGS
        print(f"{display(output)} matches {display(run.path)}")
        return EXIT_OK
    with writing(output):
        output.write_text(text, encoding="utf-8")
    print(f"wrote {display(output)} from {display(run.path)}")
    return EXIT_OK


def _regrader(evals: Path) -> tuple[Regrader, list[str]]:
    """A function grading a stored record again with the current dataset (None for an answer
    to a task that changed since), and the ids of the helper-number tasks."""
    from memtune.bench.grading import grade_answer

    dataset = load_dataset_file(evals)
    rules, _sha = security_rules(evals)
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
    dataset = load_dataset_file(evals)
    rules, rules_sha = security_rules(evals)
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
        f"regraded {len(new_results)} results in {display(run.path)} against {display(evals)} ({dataset.sha256[:12]})"
    )
    return EXIT_OK


def cmd_grade(args: SimpleNamespace, evals: Path) -> int:
    from memtune.bench.grading import grade_answer

    dataset = load_dataset_file(evals)
    case = dataset.by_id().get(args.task)
    if case is None:
        raise InputError(f"--task {args.task!r}: no such task in {display(evals)} (see its ids)")
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

    dataset = load_dataset_file(evals)
    root = (args.skill_dir or paths.SKILL_ROOT).resolve()
    skill = load_skill(root)
    text = (root / "SKILL.md").read_text(encoding="utf-8")
    result = calibrate(dataset, text, skill.sha256, root)
    doc = result.to_json()
    doc["dataset"] = display(evals)
    if args.write:
        out = results_dir / CALIBRATION_FILE
        with writing(out):
            out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.as_json:
        from memtune.cli import print_json

        print_json(doc)
    else:
        print(
            f"{display(evals)}: {len(result.positives)} positives, {len(result.negatives)} negatives; "
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
            print(f"wrote {display(results_dir / CALIBRATION_FILE)}")
    return EXIT_OK if doc["ok"] else EXIT_FINDINGS
