"""Run a helper as a user does, under a hard memory cap, and report its peak memory and time.

The denial-of-service tests build an attack input and require one line on stderr and
exit 2 (or a finding). The address-space cap turns a regression (a helper that expands
an alias bomb or reads /dev/zero) into a quick failure instead of a machine swapping for
minutes; ``os.wait4`` gives the child's own peak RSS, which the benchmark prints.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ADDRESS_SPACE_CAP = 1 << 30  # the child is killed by MemoryError long before it swaps


@dataclass(frozen=True)
class Bounded:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float


def run_bounded(helper: str, *args: str, timeout: float = 60, cap: int = ADDRESS_SPACE_CAP) -> Bounded:
    """``python3 scripts/<helper>.py args...`` with RLIMIT_AS = ``cap``, killed after ``timeout``."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "scripts" / f"{helper}.py"), *args], stdout=out, stderr=err, preexec_fn=limit
        )
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Bounded(
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            seconds,
            usage.ru_maxrss / 1024,
        )
