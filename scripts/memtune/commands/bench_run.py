"""run_benchmark.py run: sample every case with and without the skill into a resumable run file.

Kept apart from the command group so the group module stays small; imported when `run` runs."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from memtune.commands.bench_inputs import (
    HARNESS_VERSION,
    display,
    harness_file,
    load_dataset_file,
    now_utc,
    security_rules,
    slug,
)
from memtune.errors import EXIT_OK, InputError
from memtune.files import paths

if TYPE_CHECKING:
    from memtune.bench.results import RunFile


def reproduce_command(args: SimpleNamespace, run_id: str) -> str:
    parts = [
        "python3 scripts/run_benchmark.py run",
        f"--agent {quote(args.agent)}",
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
        parts.append(f"--judge {quote(args.judge)}")
    if args.baseline_from:
        parts.append(f"--baseline-from {args.baseline_from}")
    parts.append(f"--run-id {run_id}")
    return " ".join(parts)


def quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def cmd_run(args: SimpleNamespace, evals: Path, results_dir: Path) -> int:
    from memtune.bench.agents import AgentUnavailable, make_agent
    from memtune.bench.baseline import baseline_records
    from memtune.bench.dataset import Dataset, read_json
    from memtune.bench.results import RunWriter, read_run, result_key, same_tasks
    from memtune.bench.runner import Progress, Runner, plan_jobs
    from memtune.bench.skill import load_skill, skill_files_sha256

    dataset = load_dataset_file(evals)
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        known = dataset.by_id()
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise InputError(f"--cases: unknown case id(s) {', '.join(unknown)} (see {display(evals)})")
        dataset = Dataset(dataset.path, dataset.sha256, tuple(known[c] for c in wanted))
    skill = load_skill((args.skill_dir or paths.SKILL_ROOT).resolve())
    rules, rules_sha = security_rules(evals)
    catalog = read_json(harness_file(evals, "skill_catalog.json"), "skill catalog").get("skills", [])
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

    run_id = args.run_id or f"{slug(args.agent)}-a{args.attempts}-{dataset.sha256[:8]}"
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
        "started_at": now_utc(),
        "smoke": bool(args.cases),
        "command": reproduce_command(args, run_id),
        "dataset": {
            "path": display(evals),
            "sha256": dataset.sha256,
            "tasks_sha256": dataset.tasks_sha256,
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
        "skill": {"name": skill.name, "sha256": skill.sha256, "files_sha256": skill_files_sha256(skill.root)},
        "security_rules_sha256": rules_sha,
    }
    if args.baseline_from:
        header["baseline_from"] = args.baseline_from
    baseline = baseline_source(args, results_dir, run_id, header)
    if path.exists() and args.fresh:
        path.unlink()
    if path.exists():
        existing = read_run(path)
        h = existing.header
        # a run recorded before skill_files_sha256 existed carries none: SKILL.md alone guards it
        recorded_files = h["skill"].get("files_sha256")
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
                # what the agent sees of the tasks (results.same_tasks)
                ("tasks (questions, files)", True, same_tasks(h, header)),
                ("SKILL.md sha256", h["skill"]["sha256"], skill.sha256),
                ("helpers and references", recorded_files, header["skill"]["files_sha256"] if recorded_files else None),
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
        f"with agent {args.agent} [{agent.model}]; raw results: {display(path)}\n"
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
    summary = {"run_id": run_id, "results": display(path), "ran": len(jobs), "total": total, "agent_errors": errors}
    if args.as_json:
        from memtune.cli import print_json

        print_json(summary)
    else:
        print(
            f"{run_id}: {total} of {total} tasks recorded in {display(path)} ({errors} agent errors this session); "
            f"write the report with: python3 scripts/run_benchmark.py report --run {run_id}"
        )
    return EXIT_OK


def baseline_source(
    args: SimpleNamespace, results_dir: Path, run_id: str, header: Mapping[str, object]
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
            f"--baseline-from {args.baseline_from}: no such run (see the *.jsonl files in {display(results_dir)})"
        )
    source = read_run(path)
    differs = baseline_mismatch(source.header, header)
    if differs:
        raise InputError(
            f"--baseline-from {args.baseline_from}: its without-skill attempts are another condition "
            f"(differs in {', '.join(differs)}); run without --baseline-from"
        )
    return source
