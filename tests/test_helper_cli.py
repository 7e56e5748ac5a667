"""The in-process runner answers exactly as a fresh interpreter does.

Most CLI tests call ``helper_cli.invoke`` instead of starting ``python3 scripts/<helper>.py``;
they are only worth as much as this equivalence. One run per outcome: a finding answer on
standard input (exit 0, JSON), a check with errors (exit 1) and bad input (exit 2, one line).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helper_cli import REPO, invoke

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 10.00 MiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
    "3.00 GiB is reserved by PyTorch but unallocated.\n"
)


@pytest.mark.parametrize(
    ("helper", "args", "stdin", "code"),
    [
        ("diagnose", ("-", "--json"), OOM, 0),
        ("check_env", ("--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe"), "", 1),
        ("estimate_memory", ("--preset", "llama3-8b", "--gpus", "8", "--tp", "0"), "", 2),
    ],
    ids=["exit-0-stdin-json", "exit-1", "exit-2"],
)
def test_invoke_matches_a_real_process(helper: str, args: tuple[str, ...], stdin: str, code: int) -> None:
    real = subprocess.run(
        [sys.executable, str(REPO / "scripts" / f"{helper}.py"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    here = invoke(helper, *args, stdin=stdin)
    assert real.returncode == code, real.stderr
    assert (here.exit_code, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)


def test_invoke_restores_the_streams_and_environment(monkeypatch) -> None:
    monkeypatch.delenv("MEMTUNE_TEST_MARKER", raising=False)
    before = sys.stdin, sys.stdout, sys.stderr
    invoke("diagnose", "--symptom", "oom", env={"MEMTUNE_TEST_MARKER": "1"})
    assert (sys.stdin, sys.stdout, sys.stderr) == before
    assert "MEMTUNE_TEST_MARKER" not in os.environ
