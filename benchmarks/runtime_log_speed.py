#!/usr/bin/env python3
"""How fast does runtime_memory.py read a huge multi-rank log, and in how much memory?

Generates a synthetic Megatron-LM training log of --size-gib (default 1 GiB) in a temporary
directory: a 64-GPU run (TP4 PP4 DP4) started with Slurm, whose 16 data-parallel-rank-0 ranks
print a report_memory line every iteration (``--log-memory-interval 1``) after the iteration
line of the last rank, with NCCL INFO noise, one rank leaking 0.25 MiB per iteration, and a
memory_summary table near the end. Then, in the same run, alternating so the page cache and
the machine's load treat both alike, --repeat times each:

* ``grep -c -F 'memory (MB)' LOG``: counting the same lines (the floor for touching every byte);
* ``python3 scripts/runtime_memory.py LOG --json``

and prints best and median wall time, CPU time and peak RSS (os.wait4) side by side, the
ratio, the load average, and whether the answer was right (the leaking rank and only it
called a leak; every rank's peak exact; the summary table read). Targets: runtime_memory
within 3x grep's wall time and under 200 MB peak RSS. The temporary directory is removed.

    python3 benchmarks/runtime_log_speed.py
    python3 benchmarks/runtime_log_speed.py --size-gib 0.25 --repeat 5
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

REPO = Path(__file__).resolve().parent.parent
RANKS = [pp * 16 + tp for pp in range(4) for tp in range(4)]  # DP rank 0 of every (PP, TP) pair
LEAK_RANK = 35
LEAK_MIB_PER_ITERATION = 0.25
SUMMARY = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 5                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 0            |        cudaMalloc retries: 3         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  39779 MiB |  47691 MiB |   5590 GiB |   5551 GiB |
|       from large pool |  39776 MiB |  47688 MiB |   5589 GiB |   5550 GiB |
|       from small pool |      2 MiB |      3 MiB |      1 GiB |      1 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  58470 MiB |  58470 MiB | 344942 MiB | 286472 MiB |
|       from large pool |  58456 MiB |  58456 MiB | 344878 MiB | 286422 MiB |
|       from small pool |     14 MiB |     14 MiB |     64 MiB |     50 MiB |
|===========================================================================|
"""


