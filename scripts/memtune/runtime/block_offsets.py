"""Where the multi-line memory texts start in a big log, found in one pass by GNU grep.

A memory_summary table or an nvidia-smi table can sit anywhere in a multi-GB log (often
once, next to an OOM at the very end), and looking for six literals with ``bytes.find``
costs six passes over every chunk: more than all the rest of the reading. For a plain file
of at least ``GREP_MIN_BYTES`` this module runs GNU grep once, as a child process working in
parallel with the Python reader, and hands over the byte offsets of the lines it matched.
Otherwise (stdin, .gz, a small file, no GNU grep, ``MEMTUNE_PREFILTER=python``) the
offsets come from :func:`find_hits` on each chunk. The triggers are the package's own
literals; no user text becomes a pattern, and no shell is involved.
"""

from __future__ import annotations

import os
import subprocess
from collections import deque
from pathlib import Path

from memtune.diagnose.early_grep import stop_child
from memtune.diagnose.grep_prefilter import choose, gnu_grep
from memtune.diagnose.log_reader import find_hits
from memtune.diagnose.patterns import ere_alternation
from memtune.errors import InputError

GREP_MIN_BYTES = 16 << 20


class BlockOffsets:
    """Offsets of trigger lines, asked for one chunk after another (increasing ranges)."""

    def __init__(self, path: Path | None, triggers: tuple[bytes, ...], fixed: bool = False) -> None:
        self.triggers = triggers
        self.proc: subprocess.Popen[bytes] | None = None
        self.pending: deque[int] = deque()
        self.found: list[int] = []  # every offset grep reported, in order
        self.pulled_upto = -1
        self._tail = b""
        self._done = False
        if path is None:
            return
        try:
            size = path.stat().st_size
        except OSError:
            return
        grep = gnu_grep()
        if grep is None or size < GREP_MIN_BYTES or choose(path, size) != "grep":
            return
        env = {"LC_ALL": "C", **({"PATH": os.environ["PATH"]} if "PATH" in os.environ else {})}
        # -b (byte offsets) but not -n: counting every newline of the file would cost grep
        # more than finding the tables
        # A few long literals run fastest as -F -e ... (Boyer-Moore skips); a longer list with
        # short literals as one ERE alternation (what benchmarks/diagnose_speed.py measured).
        if fixed:
            patterns = [arg for t in triggers for arg in ("-e", t.decode("utf-8"))]
            cmd = [grep, "-F", "-a", "-b", *patterns, "--", str(path)]
        else:
            cmd = [grep, "-E", "-a", "-b", "-e", ere_alternation(triggers), "--", str(path)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, bufsize=1 << 16
        )

    @property
    def by_grep(self) -> bool:
        return self.proc is not None

    def hits(self, region: bytes, limit: int, absolute: int) -> list[int]:
        """Line starts (relative to ``region``) of trigger lines in ``region[:limit]``, whose
        first byte is at file offset ``absolute``."""
        if self.proc is None:
            return find_hits(region, self.triggers, limit)
        end = absolute + limit
        while not self._done and self.pulled_upto < end:
            self._pull()
        while self.pending and self.pending[0] < absolute:
            self.pending.popleft()
        return [o - absolute for o in self.pending if o < end]

    def _pull(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        chunk = self.proc.stdout.read1(1 << 16)  # type: ignore[attr-defined]
        if not chunk:
            self._done = True
            self.pulled_upto = 1 << 62
            if self._tail:
                self._take(self._tail)
            return
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        if len(self._tail) > 1 << 20:  # a giant matched line: its offset is all we need
            self._tail = self._tail.split(b":", 1)[0] + b":"
        for line in lines:
            self._take(line)

    def _take(self, line: bytes) -> None:
        head = line.split(b":", 1)[0]
        if head.isdigit():
            offset = int(head)
            self.pending.append(offset)
            self.found.append(offset)
            self.pulled_upto = max(self.pulled_upto, offset)

    def all_hits(self) -> list[int]:
        """Every offset grep reports, reading its output to the end (mapped files)."""
        while not self._done:
            self._pull()
        return sorted(set(self.found))

    def close(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            if not self._done and proc.stdout is not None:
                proc.stdout.close()
            err = proc.stderr.read() if proc.stderr is not None else b""
            code = proc.wait(timeout=60) if self._done else None
        finally:
            stop_child(proc)
        if code is not None and code > 1:
            first = err.decode("utf-8", "replace").strip().splitlines()
            raise InputError(
                f"grep could not read the log ({first[0] if first else f'exit {code}'}); rerun with MEMTUNE_PREFILTER=python"
            )
