#!/usr/bin/env python3
"""How long does a helper take to start, next to ``python -c 'import click'``?

An agent calls the helpers many times per question, so start-up is most of what it waits
for on small inputs. This times whole processes (``subprocess.run`` wall clock, interpreter
start-up, the entry point's bootstrap and every import included), each case --repeat times
in interleaved rounds (every case once per round, in a shuffled order), so that the load of
a shared machine falls on all cases alike, and prints the median and best per case:

* the baseline ``python -c 'import click'`` (every helper parses its command line with click);
* ``--help`` of every helper in scripts/ (bar: median <= 2x the baseline's median);
* each agent-facing helper on a small input (bar: median < 0.25 s): ``estimate_memory.py
  --example``, ``plan_memory.py --example``, ``diagnose.py`` on one real 1.5 KB error text,
  ``check_env.py`` on one launch script, ``regather_config.py`` on a preset.

The bars are printed next to the figures (PASS / FAIL), with the load average before and
after; the exit status is 0 either way (a benchmark reports, tests decide).
``--python`` picks the interpreter (default: this one); ``--before DIR`` times another
checkout's helpers (a clone of an older commit) in the same interleaved rounds.

    python3 benchmarks/startup_speed.py
    python3 benchmarks/startup_speed.py --repeat 15 --json
    git clone -q --branch main . /tmp/before && python3 benchmarks/startup_speed.py --before /tmp/before
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
ERROR_TEXT = DATA / "oom-samples" / "104_ms_swift_issue9191_megatron_rank97_pytorch_alloc_conf_hint.txt"
LAUNCH_SCRIPT = DATA / "check_env" / "mt001_no_expandable.sh"

HELP_RATIO_BAR = 2.0
SMALL_INPUT_BAR_S = 0.25


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    kind: str  # "baseline", "help" or "small"


def cases(python: str, tree: Path = REPO, label: str = "") -> list[Case]:
    """The cases for the helpers of checkout ``tree`` (inputs always from this checkout)."""
    scripts = tree / "scripts"
    found = [] if label else [Case("import click", (python, "-c", "import click"), "baseline")]
    for script in sorted(scripts.glob("*.py")):
        found.append(Case(f"{label}{script.name} --help", (python, str(script), "--help"), "help"))
    small = [
        ("estimate_memory.py --example", ("estimate_memory.py", "--example")),
        ("plan_memory.py --example", ("plan_memory.py", "--example")),
        ("diagnose.py ERROR_TEXT (1.5 KB)", ("diagnose.py", str(ERROR_TEXT))),
        ("check_env.py --script one.sh", ("check_env.py", "--script", str(LAUNCH_SCRIPT))),
        ("regather_config.py --preset", ("regather_config.py", "--preset", "qwen3-8b", "--tp", "2")),
    ]
    for name, (script, *args) in small:
        found.append(Case(f"{label}{name}", (python, str(scripts / script), *args), "small"))
    return found


def run_once(case: Case) -> float:
    start = time.perf_counter()
    result = subprocess.run(case.argv, capture_output=True, cwd=REPO, timeout=120)
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):  # 1: findings (check_env) - still a complete run
        raise SystemExit(f"{case.name}: exit {result.returncode}: {result.stderr.decode(errors='replace')[-400:]}")
    return elapsed


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option("--repeat", default=9, show_default=True, type=click.IntRange(1, 100), help="runs per case")
@click.option("--python", "python", default=sys.executable, show_default="this interpreter", help="interpreter")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document instead of the table")
@click.option("--seed", default=0, show_default=True, help="shuffle seed for the order within a round")
@click.option(
    "--before",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="another checkout (e.g. a clone of main) whose helpers are timed in the same rounds, as 'before:'",
)
def main(repeat: int, python: str, as_json: bool, seed: int, before: Path | None) -> None:
    todo = cases(python)
    if before is not None:
        todo += cases(python, before.resolve(), "before: ")
    for case in todo:  # one untimed warm-up each: page cache, installer-compiled bytecode read once
        run_once(case)
    times: dict[str, list[float]] = {c.name: [] for c in todo}
    rng = random.Random(seed)
    load_before = os.getloadavg()
    for _ in range(repeat):
        order = list(todo)
        rng.shuffle(order)
        for case in order:
            times[case.name].append(run_once(case))
    load_after = os.getloadavg()
    base = statistics.median(times["import click"])
    rows = []
    for case in todo:
        median = statistics.median(times[case.name])
        row = {"case": case.name, "kind": case.kind, "median_s": median, "best_s": min(times[case.name])}
        if case.kind == "help":
            row["ratio"] = median / base
            row["pass"] = median / base <= HELP_RATIO_BAR
        elif case.kind == "small":
            row["ratio"] = median / base
            row["pass"] = median < SMALL_INPUT_BAR_S
        rows.append(row)
    if as_json:
        print(json.dumps({"repeat": repeat, "load": [load_before, load_after], "rows": rows}, indent=2))
        return
    print(f"python: {python}; {repeat} interleaved rounds; load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print(f"bars: --help median <= {HELP_RATIO_BAR:g}x import click; small input median < {SMALL_INPUT_BAR_S:g} s")
    print(f"{'case':44} {'median s':>9} {'best s':>8} {'x click':>8}  bar")
    for row in rows:
        ratio = f"{row['ratio']:.2f}" if "ratio" in row else "1.00"
        verdict = "" if "pass" not in row else ("PASS" if row["pass"] else "FAIL")
        print(f"{row['case']:44} {row['median_s']:9.3f} {row['best_s']:8.3f} {ratio:>8}  {verdict}")


if __name__ == "__main__":
    main()
