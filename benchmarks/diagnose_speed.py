#!/usr/bin/env python3
"""How fast is diagnose.py on a huge multi-rank log, and how much memory does it take?

Generates a synthetic training log of --size-gib (default 1 GiB) in a temporary
directory: 64 ranks interleaving iteration/throughput/NCCL-INFO lines, benign lines that
mention trigger words (an env dump with expandable_segments, "divisible" in prose), and a
few real failures buried at random depths (a wrapped fragmentation OOM on one rank, a
capacity OOM, NCCL OOM warnings, a Megatron config error).  It then times, on the same
file in the same run:

* ``grep -c -E PATTERN`` where PATTERN is exactly the trigger list diagnose.py's
  prefilter searches for (printed below): the fair multi-pattern baseline;
* ``python3 scripts/diagnose.py LOG --json``,

each --repeat times (best wall time reported, runs alternated so the page cache treats
both alike), with the child's peak RSS from ``os.wait4``.  Targets: diagnose.py within
5x grep's time and peak RSS under 200 MB.  The temporary directory is always removed.

    python3 benchmarks/diagnose_speed.py            # 1 GiB
    python3 benchmarks/diagnose_speed.py --size-gib 2 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from memtune.oom_patterns import load_patterns  # noqa: E402

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
            out.append(f"[rank{r}]: WARNING: data loader worker {rng.randrange(8)} slow, waited {rng.random() * 3:.2f}s")
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


def generate(path: Path, size: int, seed: int = 7) -> int:
    """Write ~size bytes; returns the number of failures buried."""
    rng = random.Random(seed)
    blocks = [filler_block(rng, k * BLOCK_LINES // RANKS) for k in range(8)]
    failures = buried_failures()
    n_blocks = max(1, size // len(blocks[0]) + 1)
    where = {rng.randrange(n_blocks): f for f in failures}
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
    return len(where)


TIME = "/usr/bin/time"


def timed(cmd: list[str]) -> tuple[float, float, int, bytes, int]:
    """Wall seconds, CPU seconds (user+sys), peak RSS in bytes, stdout, exit code.

    Peak RSS comes from GNU time (%M) when present: it measures the command itself, not
    this Python parent that forked it.  Otherwise os.wait4's rusage of the direct child.
    """
    use_time = os.path.exists(TIME)
    full = [TIME, "-f", "MEMTUNE_TIME %U %S %M", *cmd] if use_time else cmd
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=out, stderr=err)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=float, default=1.0, help="log size in GiB (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool, best time kept (default 3)")
    ap.add_argument("--generate-only", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate_only:
        print(generate(Path(args.generate_only), int(args.size_gib * (1 << 30))))
        return 0
    if shutil.which("grep") is None:
        print("diagnose_speed: grep not found", file=sys.stderr)
        return 2

    pattern = load_patterns().grep_pattern()
    tmp = Path(tempfile.mkdtemp(prefix="diagnose_speed_"))
    try:
        log = tmp / "train.log"
        t0 = time.perf_counter()
        # Generate in a child process: this parent then stays small, so nothing it holds can
        # be mistaken for the measured commands' memory.
        gen = subprocess.run(
            [sys.executable, __file__, "--generate-only", str(log), "--size-gib", str(args.size_gib)],
            capture_output=True, text=True, check=True,
        )
        buried = int(gen.stdout.strip())
        size = log.stat().st_size
        print(f"log: {size / (1 << 30):.2f} GiB, {buried} failures buried, generated in {time.perf_counter() - t0:.1f} s")
        print(f"grep pattern (diagnose.py's trigger list): {pattern}")
        grep_cmd = ["grep", "-c", "-E", pattern, str(log)]
        diag_cmd = [sys.executable, str(REPO / "scripts" / "diagnose.py"), str(log), "--json"]
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=False)  # warm the page cache
        g_wall, g_cpu, g_rss, d_wall, d_cpu, d_rss = [], [], [], [], [], []
        report = None
        grep_count = ""
        for _ in range(args.repeat):
            wall, cpu, rss, out, code = timed(grep_cmd)
            g_wall.append(wall), g_cpu.append(cpu), g_rss.append(rss)
            grep_count = out.decode().strip()
            wall, cpu, rss, out, code = timed(diag_cmd)
            if code != 0:
                print(f"diagnose.py failed with exit {code}", file=sys.stderr)
                return 1
            d_wall.append(wall), d_cpu.append(cpu), d_rss.append(rss)
            report = json.loads(out)
        assert report is not None
        kinds = [f"{f['kind']}@{f['source']}" for f in report["findings"]]
        gib = size / (1 << 30)
        for name, walls, cpus, rsss in (("grep -c -E", g_wall, g_cpu, g_rss), ("diagnose.py", d_wall, d_cpu, d_rss)):
            print(
                f"{name:<12} best wall {min(walls):6.2f} s ({gib / min(walls):.2f} GiB/s), best CPU {min(cpus):6.2f} s, "
                f"peak RSS {max(rsss) / 1e6:6.1f} MB  (walls: {', '.join(f'{w:.2f}' for w in walls)})"
            )
        print(f"grep matching lines: {grep_count}; diagnose.py findings ({len(kinds)}): {', '.join(kinds)}")
        ratio = min(d_wall) / min(g_wall)
        cpu_ratio = min(d_cpu) / max(min(g_cpu), 1e-9)
        ok_time = ratio <= 5.0
        ok_rss = max(d_rss) < 200e6
        ok_found = len(kinds) == buried
        print(
            f"ratio diagnose/grep: wall {ratio:.2f}x, CPU {cpu_ratio:.2f}x (target <= 5x: {'PASS' if ok_time else 'FAIL'}); "
            f"peak RSS {max(d_rss) / 1e6:.1f} MB (target < 200 MB: {'PASS' if ok_rss else 'FAIL'}); "
            f"all {buried} buried failures found: {'PASS' if ok_found else 'FAIL'}"
        )
        return 0 if ok_time and ok_rss and ok_found else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
