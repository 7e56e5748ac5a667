"""Stream a (possibly huge, possibly gzip-compressed) log and hand on only the lines worth parsing.

A multi-rank training log can be many GB, so the file is never read into memory: it is
read in large binary chunks, each chunk is searched with ``bytes.find`` for the literal
trigger strings (C speed, close to grep), and only a hit line plus the few lines after
it (a wrapped OOM message continues there) are decoded and parsed.  Memory stays at a
couple of chunks whatever the file size.

This module also knows the line prefixes launchers put in front of a message
(``[rank3]:``, ``3: [rank3]:``, ``[1,3]<stderr>:``, ``[default3]:``, ``host: ``, ``> ``
quoting, timestamps), because a wrapped message's continuation lines carry the same
prefix and must be re-joined per rank.
"""

from __future__ import annotations

import gzip
import io
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from memtune.errors import InputError

CHUNK_SIZE = 8 << 20
WINDOW_LINES = 24  # lines after a hit that may continue its message (interleaved ranks)
MAX_CARRY = 4 * CHUNK_SIZE  # bound on carried-over text, so one giant line cannot grow memory
GZIP_MAGIC = b"\x1f\x8b"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


class ByteStream(Protocol):
    """What the line scanner reads from: a file, a gzip stream, the UTF-16 re-encoder, a TextStream."""

    def readinto(self, buffer: memoryview, /) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Source:
    """One input: a path, or ``-`` for standard input."""

    name: str

    @property
    def is_stdin(self) -> bool:
        return self.name == "-"

    @property
    def label(self) -> str:
        """How findings and the report name this input."""
        return "<stdin>" if self.is_stdin else self.name


def open_source(source: Source) -> ByteStream:
    """A binary stream of the decompressed text, or an InputError naming the problem."""
    if source.is_stdin:
        if sys.stdin is None:  # started with stdin closed (`cmd <&-`, some agent sandboxes)
            raise InputError(
                "-: standard input is closed; pipe the log in (cat train.log | diagnose.py -) or pass the file"
            )
        raw: BinaryIO = sys.stdin.buffer
    else:
        path = Path(source.name)
        if not path.exists():
            raise InputError(f"{source.name}: no such file; pass an existing log path, or - to read standard input")
        if path.is_dir():
            raise InputError(f"{source.name}: is a directory; pass the log file(s) inside it, e.g. {source.name}/*.log")
        try:
            raw = path.open("rb")
        except OSError as exc:
            raise InputError(f"{source.name}: cannot open ({exc.strerror or exc})") from exc
    # A stdin replaced in-process (a test runner's BytesIO) is no raw stream, but BufferedReader
    # only calls its readinto: the cast states that duck-typing.
    try:
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast("io.RawIOBase", raw))
        head = buffered.peek(2)[:2]
    except (OSError, ValueError) as exc:  # stdin opened for writing, or already closed
        raise InputError(f"{source.name}: cannot read it ({exc}); pipe the log in or pass the file") from None
    stream: gzip.GzipFile | io.BufferedReader = (
        gzip.GzipFile(fileobj=buffered, mode="rb") if head == GZIP_MAGIC else buffered
    )
    try:
        bom = stream.peek(2)[:2]
    except (OSError, EOFError) as exc:  # a cut or corrupt .gz fails on its first read
        raise InputError(f"{source.name}: cannot decompress ({exc}); is the .gz file complete?") from exc
    if bom in UTF16_BOMS:
        return _Utf16AsUtf8(stream)
    return stream


class _Utf16AsUtf8:
    """UTF-16 text (what PowerShell's ``>`` writes) re-encoded to UTF-8 as it streams."""

    def __init__(self, stream: gzip.GzipFile | io.BufferedReader) -> None:
        self._text = io.TextIOWrapper(stream, encoding="utf-16", errors="replace", newline="")
        self._pending = b""

    def readinto(self, view: memoryview) -> int:
        while len(self._pending) < len(view):
            chunk = self._text.read(1 << 20)
            if not chunk:
                break
            self._pending += chunk.encode("utf-8")
        k = min(len(view), len(self._pending))
        view[:k] = self._pending[:k]
        self._pending = self._pending[k:]
        return k

    def close(self) -> None:
        self._text.close()


