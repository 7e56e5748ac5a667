#!/usr/bin/env python3
"""How fast is diagnose.py on huge multi-rank logs, and how much memory does it take?

Generates two synthetic training logs of --size-gib each (default 1 GiB) in a temporary
directory, one after the other (only one is on disk at a time):

* sparse: 64 ranks interleaving iteration/throughput/NCCL-INFO lines, rare benign lines
  that mention trigger words (an env dump with expandable_segments, "divisible" in
  prose), and a few real failures buried at random depths (a wrapped fragmentation OOM
  on one rank, a capacity OOM, NCCL OOM warnings, a Megatron config error): what most
  real logs look like (~0.03% of lines hold a trigger);
* dense: the same plus one trigger line in 40 (2.5%): NCCL echoing NCCL_GRAPH_REGISTER
  from its environment, every rank printing its allocator setting, "divisible" prose,
  and a retry loop in which one rank hits the same wrapped OOM again and again (each
  opens a 24-line window) next to repeated NCCL OOM warnings.

On each it times, in the same run:

* ``grep -c -E PATTERN`` where PATTERN is exactly the trigger list diagnose.py's
  prefilter searches for (printed below): the fair multi-pattern baseline;
* ``python3 scripts/diagnose.py LOG --json`` (its prefilter: GNU grep -F when present,
  else the pure-Python pass; ``--prefilter python`` measures the fallback),

each --repeat times, runs alternated so the page cache and the machine's load treat both
alike; best and median wall time, CPU time and the peak RSS (GNU time %M, else
os.wait4) are printed side by side for both logs, with the load average, because on a
shared machine one run means little.  Targets: diagnose.py within 2x grep's wall time
and peak RSS under 200 MB on both logs, every failure found.  The temporary directory
is always removed.

    python3 benchmarks/diagnose_speed.py            # 2 x 1 GiB
    python3 benchmarks/diagnose_speed.py --size-gib 0.25 --repeat 5
    python3 benchmarks/diagnose_speed.py --prefilter python
"""

from __future__ import annotations

import json
import os
import random
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


def filler_block(rng: random.Random, start_iter: int) -> bytes:
    """One block of ordinary multi-rank log lines (no failure)."""
    out = []
    for i in range(BLOCK_LINES):
        r = rng.randrange(RANKS)
        it = start_iter + i // RANKS
        pick = rng.random()
        if pick < 0.55:
            out.append(
                f"[2026-12-02 10:{it % 60:02d}:{i % 60:02d}] [rank{r}]:  iteration {it:>8}/ 500000 | consumed samples: "
                f"{it * 512:>12} | elapsed time per iteration (ms): {1500 + rng.random() * 90:.1f} | learning rate: "
                f"{3e-4 * rng.random():.6E} | global batch size:   512 | lm loss: {2 + rng.random():.6E} | grad norm: {rng.random():.3f} |"
            )
        elif pick < 0.8:
            out.append(
                f"gpu{r // 8:03d}:{4000 + r}:{5000 + r} [{r % 8}] NCCL INFO Channel {rng.randrange(32):02d}/0 : {r} -> {(r + 1) % RANKS} "
                f"[send] via NET/IB/{r % 8}/GDRDMA comm 0x{rng.getrandbits(40):x} nRanks {RANKS}"
            )
        elif pick < 0.95:
            out.append(
                f"[rank{r}]: [after training is done] throughput per GPU (TFLOP/s/GPU): {700 + rng.random() * 10:.1f} "
                f"| mem-allocated-bytes: {rng.randrange(50, 70) * 2**30} | mem-max-allocated-bytes: {rng.randrange(60, 75) * 2**30}"
            )
        elif pick < 0.9995:
            out.append(
                f"[rank{r}]: WARNING: data loader worker {rng.randrange(8)} slow, waited {rng.random() * 3:.2f}s"
            )
        else:
            # Benign lines that contain trigger words: the prefilter must pass them to the
            # parser, which must not report them.
            out.append(
                rng.choice(
                    [
                        f"[rank{r}]: env: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCL_DEBUG=INFO",
                        f"[rank{r}]: note: global batch is divisible by micro batch x DP",
                        f"[rank{r}]: using interleaved schedule with 5 virtual stages",
                    ]
                )
            )
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
    with path.open("wb", buffering=1 << 20) as fh:
        fh.write(
            b"using world size: 64, data-parallel size: 4, context-parallel size: 1, hierarchical context-parallel "
            b"sizes: None, tensor-model-parallel size: 4, pipeline-model-parallel size: 4\n"
        )
        for k in range(n_blocks):
            block = blocks[k % len(blocks)]
            if k in where:
                cut = block.find(b"\n", len(block) // 2) + 1
                fh.write(block[:cut] + where[k] + block[cut:])
            else:
                fh.write(block)
            written += len(block)
    return len(where) + (2 if dense else 0)  # the retry loop's OOM and NCCL warning fold into one each


TIME = "/usr/bin/time"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, bytes, int]:
    """Wall seconds, CPU seconds (user+sys), peak RSS in bytes, stdout, exit code.

    Peak RSS comes from GNU time (%M) when present: it measures the command itself, not
    this Python parent that forked it.  Otherwise os.wait4's rusage of the direct child.
    """
    use_time = os.path.exists(TIME)
    full = [TIME, "-f", "MEMTUNE_TIME %U %S %M", *cmd] if use_time else cmd
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=out, stderr=err, env=env)
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


