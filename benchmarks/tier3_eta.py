#!/usr/bin/env python3
"""Time per Tier-3 attempt in a run file, and what a full run would take at that pace.

Reads one raw results file (evals/results/<run>.jsonl, or a smoke run kept elsewhere) and
prints, per condition, the wall time of each attempt, its turns, commands, tokens and
activation; then projects the full dataset (every case x 2 conditions x --attempts) from
the mean time per attempt. The first with-skill attempt of a process also reads the
SKILL.md body into the prefix cache, so the projection is shown with and without it.
Prints the figures; asserts nothing.

usage: python3 benchmarks/tier3_eta.py RUN.jsonl [--attempts 3] [--cases 32]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


@click.command(help=(__doc__ or "").splitlines()[0])
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--attempts", type=click.IntRange(min=1), default=3, help="attempts per case and condition in the full run"
)
@click.option("--cases", type=click.IntRange(min=1), default=32, help="cases in the full dataset (default 32)")
def command(**params: Any) -> int:
    args = SimpleNamespace(**params)
    try:
        lines = [json.loads(x) for x in args.run.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"tier3_eta.py: {args.run}: cannot read a run file ({exc})\n")
        return 2
    results = [r for r in lines[1:] if r.get("type") == "result"]
    if not lines or lines[0].get("type") != "run" or not results:
        sys.stderr.write(f"tier3_eta.py: {args.run}: no run header or no finished attempts\n")
        return 2
    header = lines[0]
    print(f"run {header.get('run_id')}: agent {header.get('agent')} [{header.get('model')}], {len(results)} attempts")
    print(
        f"{'case':28} {'condition':14} {'s':>7} {'turns':>5} {'cmds':>4} {'exit codes':12} {'tok in/out':>13} activated"
    )
    for r in sorted(results, key=lambda r: r.get("finished_at", "")):
        extra = r.get("extra") or {}
        codes = ",".join(
            "-" if c.get("exit_code") is None else str(c["exit_code"]) for c in extra.get("tool_calls", [])
        )
        print(
            f"{r['case_id'][:28]:28} {r['condition']:14} {r['seconds']:7.1f} {extra.get('turns', '-'):>5} "
            f"{len(r.get('commands', [])):>4} {codes or '-':12} {r.get('tokens_in')}/{r.get('tokens_out'):<6} "
            f"{r.get('activated_skill') or '-'}"
        )
    seconds = [float(r["seconds"]) for r in results]
    first = min(results, key=lambda r: r.get("finished_at", ""))
    rest = [float(r["seconds"]) for r in results if r is not first] or seconds
    total = args.cases * 2 * args.attempts
    for cond in ("without_skill", "with_skill"):
        vals = [float(r["seconds"]) for r in results if r["condition"] == cond]
        if vals:
            print(
                f"{cond}: mean {statistics.mean(vals):.1f} s, median {statistics.median(vals):.1f} s, "
                f"max {max(vals):.1f} s over {len(vals)} attempts"
            )
    print(f"full run = {args.cases} cases x 2 conditions x {args.attempts} attempts = {total} attempts")
    print(
        f"ETA at the mean of all attempts ({statistics.mean(seconds):.1f} s): {clock(statistics.mean(seconds) * total)}"
    )
    print(
        f"ETA at the mean without the first attempt ({statistics.mean(rest):.1f} s; it fills the prefix cache): "
        f"{clock(statistics.mean(rest) * total + seconds[results.index(first)])}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run :data:`command`; a usage error is one line and exit 2."""
    try:
        return int(command.main(args=argv, prog_name="tier3_eta.py", standalone_mode=False) or 0)
    except click.UsageError as exc:
        sys.stderr.write(f"tier3_eta.py: error: {' '.join(exc.format_message().split())} (see --help)\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
