"""Find the candidate lines of a big plain log with the system's GNU grep, in one pass.

Why: the pure-Python prefilter (memtune.diagnose.log_reader.candidate_lines) makes one
``bytes.find`` pass per trigger, so its cost grows with the trigger list; GNU grep
matches every literal in one pass, the physical limit a Python loop cannot reach (given
the literals as one escaped ERE alternation, which GNU grep runs faster than
``-F -e ... -e``).  This module runs it as a child process and turns its
``LINE:OFFSET:TEXT`` output into exactly the ``(line_number, raw_line, is_hit)`` stream
the Python prefilter yields, reading the window of lines after a wrapped-message start
itself (``os.pread`` at the byte offset grep reports), so the scanner cannot tell the
two apart and tests/test_grep_prefilter.py proves they give identical findings.

Safety: no shell.  The command is ``grep -E -a -n -b -e T1|T2|... -- PATH``: the
triggers are the package's own data (fixed strings, every ERE metacharacter escaped),
the path comes after ``--`` so a file named ``-r`` is still a file, and nothing a user
wrote becomes a pattern or an option.  Only GNU grep is used (its output format is the
one parsed here); anything else (BSD grep, no grep, a failing grep) falls back to the
pure-Python path.

``MEMTUNE_PREFILTER=python`` forces the pure-Python path (benchmarks, debugging);
``MEMTUNE_PREFILTER=grep`` uses grep even for small files.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path

from memtune.diagnose import early_grep
from memtune.diagnose.early_grep import ENV_SWITCH, GREP_MIN_BYTES, child_env, grep_command
from memtune.diagnose.log_reader import window_opener
from memtune.diagnose.patterns import ere_alternation
from memtune.errors import InputError

__all__ = ["ENV_SWITCH", "GREP_MIN_BYTES", "choose", "gnu_grep", "grep_candidate_lines"]
READ_BLOCK = 64 << 10


@lru_cache(maxsize=1)
def gnu_grep() -> str | None:
    """Path of a GNU grep, or None (not installed, not GNU, or not runnable)."""
    path = shutil.which("grep")
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, timeout=10, env=child_env(), stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return path if out.returncode == 0 and b"GNU grep" in out.stdout else None


def choose(path: Path, size: int) -> str:
    """``"grep"`` or ``"python"`` for a plain file of ``size`` bytes."""
    wanted = os.environ.get(ENV_SWITCH, "auto").strip().lower()
    if wanted == "python":
        return "python"
    if gnu_grep() is None:
        return "python"
    if wanted == "grep" or size >= GREP_MIN_BYTES:
        return "grep"
    return "python"


class _Lines:
    """Sequential reads of whole lines at byte offsets, with a small pread buffer."""

    def __init__(self, fd: int, max_line: int) -> None:
        self.fd = fd
        self.max_line = max_line
        self.buf = b""
        self.buf_off = 0

    def line_at(self, off: int) -> tuple[bytes, int] | None:
        """The line starting at ``off`` (without its newline) and the next line's offset."""
        parts: list[bytes] = []
        got = 0
        while True:
            if not self.buf_off <= off < self.buf_off + len(self.buf):
                self.buf = os.pread(self.fd, READ_BLOCK, off)
                self.buf_off = off
                if not self.buf:
                    return (b"".join(parts), off) if parts else None
            rel = off - self.buf_off
            end = self.buf.find(b"\n", rel)
            if end != -1:
                parts.append(self.buf[rel:end])
                return b"".join(parts), self.buf_off + end + 1
            piece = self.buf[rel:]
            parts.append(piece)
            got += len(piece)
            off += len(piece)
            if got >= self.max_line:  # one enormous line: cut, as the Python reader does
                return b"".join(parts), self.skip_line(off)

    def skip_line(self, off: int) -> int:
        """Offset just after the newline that ends the line containing ``off`` (or EOF)."""
        while True:
            block = os.pread(self.fd, READ_BLOCK, off)
            if not block:
                return off
            end = block.find(b"\n")
            if end != -1:
                return off + end + 1
            off += len(block)


def grep_candidate_lines(
    path: Path,
    triggers: tuple[bytes, ...],
    window_triggers: tuple[bytes, ...],
    window: int,
    max_line: int,
    wanted: Callable[[], bool] | None = None,
) -> Iterator[tuple[int, bytes, bool]]:
    """The same stream as :func:`memtune.diagnose.log_reader.candidate_lines`, found by GNU grep.

    grep is started now (not at the first ``next()``), so it reads while the caller
    finishes starting up.  ``wanted`` (the scanner: "is a message still being re-joined?")
    ends a window early once it says no: the rest of the window could only continue a
    message, and a trigger line in it is still reported by grep as a hit of its own.  In a
    dense log most windows follow complete one-line messages, so this halves the lines read.
    """
    proc = _start(path, triggers)
    return _read(proc, path, triggers, window_triggers, window, max_line, wanted)