def measure(log: Path, pattern: str, repeat: int, env: dict[str, str]) -> dict:
    """grep -c -E and diagnose.py on one log, alternated ``repeat`` times."""
    grep_cmd = ["grep", "-c", "-E", pattern, str(log)]
    diag_cmd = [sys.executable, str(REPO / "scripts" / "diagnose.py"), str(log), "--json"]
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)  # warm the page cache
    runs: dict[str, dict[str, list]] = {k: {"wall": [], "cpu": [], "rss": []} for k in ("grep", "diagnose")}
    report, grep_count = None, ""
    for _ in range(repeat):
        wall, cpu, rss, out, code = timed(grep_cmd)
        runs["grep"]["wall"].append(wall), runs["grep"]["cpu"].append(cpu), runs["grep"]["rss"].append(rss)
        grep_count = out.decode().strip()
        wall, cpu, rss, out, code = timed(diag_cmd, env)
        if code != 0:
            raise RuntimeError(f"diagnose.py failed with exit {code} on {log.name}")
        runs["diagnose"]["wall"].append(wall), runs["diagnose"]["cpu"].append(cpu), runs["diagnose"]["rss"].append(rss)
        report = json.loads(out)
    assert report is not None
    return {"runs": runs, "report": report, "grep_count": grep_count, "size": log.stat().st_size}


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option(
    "--size-gib", type=click.FloatRange(min=0, min_open=True), default=1.0, help="size of each log in GiB (default 1)"
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=3,
    help="runs per tool and log; best and median reported (default 3)",
)
@click.option(
    "--prefilter",
    type=click.Choice(("auto", "grep", "python")),
    default="auto",
    help="diagnose.py's prefilter (MEMTUNE_PREFILTER): auto = GNU grep when present, python = the fallback",
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
        print(f"grep pattern (diagnose.py's trigger list): {pattern}")
        print(
            f"diagnose.py prefilter: {args.prefilter}; load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
            f"on {os.cpu_count()} CPUs"
        )
        results, buried = {}, {}
        for name, dense in (("sparse", False), ("dense", True)):
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
        print(f"{'':30} {'sparse':>22} {'dense':>22}")
        ok = True
        rows = []
        for tool in ("grep", "diagnose"):
            label = "grep -c -E" if tool == "grep" else "diagnose.py"
            for metric in ("best wall s", "median wall s", "GiB/s (best)", "best CPU s", "peak RSS MB"):
                cells = []
                for name in ("sparse", "dense"):
                    r = results[name]["runs"][tool]
                    walls = sorted(r["wall"])
                    value = {
                        "best wall s": walls[0],
                        "median wall s": walls[len(walls) // 2],
                        "GiB/s (best)": results[name]["size"] / (1 << 30) / walls[0],
                        "best CPU s": min(r["cpu"]),
                        "peak RSS MB": max(r["rss"]) / 1e6,
                    }[metric]
                    cells.append(f"{value:22.2f}")
                rows.append(f"{label + ' ' + metric:30} {' '.join(cells)}")
        print("\n".join(rows))
        cells_ratio, cells_med, cells_rss, cells_found = [], [], [], []
        for name in ("sparse", "dense"):
            g, d = results[name]["runs"]["grep"], results[name]["runs"]["diagnose"]
            ratio = min(d["wall"]) / min(g["wall"])
            med = sorted(d["wall"])[len(d["wall"]) // 2] / sorted(g["wall"])[len(g["wall"]) // 2]
            rss = max(d["rss"]) / 1e6
            kinds = [f"{f['kind']}@{f['source']}" for f in results[name]["report"]["findings"]]
            found = len(kinds) == buried[name]
            ok = ok and ratio <= 2.0 and rss < 200 and found
            cells_ratio.append(f"{ratio:17.2f}x {'PASS' if ratio <= 2.0 else 'FAIL'}")
            cells_med.append(f"{med:22.2f}x")
            cells_rss.append(f"{rss:17.1f} {'PASS' if rss < 200 else 'FAIL'}")
            cells_found.append(f"{len(kinds):>13}/{buried[name]:<3} {'PASS' if found else 'FAIL'}")
        print(f"{'ratio best wall (<= 2x)':30} {' '.join(cells_ratio)}")
        print(f"{'ratio median wall':30} {''.join(cells_med)}")
        print(f"{'diagnose peak RSS (< 200 MB)':30} {' '.join(cells_rss)}")
        print(f"{'failures found':30} {' '.join(cells_found)}")
        for name in ("sparse", "dense"):
            kinds = [f"{f['kind']}@{f['source']}" for f in results[name]["report"]["findings"]]
            print(f"{name} findings: {', '.join(kinds)}")
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
