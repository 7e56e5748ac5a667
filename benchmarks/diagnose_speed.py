#!/usr/bin/env python3
"""How fast is diagnose.py on huge multi-rank logs, and how much memory does it take?

Generates two training logs of --size-gib each (default 1 GiB) in a temporary directory,
one after the other (only one is on disk at a time), or measures the logs given with --log:

* ordinary: 64 ranks interleaving the real lines of
  tests/data/training-log-lines/megatron_ordinary_lines.txt (Megatron iteration and loss
  lines, ``memory (MB) | allocated: ...`` reports, timers, NCCL INFO, DDP and
  ProcessGroupNCCL warnings, each verbatim from a public log) under the rank labels
  launchers add, every rank's start-up warnings once at the top, and a few failures
  buried at random depths (a wrapped fragmentation OOM on one rank, a capacity OOM, NCCL
  OOM warnings, a Megatron config error): a dozen lines in millions hold a trigger;
* dense: the same plus one trigger line in 40 (2.5%): NCCL echoing NCCL_GRAPH_REGISTER
  from its environment, every rank printing its allocator setting, "divisible" prose,
  and a retry loop in which one rank hits the same wrapped OOM again and again (each
  opens a 24-line window) next to repeated NCCL OOM warnings.

On each it times, in the same run, paired and alternated --repeat times so the page cache
and the machine's load treat both alike:

* ``LC_ALL=C grep -c -E PATTERN LOG`` with its output in a file, PATTERN being exactly
  the trigger list diagnose.py's prefilter searches for (printed below): the fair
  multi-pattern baseline, a full read of the log;
* ``python3 scripts/diagnose.py LOG --json`` (its prefilter: GNU grep when present, else
  the pure-Python pass; ``--prefilter python`` measures the fallback);
* for reference only, the same grep with its output on /dev/null, which GNU grep
  recognises and then stops at the first matching line (see :func:`measure`).

Printed: best and median wall time, CPU time and peak RSS (GNU time %M, else os.wait4)
side by side, the median of the paired ratios (diagnose.py over grep in the same round:
robust on a loaded machine), and the load average.  Bar: median paired ratio <= 1.5 on
the ordinary log and on --log logs (issue 26), <= 2 on the trigger-dense stress log (issue
11); peak RSS under 200 MB; every buried failure found.  The temporary directory is
always removed.

    python3 benchmarks/diagnose_speed.py            # 2 x 1 GiB
    python3 benchmarks/diagnose_speed.py --size-gib 0.25 --repeat 7
    python3 benchmarks/diagnose_speed.py --log held_out.log --repeat 5
    python3 benchmarks/diagnose_speed.py --prefilter python
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from memtune.diagnose.patterns import load_patterns  # noqa: E402

RANKS = 64
BLOCK_LINES = 40_000
LINES_FILE = REPO / "tests" / "data" / "training-log-lines" / "megatron_ordinary_lines.txt"
BENIGN_MARK = "# benign trigger lines"
# How launchers label a rank's line (PyTorch's own tag, srun -l, torchrun --tee), as in the corpora.
RANK_PREFIXES = ("[rank{r}]:", "{r}: ", "[default{r}]:")
_ITERATION = re.compile(r"iteration +\d+/ *\d+")
_RANK_NO = re.compile(r"\[Rank \d+\]")


def corpus_lines() -> tuple[list[str], list[str]]:
    """(ordinary lines, benign trigger lines) of tests/data/training-log-lines, verbatim."""
    ordinary: list[str] = []
    benign: list[str] = []
    target = ordinary
    for line in LINES_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith(BENIGN_MARK):
            target = benign
        if line.strip() and not line.startswith("#"):
            target.append(line)
    return ordinary, benign


def filler_block(rng: random.Random, start_iter: int) -> bytes:
    """One block of ordinary multi-rank log lines (no failure): the real lines of
    tests/data/training-log-lines, each under a rank label, with the iteration and rank
    numbers of the run (the rest of each line verbatim)."""
    ordinary, _ = corpus_lines()
    out = []
    for i in range(BLOCK_LINES):
        r = rng.randrange(RANKS)
        it = start_iter + i // RANKS
        prefix = rng.choice(RANK_PREFIXES).format(r=r)
        line = rng.choice(ordinary)
        line = _ITERATION.sub(f"iteration {it:>8}/  500000", line)
        line = _RANK_NO.sub(f"[Rank {r}]", line)
        out.append(prefix + line)
    return ("\n".join(out) + "\n").encode()


DENSE_EVERY = 40  # the dense log: one line in 40 carries a trigger word


def dense_block(rng: random.Random, start_iter: int) -> bytes:
    """Ordinary lines where one in DENSE_EVERY carries a trigger word, most of them benign
    (NCCL echoing its environment on every communicator init, env dumps, prose with
    "divisible"), plus a retry loop: one rank hitting the same wrapped OOM again and again
    (each one opens the 24-line window of a wrapped message) and NCCL OOM warnings."""
    plain = filler_block(rng, start_iter).split(b"\n")
    out = []
    for i, line in enumerate(plain[:-1]):
        out.append(line)
        if i % DENSE_EVERY:
            continue
        r = rng.randrange(RANKS)
        pick = rng.random()
        if pick < 0.45:
            out.append(
                f"gpu{r // 8:03d}:{4000 + r}:{5000 + r} [{r % 8}] NCCL INFO NCCL_GRAPH_REGISTER set by environment to 0.".encode()
            )
        elif pick < 0.75:
            out.append(f"[rank{r}]: env: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCL_DEBUG=INFO".encode())
        elif pick < 0.97:
            out.append(f"[rank{r}]: note: global batch {512 * (1 + r % 4)} is divisible by micro batch x DP".encode())
        elif pick < 0.99:
            out.append(
                b"[rank21]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB"
            )
            out.append(
                b"[rank21]: of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory"
            )
            out.append(
                b"[rank21]: 71.53 GiB is allocated by PyTorch, and 5.84 GiB is reserved by PyTorch but unallocated."
            )
        else:
            out.append(b"gpu002:4017:5017 [1] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'")
    return b"\n".join(out) + b"\n"


def buried_failures() -> list[bytes]:
    frag = (
        "[rank37]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has a total capacity of 79.11 GiB\n"
        "[rank37]: of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory\n"
        "[rank37]: 71.53 GiB is allocated by PyTorch, and 5.84 GiB is reserved by PyTorch but unallocated. If reserved but unallocated\n"
    )
    capacity = (
        "[rank12]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 4 has a total capacity of 79.11 GiB "
        "of which 2.10 GiB is free. Including non-PyTorch memory, this process has 77.00 GiB memory in use. Of the allocated memory "
        "76.10 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    nccl = "[2026-12-02 10:15:28] gpu001:4009:5009 [1] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'\n"
    config = "3: [rank3]: ValueError: Currently there is no support for Pipeline parallelism with CPU offloading\n"
    return [s.encode() for s in (frag, capacity, nccl, nccl.replace("4009", "4010").replace("[1]", "[2]"), config)]


def generate(path: Path, size: int, seed: int = 7, dense: bool = False) -> int:
    """Write ~size bytes; returns the number of distinct failures to find."""
    rng = random.Random(seed)
    make = dense_block if dense else filler_block
    blocks = [make(rng, k * BLOCK_LINES // RANKS) for k in range(8)]
    failures = buried_failures()
    n_blocks = max(1, size // len(blocks[0]) + 1)
    # distinct blocks, so that no failure overwrites another in a small log
    where = (
        dict(zip(rng.sample(range(n_blocks), len(failures)), failures, strict=True))
        if n_blocks >= len(failures)
        else {0: b"".join(failures)}
    )
    written = 0
    _, benign = corpus_lines()
    with path.open("wb", buffering=1 << 20) as fh:
        fh.write(
            b"using world size: 64, data-parallel size: 4, context-parallel size: 1, hierarchical context-parallel "
            b"sizes: None, tensor-model-parallel size: 4, pipeline-model-parallel size: 4\n"
        )
        # every rank's start-up warnings name the stack: benign lines the prefilter passes on
        fh.write("".join(f"[default{r}]:{line}\n" for r in range(RANKS) for line in benign).encode())
        for k in range(n_blocks):
            block = blocks[k % len(blocks)]
            if k in where:
                cut = block.find(b"\n", len(block) // 2) + 1
                fh.write(block[:cut] + where[k] + block[cut:])
            else:
                fh.write(block)
            written += len(block)
    return len(failures) + (2 if dense else 0)  # the retry loop's OOM and NCCL warning fold into one each


TIME = "/usr/bin/time"


def timed(
    cmd: list[str], env: dict[str, str] | None = None, devnull: bool = False
) -> tuple[float, float, int, bytes, int]:
    """Wall seconds, CPU seconds (user+sys), peak RSS in bytes, stdout, exit code.

    Peak RSS comes from GNU time (%M) when present: it measures the command itself, not
    this Python parent that forked it.  Otherwise os.wait4's rusage of the direct child.
    Standard output goes to a file (``devnull``: to /dev/null, see :func:`measure`).
    """
    use_time = os.path.exists(TIME)
    full = [TIME, "-f", "MEMTUNE_TIME %U %S %M", *cmd] if use_time else cmd
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=subprocess.DEVNULL if devnull else out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        data = out.read()
        err.seek(0)
        errtext = err.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    rss = usage.ru_maxrss * 1024
    if use_time:
        for line in errtext.splitlines():
            if line.startswith("MEMTUNE_TIME "):
                _, user, system, kib = line.split()
                cpu, rss = float(user) + float(system), int(kib) * 1024
    return wall, cpu, rss, data, code


TOOLS = ("grep", "diagnose", "grep>null")


def measure(log: Path, pattern: str, repeat: int, env: dict[str, str]) -> dict:
    """grep -c -E and diagnose.py on one log, alternated ``repeat`` times (paired runs).

    The baseline is ``LC_ALL=C grep -c -E PATTERN LOG`` with its output in a file: the
    C locale is grep's fastest (the bar is the stricter for it), and a file makes grep read
    the whole log.  With its output on /dev/null GNU grep (2.27+) knows nobody reads it and
    stops at the first matching line, like -q: that time ("grep>null") is printed for
    reference only; on a log whose first failure sits a fifth of the way in, it is a fifth
    of a full read, which is no baseline for a tool that must find every failure.
    """
    grep_cmd = ["grep", "-c", "-E", pattern, str(log)]
    grep_env = dict(os.environ, LC_ALL="C")
    diag_cmd = [sys.executable, str(REPO / "scripts" / "diagnose.py"), str(log), "--json"]
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)  # warm the page cache
    runs: dict[str, dict[str, list]] = {k: {"wall": [], "cpu": [], "rss": []} for k in TOOLS}
    report, grep_count = None, ""

    def keep(tool: str, wall: float, cpu: float, rss: int) -> None:
        runs[tool]["wall"].append(wall)
        runs[tool]["cpu"].append(cpu)
        runs[tool]["rss"].append(rss)

    for _ in range(repeat):
        wall, cpu, rss, out, code = timed(grep_cmd, grep_env)
        keep("grep", wall, cpu, rss)
        grep_count = out.decode().strip()
        wall, cpu, rss, out, code = timed(diag_cmd, env)
        if code != 0:
            raise RuntimeError(f"diagnose.py failed with exit {code} on {log.name}")
        keep("diagnose", wall, cpu, rss)
        report = json.loads(out)
        wall, cpu, rss, _, _ = timed(grep_cmd, grep_env, devnull=True)
        keep("grep>null", wall, cpu, rss)
    assert report is not None
    return {"runs": runs, "report": report, "grep_count": grep_count, "size": log.stat().st_size}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# diagnose.py's wall time over a full grep pass with its own triggers: 1.5x on an ordinary
# training log (issue 26; also a log given with --log), 2x on the trigger-dense stress log,
# where one line in 40 must be parsed (issue 11)
RATIO_BARS = {"dense": 2.0}
RATIO_BAR = 1.5
RSS_BAR = 200e6


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option(
    "--size-gib", type=click.FloatRange(min=0, min_open=True), default=1.0, help="size of each log in GiB (default 1)"
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=5,
    help="paired runs per log; best, median and the median of the paired ratios reported (default 5)",
)
@click.option(
    "--prefilter",
    type=click.Choice(("auto", "grep", "python")),
    default="auto",
    help="diagnose.py's prefilter (MEMTUNE_PREFILTER): auto = GNU grep when present, python = the fallback",
)
@click.option(
    "--log",
    "logs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="measure this log instead of generating them (repeatable; e.g. a held-out training log); "
    "its findings are printed, not checked",
)
@click.option("--generate-only", metavar="PATH", hidden=True)
@click.option("--dense", is_flag=True, hidden=True)
def command(**params: Any) -> int:
    args = SimpleNamespace(**params)
    if args.generate_only:
        print(generate(Path(args.generate_only), int(args.size_gib * (1 << 30)), dense=args.dense))
        return 0
    if shutil.which("grep") is None:
        print("diagnose_speed: grep not found", file=sys.stderr)
        return 2

    pattern = load_patterns().grep_pattern()
    env = dict(os.environ, MEMTUNE_PREFILTER=args.prefilter)
    tmp = Path(tempfile.mkdtemp(prefix="diagnose_speed_"))
    try:
        print(f"grep pattern (diagnose.py's trigger list, {len(load_patterns().triggers)} literals): {pattern}")
        print(
            f"diagnose.py prefilter: {args.prefilter}; load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
            f"on {os.cpu_count()} CPUs"
        )
        results: dict[str, dict] = {}
        buried: dict[str, int | None] = {}
        names: list[str] = []
        for given in args.logs:
            name = Path(given).name
            names.append(name)
            buried[name] = None
            results[name] = measure(Path(given), pattern, args.repeat, env)
            print(
                f"{name}: {results[name]['size'] / (1 << 30):.2f} GiB, grep matching lines {results[name]['grep_count']}"
            )
        for name, dense in () if args.logs else (("ordinary", False), ("dense", True)):
            names.append(name)
            log = tmp / f"{name}.log"
            t0 = time.perf_counter()
            # Generate in a child process: this parent then stays small, so nothing it holds can
            # be mistaken for the measured commands' memory.
            gen = subprocess.run(
                [sys.executable, __file__, "--generate-only", str(log), "--size-gib", str(args.size_gib)]
                + (["--dense"] if dense else []),
                capture_output=True,
                text=True,
                check=True,
            )
            buried[name] = int(gen.stdout.strip())
            results[name] = measure(log, pattern, args.repeat, env)
            print(
                f"{name} log: {results[name]['size'] / (1 << 30):.2f} GiB, {buried[name]} distinct failures, "
                f"grep matching lines {results[name]['grep_count']}, generated in {time.perf_counter() - t0:.1f} s (incl. runs)"
            )
            log.unlink()
        print()
        width = 24
        print(f"{'':34}" + "".join(f"{n[:width]:>{width}}" for n in names))
        labels = {"grep": "grep -c -E (full read)", "diagnose": "diagnose.py", "grep>null": "grep -c -E >/dev/null"}
        for tool in TOOLS:
            metrics = ("best wall s", "median wall s", "best CPU s", "peak RSS MB")
            for metric in metrics if tool != "grep>null" else ("median wall s",):
                cells = []
                for name in names:
                    r = results[name]["runs"][tool]
                    value = {
                        "best wall s": min(r["wall"]),
                        "median wall s": _median(r["wall"]),
                        "best CPU s": min(r["cpu"]),
                        "peak RSS MB": max(r["rss"]) / 1e6,
                    }[metric]
                    cells.append(f"{value:{width}.2f}")
                print(f"{labels[tool] + ' ' + metric:34}" + "".join(cells))
        ok = True
        rows: dict[str, list[str]] = {k: [] for k in ("paired", "best", "rss", "found")}
        for name in names:
            g, d = results[name]["runs"]["grep"], results[name]["runs"]["diagnose"]
            paired = _median([dw / gw for dw, gw in zip(d["wall"], g["wall"], strict=True)])
            best = min(d["wall"]) / min(g["wall"])
            rss = max(d["rss"])
            found = len(results[name]["report"]["findings"])
            found_ok = buried[name] is None or found == buried[name]
            bar = RATIO_BARS.get(name, RATIO_BAR) if not args.logs else RATIO_BAR
            ok = ok and paired <= bar and rss < RSS_BAR and found_ok
            rows["paired"].append(f"{paired:{width - 11}.2f}x <={bar:.1f} {'PASS' if paired <= bar else 'FAIL'}")
            rows["best"].append(f"{best:{width - 1}.2f}x")
            rows["rss"].append(f"{rss / 1e6:{width - 5}.1f} {'PASS' if rss < RSS_BAR else 'FAIL'}")
            want = "?" if buried[name] is None else str(buried[name])
            rows["found"].append(f"{found:>{width - 9}}/{want:<3} {'PASS' if found_ok else 'FAIL'}")
        print(f"{'median paired ratio':34}" + " ".join(rows["paired"]))
        print(f"{'ratio of best walls':34}" + "".join(rows["best"]))
        print(f"{'diagnose peak RSS MB (< 200)':34}" + " ".join(rows["rss"]))
        print(f"{'failures found':34}" + " ".join(rows["found"]))
        for name in names:
            kinds = [f"{f['kind']}@{f['source']}:{f['line']}" for f in results[name]["report"]["findings"]]
            print(f"{name} findings: {', '.join(kinds) or 'none'}")
        print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run :data:`command` under the helpers' runner: one-line usage errors, exit 2."""
    from memtune.cli import invoke

    return invoke(command, "diagnose_speed.py", argv)


if __name__ == "__main__":
    from memtune.cli import run

    run(main, "diagnose_speed.py")