def _check_text(source: Source, first: bytes) -> None:
    """Refuse binaries early: a NUL byte in the first 64 KiB never occurs in a text log."""
    if b"\x00" in first[: 64 << 10]:
        raise InputError(
            f"{source.name}: looks like a binary file (NUL bytes), not a text log; pass the training log (plain or .gz)"
        )


def _empty_input(source: Source) -> str:
    """The one-line refusal of an input with no text in it, saying how to pass the text."""
    paste = "diagnose.py - <<'EOF', then the error text, then a line EOF"
    if source.is_stdin:
        return f"-: standard input is empty, nothing to diagnose; paste the error after the command ({paste}) or pass the log file"
    return f"{source.name}: the file is empty, nothing to diagnose; pass the log that holds the error, or paste it ({paste})"


class TextStream:
    """The decompressed bytes of one source, read with ``readinto`` into the caller's buffer.

    ``readinto`` lets the scanner reuse one buffer for a whole multi-GB log instead of
    allocating (and copying) a fresh chunk per read.  The first read is checked for
    binary content; decompression errors become one-line InputErrors.
    """

    def __init__(self, source: Source, require_text: bool = False) -> None:
        self.source = source
        self._stream = open_source(source)
        self._checked = False
        # require_text: an input with nothing but whitespace is refused at its end instead of
        # reading as "no failure found" (a forgotten paste into ``diagnose.py -`` looked clean).
        self._require_text = require_text
        self._saw_text = False
        # A regular file read as it is on disk (not stdin, not gunzipped, not re-encoded from
        # UTF-16): only then may another reader (the grep prefilter) read the path itself.
        self.plain_file = (
            not source.is_stdin and isinstance(self._stream, io.BufferedReader) and Path(source.name).is_file()
        )

    def readinto(self, view: memoryview) -> int:
        try:
            got = self._stream.readinto(view) or 0
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"{self.source.name}: cannot decompress ({exc}); is the .gz file complete?") from exc
        if not self._checked:
            self._checked = True
            _check_text(self.source, bytes(view[: min(got, 64 << 10)]))
        if self._require_text and not self._saw_text:
            self._saw_text = bool(bytes(view[:got]).strip())
            if not got:
                raise InputError(_empty_input(self.source))
        return got

    def close(self) -> None:
        if not self.source.is_stdin:
            self._stream.close()

    def __enter__(self) -> TextStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_chunks(source: Source, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Decompressed chunks of ``source`` as bytes (for callers that want whole chunks)."""
    buf = bytearray(chunk_size)
    with TextStream(source) as stream, memoryview(buf) as view:
        while True:
            got = stream.readinto(view)
            if not got:
                return
            yield bytes(view[:got])


# What precedes a message's opening words when a wrap cut them (``torch.OutOfMemoryError: CUDA o``).
_CUT_LEAD = r"(?:Error|Exception):[ \t]?"


def cut_head_source(window_triggers: tuple[bytes, ...]) -> str:
    """Regex source: a line that ends part-way through a window trigger, right after an
    exception name (``RuntimeError: CUDA out of m``): a narrow terminal cut the message's
    opening words, and the rest of them starts the next line."""
    heads = sorted({w.decode("utf-8")[:k] for w in window_triggers for k in range(1, len(w))}, key=len, reverse=True)
    return _CUT_LEAD + "(?:" + "|".join(re.escape(h) for h in heads) + r")[ \t\r]*$"


@lru_cache(maxsize=8)
def window_opener(window_triggers: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """One compiled test for "this hit line may start a wrapped message": a window trigger
    anywhere in it, or its opening words cut at the line's end.

    Why a regex and not ``any(t in line ...)``: it is asked of every hit line, and on a
    trigger-dense log one C-level search is a quarter of the cost of the generator.
    Both prefilters (this module's and memtune.diagnose.grep_prefilter) use it, so they open the
    same windows.
    """
    if not window_triggers:
        return re.compile(rb"(?!x)x")  # matches nothing
    literal = b"|".join(re.escape(w) for w in window_triggers)
    return re.compile(literal + b"|" + cut_head_source(window_triggers).encode("utf-8"))


def find_hits(block: bytes | bytearray, triggers: Iterable[bytes], limit: int | None = None) -> list[int]:
    """Start offsets of the lines in ``block[:limit]`` that contain any trigger (sorted, unique)."""
    limit = len(block) if limit is None else limit
    starts: set[int] = set()
    for trig in triggers:
        pos = block.find(trig, 0, limit)
        while pos != -1:
            starts.add(block.rfind(b"\n", 0, pos) + 1)
            end = block.find(b"\n", pos, limit)
            if end == -1:
                break
            pos = block.find(trig, end, limit)
    return sorted(starts)


def candidate_lines(
    stream: ByteStream,
    triggers: tuple[bytes, ...],
    window_triggers: tuple[bytes, ...] = (),
    window: int = WINDOW_LINES,
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[tuple[int, bytes, bool]]:
    """``(line_number, raw_line, is_hit)`` for every hit line, plus the ``window`` lines
    after a hit that contains one of ``window_triggers`` (a message that may be wrapped).

    ``stream`` only needs ``readinto``.  Line numbers are 1-based over the whole stream.
    Lines come in increasing order with gaps where nothing was of interest; the consumer
    flushes pending state at a gap.  Only wrapped-message starts get a window: other
    failures are one line, and walking 24 lines after every benign hit (an env dump
    mentioning expandable_segments) would cost more than the search itself.

    One buffer is reused for the whole stream: each read lands after the carried-over
    partial line, the buffer is searched in place up to its last newline (``limit``),
    and only the short tail is moved to the front for the next read.
    """
    opens_window = window_opener(tuple(window_triggers)).search
    buf = bytearray(chunk_size)
    n = 0  # bytes carried over at the front of ``buf``
    base = 1  # line number of the first line in ``buf``
    emitted_upto = 0  # last line number already yielded
    eof = False
    while not eof:
        if len(buf) - n < chunk_size:
            buf.extend(bytes(chunk_size - (len(buf) - n)))  # a long carry: grow (rare)
        with memoryview(buf) as view, view[n : n + chunk_size] as target:
            got = stream.readinto(target)
        if not got:
            eof = True
            valid = limit = n
        else:
            valid = n + got
            limit = buf.rfind(b"\n", 0, valid) + 1
            if limit == 0 and valid < MAX_CARRY:
                n = valid  # no complete line yet
                continue
            if limit == 0:
                limit = valid  # one enormous line: cut it (it keeps its line number)
        if not limit:
            break
        line_no = base
        pos = 0
        keep_from = limit
        for start in find_hits(buf, triggers, limit):
            line_no += buf.count(b"\n", pos, start)
            pos = start
            # Walk the hit line and, for a wrapped-message start, the window after it.
            hit_end = buf.find(b"\n", start, limit)
            hit_line = buf[start : limit if hit_end == -1 else hit_end]
            last_no = line_no + (window if opens_window(hit_line) else 0)
            cur, cur_no = start, line_no
            while cur < limit and cur_no <= last_no:
                end = buf.find(b"\n", cur, limit)
                if end == -1:
                    end = limit
                if cur_no > emitted_upto:
                    yield cur_no, bytes(buf[cur:end]), cur_no == line_no
                    emitted_upto = cur_no
                cur, cur_no = end + 1, cur_no + 1
            if cur >= limit and cur_no <= last_no and not eof and valid - start < MAX_CARRY:
                # The window runs past this buffer: re-read from the hit line once the next
                # chunk is in.  Lines already yielded are skipped thanks to ``emitted_upto``.
                keep_from = start
                break
        if keep_from == limit:
            line_no += buf.count(b"\n", pos, limit)
        base = line_no
        buf[0 : valid - keep_from] = buf[keep_from:valid]
        n = valid - keep_from


# --------------------------------------------------------------------------- prefixes

_TIMESTAMP = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?[ \t]+"
    r"|^\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?[ \t]+"
    r"|^(?:[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2})[ \t]+"
)
_QUOTE = re.compile(r"^[ \t]*>[ \t]?")
_SRUN_LABEL = re.compile(r"^[ \t]*(\d+):[ \t]")
# A wrapper's own "rank 13:" / "rank13:" label (pdsh-style per-rank tags, home-grown launch
# scripts).  Matched before ``_HOST``, which would otherwise take "rank13" for a host name.
_RANK_LABEL = re.compile(r"^[ \t]*rank[ \t]?(\d+):[ \t]", re.IGNORECASE)
_RANK = re.compile(r"^[ \t]*\[rank(\d+)\]:[ \t]?")
_MPI_TAG = re.compile(r"^[ \t]*\[\d+,(\d+)\]<std(?:out|err)>:[ \t]?")
_TORCHRUN = re.compile(r"^[ \t]*\[default(\d+)\]:[ \t]?")
# Bounded like a DNS name (labels of <= 63): with unbounded runs on both sides of ``\d`` a
# long token without a colon backtracks quadratically.
_HOST = re.compile(r"^[ \t]*([a-z0-9][a-z0-9.-]{0,126}?\d[a-z0-9.-]{0,126}):[ \t]")
_NCCL = re.compile(
    r"(?P<host>[\w.-]{1,128}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) \[(?P<dev>\d{1,4})\]"
)  # bounded: linear


@dataclass(frozen=True)
class LinePrefix:
    """What the launcher prefix says about a line, and the message text after it."""

    text: str
    rank: int | None = None
    host: str | None = None

    @property
    def stream_key(self) -> str:
        """Continuation lines of one message share this key (same rank, or same host)."""
        if self.rank is not None:
            return f"rank{self.rank}"
        return self.host or ""


def strip_prefixes(line: str) -> LinePrefix:
    """Peel quoting, timestamps and rank/host labels off the front of a log line.

    Launchers stack their labels ("rank 13: [rank13]: ...", "0: [default5]:[rank5]: ..."),
    so every label is peeled in one bounded loop.  PyTorch's own ``[rankN]:`` tag names the
    global rank and wins (the innermost one); otherwise the outermost wrapper label is used,
    since ``[defaultN]`` is only the node-local rank.
    """
    text = line.rstrip("\r\n")
    rank: int | None = None
    host: str | None = None
    label: int | None = None
    for _ in range(8):  # prefixes nest ("> 2025-... 3: [rank3]: ..."); bounded loop
        m = _QUOTE.match(text) or _TIMESTAMP.match(text)
        if m:
            text = text[m.end() :]
            continue
        m = _RANK.match(text)
        if m:
            rank = int(m.group(1))  # innermost wins: PyTorch's own global-rank tag
            text = text[m.end() :]
            continue
        m = _MPI_TAG.match(text) or _TORCHRUN.match(text)
        if m:
            label = int(m.group(1)) if label is None else label
            text = text[m.end() :]
            continue
        m = _SRUN_LABEL.match(text) or _RANK_LABEL.match(text)
        if m:
            label = int(m.group(1)) if label is None else label
            text = text[m.end() :]
            continue
        m = _HOST.match(text)
        if m and host is None:
            host = m.group(1)
            text = text[m.end() :]
            continue
        break
    if rank is None:
        rank = label
    return LinePrefix(text=text, rank=rank, host=host)


def nccl_origin(text: str) -> dict[str, str | int] | None:
    """``host:pid:tid [dev]`` of an NCCL log line (dev is the CUDA device, not the rank)."""
    m = _NCCL.search(text)
    if not m:
        return None
    return {"host": m.group("host"), "pid": int(m.group("pid")), "device": int(m.group("dev"))}
