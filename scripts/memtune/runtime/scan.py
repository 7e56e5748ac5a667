"""Find and parse the memory figures in one region of a log (a chunk's bytes, or a mapped file).

The literal triggers of every format are searched with ``bytes.find`` (C speed) and only the
lines that hold one are decoded. Multi-line texts (tables, dumps) are parsed whole from their
first line; per-iteration lines are all parsed in the first ``FIRST_CHUNK_LINES`` of a log and
sampled past them (see :func:`read_iteration_lines`).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

from memtune.runtime.block_offsets import BlockOffsets
from memtune.runtime.blocks import BLOCK_PARSERS, BlockParser
from memtune.runtime.collect import Collector, SourceState, record
from memtune.runtime.lines import TRIGGERS, parse_line, parse_reports
from memtune.runtime.model import Reading

FIRST_CHUNK_LINES = 4096  # per-iteration lines of a log's first chunk read one by one (warm-up)
SAMPLES_PER_CHUNK = 64
BLOCK_WINDOW = 1 << 20  # the longest multi-line text read whole (a pretty-printed stats dump is ~12 KiB)

#: What the line readers search: a chunk's bytes, or a whole file mapped into memory.
Buffer = bytes | mmap.mmap


def line_numbers(region: bytes, base_line: int, starts: Iterable[int]) -> dict[int, int]:
    """Line number of each start offset, counting newlines once across the sorted offsets."""
    numbers = {}
    line, pos = base_line, 0
    for start in sorted(set(starts)):
        line += region.count(b"\n", pos, start)
        pos = start
        numbers[start] = line
    return numbers


def process_region(
    region: bytes,
    base_line: int,
    absolute: int,
    first: bool,
    eof: bool,
    state: SourceState,
    collector: Collector,
    blocks: BlockOffsets,
) -> int:
    """Read the complete lines in ``region``; return the offset from which to carry text
    into the next chunk (``len(region)`` when nothing is carried)."""
    limit = len(region)
    keep = limit
    block_starts = blocks.hits(region, limit, absolute)
    consumed_until = 0
    if block_starts:
        numbers = line_numbers(region, base_line, block_starts)
        for start in block_starts:
            if start < consumed_until:
                continue
            window_end = min(limit, start + BLOCK_WINDOW)
            lines = region[start:window_end].decode("utf-8", "replace").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            complete = eof or window_end - start >= BLOCK_WINDOW
            outcome = parse_block(lines, state.label, numbers[start], complete)
            if outcome is None:
                keep = start
                break
            readings, used = outcome
            for reading in readings:
                record(reading, state, collector)
            if readings:
                consumed_until = advance_lines(region, start, used)
    read_iteration_lines(region, keep, base_line, first, state, collector)
    return keep


def advance_lines(region: Buffer, start: int, count: int) -> int:
    pos = start
    for _ in range(count):
        nxt = region.find(b"\n", pos)
        if nxt < 0:
            return len(region)
        pos = nxt + 1
    return pos


def parse_block(lines: list[str], source: str, line: int, complete: bool) -> tuple[list[Reading], int] | None:
    first = lines[0] if lines else ""
    for parser in BLOCK_PARSERS:
        if not _has_trigger(first, parser):
            continue
        outcome = parser.parse(lines, source, line, complete)
        if outcome is None:
            return None
        if outcome[0]:
            return outcome
    return [], 1


def _has_trigger(line: str, parser: BlockParser) -> bool:
    return parser.trigger.decode("ascii") in line


def read_iteration_lines(
    region: Buffer,
    end: int,
    base_line: int,
    first: bool,
    state: SourceState,
    collector: Collector,
    begin: int = 0,
    numbered: bool = True,
) -> None:
    """Per-iteration memory lines in ``region[begin:end]`` (whole lines). ``numbered=False``
    (a mapped file past its first chunk) leaves line numbers at 0: counting every newline
    of a multi-GB log would cost more than reading it."""
    if first:
        hits = trigger_lines(region, TRIGGERS, begin, end, FIRST_CHUNK_LINES + 1)
        found = tuple(t for t in TRIGGERS if region.find(t, begin, end) >= 0)
        if found:  # later chunks look only for the families this log prints
            state.triggers = found
        state.memory_lines += min(len(hits), FIRST_CHUNK_LINES)
        if len(hits) <= FIRST_CHUNK_LINES:
            _parse_lines(region, hits, base_line, state, collector, numbered)
            return
        # warm-up lives at the start: read its lines one by one, then sample the rest
        _parse_lines(region, hits[:FIRST_CHUNK_LINES], base_line, state, collector, numbered)
        state.sampled = True
        rest = hits[FIRST_CHUNK_LINES]
        sample = [s for s in _sample_starts(region, end, collector, rest, state.triggers) if s >= rest]
        _parse_lines(region, sample, base_line, state, collector, numbered)
        return
    sample = _sample_starts(region, end, collector, begin, state.triggers)
    if not sample:
        return
    if len(set(sample)) < SAMPLES_PER_CHUNK // 2:
        # sparse (memory every N iterations): the sample already holds nearly every line; read them all
        hits = trigger_lines(region, state.triggers, begin, end)
        state.memory_lines += len(hits)
        _parse_lines(region, hits, base_line, state, collector, numbered)
        return
    readings = _readings_at(region, sample, base_line, state.label, numbered)
    if _consistent(readings, collector):
        state.sampled = True
        for reading in readings:
            record(reading, state, collector)
    else:
        hits = trigger_lines(region, state.triggers, begin, end)
        state.memory_lines += len(hits)
        _parse_lines(region, hits, base_line, state, collector, numbered)


def trigger_lines(
    region: Buffer, triggers: tuple[bytes, ...], begin: int, end: int, limit: int | None = None
) -> list[int]:
    """Start offsets of the lines in ``region[begin:end]`` holding a trigger (sorted, unique);
    with ``limit``, the first ``limit`` of them (each trigger stops after that many)."""
    starts: set[int] = set()
    for trigger in triggers:
        pos = region.find(trigger, begin, end)
        found = 0
        while pos != -1 and (limit is None or found < limit):
            found += 1
            starts.add(region.rfind(b"\n", begin, pos) + 1 if pos > begin else begin)
            line_end = region.find(b"\n", pos, end)
            if line_end == -1:
                break
            pos = region.find(trigger, line_end, end)
    ordered = sorted(max(s, begin) for s in starts)
    return ordered if limit is None else ordered[:limit]


def _readings_at(
    region: Buffer, starts: list[int], base_line: int, source: str, numbered: bool = True
) -> list[Reading]:
    numbers = line_numbers(region, base_line, starts) if numbered and isinstance(region, bytes) else {}
    out = []
    for start in sorted(set(starts)):
        end = region.find(b"\n", start)
        text = region[start : end if end >= 0 else len(region)].decode("utf-8", "replace")
        out.extend(parse_reports(text, source, numbers.get(start, 0)))
    return out


def _parse_lines(
    region: Buffer, starts: list[int], base_line: int, state: SourceState, collector: Collector, numbered: bool = True
) -> None:
    for reading in _readings_at(region, starts, base_line, state.label, numbered):
        record(reading, state, collector)


def _line_start(region: Buffer, pos: int, begin: int = 0) -> int:
    return region.rfind(b"\n", begin, pos) + 1 or begin


def _sample_starts(
    region: Buffer, end: int, collector: Collector, begin: int, triggers: tuple[bytes, ...]
) -> list[int]:
    """Evenly spaced memory lines plus, walking back from the end, the last line of every
    rank seen so far (so each rank's latest figures are always read)."""
    starts: list[int] = []
    for k in range(SAMPLES_PER_CHUNK):
        offset = begin + k * (end - begin) // SAMPLES_PER_CHUNK
        hits = [p for p in (region.find(t, offset, end) for t in triggers) if p >= 0]
        if hits:
            starts.append(_line_start(region, min(hits), begin))
    wanted = set(collector.ranks)
    budget = 4 * len(wanted) + 16
    pos = end
    while budget > 0 and pos > begin:
        hits = [p for p in (region.rfind(t, begin, pos) for t in triggers) if p >= 0]
        if not hits:
            break
        start = _line_start(region, max(hits), begin)
        starts.append(start)
        line_end = region.find(b"\n", start, end)
        reading = parse_line(region[start : line_end if line_end >= 0 else end].decode("utf-8", "replace"), "", 0)
        if reading is not None and reading.rank is not None:
            wanted.discard(reading.rank)
        if not wanted:
            break
        pos = start
        budget -= 1
    return starts


def _consistent(readings: list[Reading], collector: Collector) -> bool:
    """False when a sampled series goes backwards (a peak reset or a restarted run): then
    the chunk is read line by line so no peak between samples is missed."""
    last_iteration: dict[int, int] = {}
    last_peak: dict[int, int] = {}
    for rank, acc in collector.ranks.items():
        if acc.last_iteration is not None:
            last_iteration[rank] = acc.last_iteration
        if acc.last_max_allocated is not None:
            last_peak[rank] = acc.last_max_allocated
    for r in readings:
        rank = r.rank if r.rank is not None else 0
        if r.iteration is not None:
            if r.iteration < last_iteration.get(rank, r.iteration):
                return False
            last_iteration[rank] = r.iteration
        if r.max_allocated_bytes is not None:
            if r.max_allocated_bytes + r.resolution_bytes < last_peak.get(rank, r.max_allocated_bytes):
                return False
            last_peak[rank] = r.max_allocated_bytes
    return True