def base_allocated(rank: int) -> float:
    return 30000.0 + 250.0 * (rank // 16) + 3.0 * (rank % 16)


def allocated(rank: int, it: int) -> float:
    warm = 0.0 if it >= 2 else -6000.0  # Adam states appear in the first step
    leak = LEAK_MIB_PER_ITERATION * it if rank == LEAK_RANK else 0.0
    return base_allocated(rank) + warm + leak


def max_allocated(rank: int, it: int) -> float:
    return allocated(rank, it) + 14000.0


def reserved(rank: int, it: int) -> float:
    return max_allocated(rank, it) + 2048.0


def write_log(path: Path, size: int) -> int:
    """Write iterations until ``size`` bytes; return the last iteration."""
    written = 0
    it = 0
    with path.open("w", buffering=1 << 22) as out:
        out.write(
            "using world size: 64, data-parallel size: 4, tensor-model-parallel size: 4, pipeline-model-parallel size: 4\n"
        )
        while written < size - 16384:
            it += 1
            block = [
                f"63:  [2026-12-04 10:{(it // 60) % 60:02d}:{it % 60:02d}] iteration {it:8d}/ 5000000 | consumed samples: "
                f"{it * 512:12d} | elapsed time per iteration (ms): 1234.5 | learning rate: 3.000000E-04 | global batch size:   512 | "
                f"lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.345 | number of skipped iterations:   0 | "
                "number of nan iterations:   0 |\n"
            ]
            for rank in RANKS:
                a, m, r = allocated(rank, it), max_allocated(rank, it), reserved(rank, it)
                block.append(
                    f"{rank}: [Rank {rank}] (after {it} iterations) memory (MB) | allocated: {a:.2f} | "
                    f"max allocated: {m:.2f} | reserved: {r:.2f} | max reserved: {r:.2f}\n"
                )
            if it % 97 == 0:
                block.append(
                    f"{it % 64}: node{it % 8}:12345:12399 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/IPC\n"
                )
            text = "".join(block)
            out.write(text)
            written += len(text)
        out.write("".join(f"5: {line}\n" for line in SUMMARY.splitlines()))
    return it


def measure(cmd: list[str]) -> tuple[float, float, int, bytes]:
    """(wall seconds, CPU seconds, peak RSS bytes, stdout) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = b"", b""
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({code}): {err.decode(errors='replace')[:500]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out


def check_answer(doc: dict, last: int) -> list[str]:
    problems = []
    leaks = sorted(v["rank"] for v in doc["verdicts"] if v["kind"] == "leak")
    if leaks != [LEAK_RANK]:
        problems.append(f"leak verdicts on {leaks}, expected [{LEAK_RANK}]")
    ranks = {r["rank"]: r for r in doc["ranks"]}
    for rank in RANKS:
        got = ranks.get(rank)
        want = round(max_allocated(rank, last) * 2**20)
        if got is None or abs(got["peak_allocated_bytes"] - want) > 2**20 // 100:
            problems.append(f"rank {rank}: peak {got and got['peak_allocated_bytes']} != {want}")
    if ranks.get(5, {}).get("alloc_retries") != 3:
        problems.append("the memory_summary table at the end was not read (rank 5, 3 retries)")
    return problems


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option("--size-gib", type=float, default=1.0, show_default=True, help="size of the generated log")
@click.option("--repeat", type=int, default=3, show_default=True, help="runs of each command")
def main(size_gib: float, repeat: int) -> None:
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found")
    tmp = Path(tempfile.mkdtemp(prefix="runtime-log-speed-"))
    try:
        log = tmp / "train.log"
        t0 = time.perf_counter()
        last = write_log(log, int(size_gib * 2**30))
        size = log.stat().st_size
        memory_lines = last * len(RANKS)
        print(
            f"log: {size / 2**30:.2f} GiB, {last} iterations x {len(RANKS)} ranks = {memory_lines:,} report_memory lines "
            f"(written in {time.perf_counter() - t0:.0f} s)"
        )
        commands = {
            "grep -c": [grep, "-c", "-F", "memory (MB)", str(log)],
            "runtime_memory.py": [sys.executable, str(REPO / "scripts" / "runtime_memory.py"), str(log), "--json"],
        }
        results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
        problems: list[str] = []
        for _ in range(repeat):
            for name, cmd in commands.items():
                wall, cpu, rss, out = measure(cmd)
                results[name].append((wall, cpu, rss))
                if name == "grep -c" and int(out.strip() or 0) != memory_lines:
                    problems.append(f"grep counted {out.strip().decode()} lines, expected {memory_lines}")
                if name == "runtime_memory.py":
                    problems.extend(check_answer(json.loads(out), last))
        print(
            f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; {repeat} runs each"
        )
        print(f"{'command':<20} {'best wall s':>12} {'median wall s':>14} {'median CPU s':>13} {'peak RSS MB':>12}")
        for name, rows in results.items():
            walls = [r[0] for r in rows]
            print(
                f"{name:<20} {min(walls):>12.2f} {statistics.median(walls):>14.2f} "
                f"{statistics.median(r[1] for r in rows):>13.2f} {max(r[2] for r in rows) / 1e6:>12.1f}"
            )
        ratio_best = min(r[0] for r in results["runtime_memory.py"]) / min(r[0] for r in results["grep -c"])
        ratio_median = statistics.median(r[0] for r in results["runtime_memory.py"]) / statistics.median(
            r[0] for r in results["grep -c"]
        )
        rss = max(r[2] for r in results["runtime_memory.py"]) / 1e6
        print(f"runtime_memory / grep -c wall time: {ratio_best:.2f}x best, {ratio_median:.2f}x median (target <= 3x)")
        print(f"runtime_memory peak RSS: {rss:.1f} MB (target < 200 MB)")
        verdict = f"right (leak on rank {LEAK_RANK} only, every peak exact, summary read)"
        print("answer: " + (verdict if not problems else "; ".join(sorted(set(problems)))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
