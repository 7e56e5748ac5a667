"""The grep the entry point starts early (memtune.diagnose.early_grep) changes no answer.

It is only a head start: the normal path takes the early process over when it runs the very
command the prefilter would start, and otherwise kills it and starts its own.  These tests
check both branches give the findings of a run without the head start, that a stale pattern
file is caught here (and at run time only costs the head start), and which command lines
start nothing early.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helper_cli import REPO
from memtune.diagnose import early_grep, grep_prefilter
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.run import diagnose_sources

needs_grep = pytest.mark.skipif(grep_prefilter.gnu_grep() is None, reason="needs GNU grep")

OOM = (
    b"[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of "
    b"79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of "
    b"the allocated memory 71.53 GiB is allocated by PyTorch, and 5.84 GiB is reserved by PyTorch but unallocated.\n"
)


def test_pattern_file_is_current() -> None:
    """data/diagnose_grep_pattern.txt is generated from the YAML pattern data; regenerate with
    python3 scripts/memtune/diagnose/early_grep.py --write"""
    assert early_grep.PATTERN_FILE.read_text(encoding="utf-8").strip() == load_patterns().grep_pattern()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("early") / "train.log"
    filler = b"".join(b"[rank%d]: iteration %8d | lm loss: 2.0 |\n" % (i % 8, i) for i in range(20000))
    with path.open("wb") as fh:
        while fh.tell() < early_grep.GREP_MIN_BYTES:
            fh.write(filler)
        fh.write(OOM)
        fh.write(filler)
    return path


def _findings(path: Path) -> list[tuple[str, int, str]]:
    return [(f["kind"], f["line"], f["source"]) for f in diagnose_sources([str(path)])["findings"]]


@pytest.mark.parametrize(
    "argv, started",
    [
        (["LOG"], True),
        (["LOG", "--json"], True),
        (["--torch-version", "2.1", "LOG"], True),
        (["--torch-version=2.1", "LOG", "--json"], True),
        (["LOG", "--symptom", "oom"], False),  # not a log run: the normal path says what is wrong
        (["-"], False),
        (["LOG", "--help"], False),
        (["--limit", "2"], False),
    ],
)
def test_which_command_lines_start_grep_early(argv: list[str], started: bool, big_log: Path) -> None:
    assert (early_grep.first_log([str(big_log) if a == "LOG" else a for a in argv]) is not None) is started


@needs_grep
def test_taken_over_early_grep_gives_the_same_findings(big_log: Path) -> None:
    plain = _findings(big_log)
    assert plain and plain[0][0] == "fragmentation"
    early_grep.start([str(big_log), "--json"])
    entry = early_grep._started[str(big_log)]
    proc = entry[2]
    assert _findings(big_log) == plain
    assert str(big_log) not in early_grep._started  # taken over, not left running
    assert proc.poll() in (0, 1)  # it ran to the end: its output was the one read


@needs_grep
def test_mismatching_early_grep_is_killed_and_replaced(big_log: Path) -> None:
    plain = _findings(big_log)
    early_grep.start([str(big_log)])
    cmd, identity, proc = early_grep._started[str(big_log)]
    # as if the pattern file were stale: the early command no longer matches
    early_grep._started[str(big_log)] = (cmd[:-3] + ["stale", "--", cmd[-1]], identity, proc)
    assert _findings(big_log) == plain
    assert proc.returncode is not None and str(big_log) not in early_grep._started


@pytest.mark.parametrize("name, content", [("small.log", OOM), ("x.log.gz", b"\x1f\x8b" + b"\0" * (17 << 20))])
def test_small_and_compressed_logs_start_nothing(tmp_path: Path, name: str, content: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    early_grep.start([str(path)])
    assert str(path) not in early_grep._started
    early_grep.start([str(tmp_path / "missing.log")])  # never raises: the normal path reports it
    assert not early_grep._started


@needs_grep
@pytest.mark.skipif(shutil.which("pgrep") is None, reason="needs pgrep to look for a left-over process")
def test_entry_point_with_bad_input_leaves_no_grep_behind(tmp_path: Path, big_log: Path) -> None:
    """A usage error after the early start: one line, exit 2, and the early grep killed."""
    res = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "diagnose.py"), str(big_log), "--limit", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    gone = subprocess.run(["pgrep", "-f", f"-- {big_log}$"], capture_output=True, text=True)
    assert gone.stdout.strip() == ""