def _start(path: Path, triggers: tuple[bytes, ...]) -> subprocess.Popen[bytes]:
    grep = gnu_grep()
    if grep is None:  # pragma: no cover - choose() checked
        raise InputError("grep prefilter requested but no GNU grep found; unset MEMTUNE_PREFILTER")
    # One ERE alternation of the escaped literals: GNU grep matches it in one pass, and
    # measurably faster than the same literals as -F -e ... -e (benchmarks/diagnose_speed.py).
    cmd = grep_command(grep, ere_alternation(triggers), str(path))
    # the entry point may have started this very command already (memtune.diagnose.early_grep)
    return early_grep.take(path, cmd) or early_grep.spawn(cmd)


def _read(
    proc: subprocess.Popen[bytes],
    path: Path,
    triggers: tuple[bytes, ...],
    window_triggers: tuple[bytes, ...],
    window: int,
    max_line: int,
    wanted: Callable[[], bool] | None,
) -> Iterator[tuple[int, bytes, bool]]:
    opens_window = window_opener(tuple(window_triggers)).search
    emitted_upto = 0  # last line number yielded
    next_off = 0  # byte offset of line emitted_upto + 1
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            reader = _Lines(fd, max_line)
            # a pipe opened with bufsize > 0 is a BufferedReader, whose read1 _bounded_lines uses
            assert isinstance(proc.stdout, io.BufferedReader)
            for line_no, off, text, whole in _bounded_lines(proc.stdout, max_line, triggers):
                if line_no > emitted_upto:
                    yield line_no, text, True
                    emitted_upto = line_no
                    next_off = off + len(text) + 1 if whole else reader.skip_line(off)
                if window and opens_window(text):
                    last = line_no + window
                    while emitted_upto < last and (wanted is None or wanted()):
                        got = reader.line_at(next_off)
                        if got is None:
                            break
                        body, next_off = got
                        emitted_upto += 1
                        yield emitted_upto, body, False
        finally:
            os.close(fd)
        err = proc.stderr.read() if proc.stderr else b""
        code = proc.wait()
    finally:
        early_grep.stop_child(proc)
    if code > 1:  # 1 is "no line matched"
        message = err.decode("utf-8", "replace").strip().splitlines()
        raise InputError(
            f"{path}: grep could not read it ({message[0] if message else f'exit {code}'}); rerun with {ENV_SWITCH}=python"
        )


OUTPUT_CHUNK = 1 << 20  # grep's output is read in blocks and split here: cheaper per line than readline
PIECE_LEAD = 1 << 10  # bytes kept before the trigger in a piece of a giant line (exception name)


def _bounded_lines(
    stream: io.BufferedReader, max_line: int, triggers: tuple[bytes, ...]
) -> Iterator[tuple[int, int, bytes, bool]]:
    """grep's output as ``(line_number, offset, text, whole)``; ``whole`` is False for a line
    longer than ``max_line``, of which only one piece holding a trigger is kept (what the
    Python reader does with a line too long to buffer), so memory stays bounded."""
    limit = max_line + 64  # room for the "LINE:OFFSET:" label
    tail = b""
    while True:
        chunk = stream.read1(OUTPUT_CHUNK)
        if not chunk:
            if tail:  # GNU grep ends every line with a newline; be lenient anyway
                yield _parsed(tail, limit, max_line, triggers)
            return
        lines = (tail + chunk if tail else chunk).split(b"\n")
        tail = lines.pop()
        for out in lines:
            yield _parsed(out, limit, max_line, triggers)
        while len(tail) > limit:  # a giant line still arriving: keep one piece, drop the rest
            no_s, off_s, text = tail.split(b":", 2)
            keep = _piece_with_trigger(text, max_line, triggers)
            # The end of what was read so far: a trigger (and the exception name before it)
            # can straddle two reads, so each read is searched together with it.
            back = PIECE_LEAD + max(map(len, triggers), default=0)
            seen = text[-back:]
            while True:
                chunk = stream.read1(OUTPUT_CHUNK)
                end = chunk.find(b"\n")
                piece = chunk if end == -1 else chunk[:end]
                if keep is None:
                    keep = _piece_with_trigger(seen + piece, max_line, triggers)
                    seen = (seen + piece)[-back:]
                elif len(keep) < max_line:  # the message goes on after its trigger
                    keep += piece[: max_line - len(keep)]
                if not chunk or end != -1:
                    tail = chunk[end + 1 :] if chunk else b""
                    break
            yield int(no_s), int(off_s), keep if keep is not None else text[:max_line], False
            lines = tail.split(b"\n")
            tail = lines.pop()
            for out in lines:
                yield _parsed(out, limit, max_line, triggers)


def _parsed(out: bytes, limit: int, max_line: int, triggers: tuple[bytes, ...]) -> tuple[int, int, bytes, bool]:
    no_s, off_s, text = out.split(b":", 2)
    if len(out) <= limit:
        return int(no_s), int(off_s), text, True
    keep = _piece_with_trigger(text, max_line, triggers)
    return int(no_s), int(off_s), keep if keep is not None else text[:max_line], False


def _piece_with_trigger(text: bytes, max_line: int, triggers: tuple[bytes, ...]) -> bytes | None:
    """At most ``max_line`` bytes of ``text`` around its first trigger, or None without one."""
    hits = [i for i in (text.find(t) for t in triggers) if i != -1]
    if not hits:
        return None
    start = max(0, min(hits) - PIECE_LEAD)
    return text[start : start + max_line]
