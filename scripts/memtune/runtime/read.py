"""Read every memory figure a run printed, from any number of logs, tables and snapshots.

``read_measurements(paths)`` is the one entry point (runtime_memory and trace_regression
both call it). Logs are streamed in 8 MiB chunks, never held whole, so a multi-GB,
multi-rank ``.gz`` log costs a bounded amount of memory:

* the literal triggers of every format are searched with ``bytes.find``/``bytes.count``
  (C speed, like grep) and only the lines that hold one are decoded;
* multi-line texts (memory_summary tables, memory_stats dumps, nvidia-smi output) are read
  whole from their first line, carried into the next chunk when they straddle it;
* per-iteration lines (report_memory, Bridge, DeepSpeed) are all parsed in small logs and
  in the first chunk of every log (warm-up lives there). In a later chunk holding more than
  ``FULL_PARSE_LINES`` of them, the chunk's lines are all counted but only a sample is
  parsed: evenly spaced ones plus the last line of every rank. The peaks stay exact because
  ``max allocated`` / ``max reserved`` are running maxima that only grow, and the sample
  checks that: when a sampled peak or iteration number goes down (a reset, a restarted job
  appending to the same log), that chunk is parsed line by line instead.

Each rank's series is thinned evenly past ``MAX_POINTS`` (the first points always kept),
which is more than a verdict or a plot needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from memtune.diagnose.log_reader import Source, TextStream, find_hits
from memtune.errors import InputError
from memtune.runtime.block_offsets import BlockOffsets
from memtune.runtime.blocks import BLOCK_PARSERS, BlockParser
from memtune.runtime.lines import TRIGGERS, parse_line, parse_reports
from memtune.runtime.model import (
    KINDS,
    GpuReading,
    Measurements,
    RankMeasurements,
    Reading,
    SnapshotSummary,
    SourceSummary,
)

CHUNK_SIZE = 8 << 20
FIRST_CHUNK_LINES = 4096  # per-iteration lines of a log's first chunk read one by one (warm-up)
SAMPLES_PER_CHUNK = 64
MAX_POINTS = 4096
PINNED_POINTS = 64  # the first points of every rank are never thinned away (warm-up)
BLOCK_WINDOW = 1 << 20  # the longest multi-line text read whole (a pretty-printed stats dump is ~12 KiB)
SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".pt", ".snapshot")


@dataclass
class _RankAcc:
    """Running state of one rank while the inputs stream past."""

    rank: int
    points: list[Reading] = field(default_factory=list)
    stride: int = 1
    skipped: int = 0
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    last_allocated: int | None = None
    last_reserved: int | None = None
    last_iteration: int | None = None
    last_max_allocated: int | None = None
    inactive: int | None = None
    device_used: int | None = None
    device_total: int | None = None
    retries: int | None = None
    ooms: int | None = None
    kinds: dict[str, None] = field(default_factory=dict)
    sources: dict[str, None] = field(default_factory=dict)
    parsed: int = 0
    resolution: int = 1

    def add(self, r: Reading) -> None:
        self.parsed += 1
        self.kinds[r.kind] = None
        self.sources[r.source] = None
        self.resolution = max(self.resolution, r.resolution_bytes)
        peak_a = _max(r.max_allocated_bytes, r.allocated_bytes)
        peak_r = _max(r.max_reserved_bytes, r.reserved_bytes)
        self.peak_allocated = _max(self.peak_allocated, peak_a)
        self.peak_reserved = _max(self.peak_reserved, peak_r)
        if r.allocated_bytes is not None:
            self.last_allocated = r.allocated_bytes
        if r.reserved_bytes is not None:
            self.last_reserved = r.reserved_bytes
        if r.max_allocated_bytes is not None:
            self.last_max_allocated = r.max_allocated_bytes
        if r.iteration is not None:
            self.last_iteration = r.iteration
        if r.inactive_split_bytes is not None:
            self.inactive = r.inactive_split_bytes
        if r.device_used_bytes is not None:
            self.device_used = r.device_used_bytes
        if r.device_total_bytes is not None:
            self.device_total = r.device_total_bytes
        self.retries = _max(self.retries, r.alloc_retries)
        self.ooms = _max(self.ooms, r.ooms)
        self._keep(r)

    def _keep(self, r: Reading) -> None:
        if len(self.points) < PINNED_POINTS:
            self.points.append(r)
            return
        self.skipped += 1
        if self.skipped < self.stride:
            return
        self.skipped = 0
        self.points.append(r)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[:PINNED_POINTS] + self.points[PINNED_POINTS::2]
            self.stride *= 2

    def freeze(self) -> RankMeasurements:
        return RankMeasurements(
            rank=self.rank,
            points=tuple(self.points),
            peak_allocated_bytes=self.peak_allocated,
            peak_reserved_bytes=self.peak_reserved,
            last_allocated_bytes=self.last_allocated,
            last_reserved_bytes=self.last_reserved,
            inactive_split_bytes=self.inactive,
            device_used_bytes=self.device_used,
            device_total_bytes=self.device_total,
            alloc_retries=self.retries,
            ooms=self.ooms,
            kinds=tuple(k for k in KINDS if k in self.kinds),
            sources=tuple(self.sources),
            readings_parsed=self.parsed,
            resolution_bytes=self.resolution,
        )


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


@dataclass
class _Collector:
    """Everything read so far, across sources."""

    ranks: dict[int, _RankAcc] = field(default_factory=dict)
    gpus: dict[int, Reading] = field(default_factory=dict)
    snapshots: list[SnapshotSummary] = field(default_factory=list)
    sources: list[SourceSummary] = field(default_factory=list)
    notes: dict[str, None] = field(default_factory=dict)

    def rank(self, rank: int) -> _RankAcc:
        acc = self.ranks.get(rank)
        if acc is None:
            acc = self.ranks[rank] = _RankAcc(rank)
        return acc

    def add(self, r: Reading) -> None:
        if r.rank is None and r.kind != "nvidia_smi":
            named = rank_from_name(r.source)
            if named is not None:
                r = replace(r, rank=named)
        if r.kind == "nvidia_smi":
            index = r.gpu if r.gpu is not None else len(self.gpus)
            old = self.gpus.get(index)
            if old is not None and old.source == r.source:
                # one file often holds the table and the CSV queries of the same moment: keep
                # what only the table says (model name, the processes on the GPU)
                r = replace(
                    r,
                    gpu_name=r.gpu_name or old.gpu_name,
                    processes=r.processes if r.processes is not None else old.processes,
                    processes_bytes=r.processes_bytes if r.processes_bytes is not None else old.processes_bytes,
                    device_total_bytes=r.device_total_bytes or old.device_total_bytes,
                )
            self.gpus[index] = r
            return
        rank = r.rank
        if rank is None and r.kind == "memory_summary" and r.gpu is not None:
            rank = r.gpu
            self.notes["a memory_summary without a rank label is taken as the rank of its device ID"] = None
        if rank is None:
            rank = 0
            self.notes[f"{r.kind} lines without a rank label are taken as rank 0 (what print_rank_0 prints)"] = None
        self.rank(rank).add(r)


@dataclass
class _SourceState:
    label: str
    kinds: dict[str, None] = field(default_factory=dict)
    memory_lines: int = 0
    readings: int = 0
    sampled: bool = False
    bytes_read: int = 0
    smi_sections: int = 0
    triggers: tuple[bytes, ...] = TRIGGERS  # narrowed to the families found in the first chunk


def read_measurements(paths: Sequence[str | Path], chunk_size: int = CHUNK_SIZE) -> Measurements:
    """Every memory figure in ``paths`` (logs plain or .gz, ``-`` for stdin, snapshot pickles).

    Raises InputError (one line) for a missing, binary or hostile input, and when nothing in
    any input is a memory measurement.
    """
    if not paths:
        raise InputError("give at least one FILE: a training log, nvidia-smi output or a memory snapshot")
    collector = _Collector()
    for raw in paths:
        label = str(raw)
        path = Path(label)
        if label != "-" and _is_snapshot(path):
            _read_snapshot(path, label, collector)
        else:
            _read_text(Source(label), collector, chunk_size)
    if not collector.ranks and not collector.gpus and not collector.snapshots:
        names = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
        raise InputError(
            f"{names}: no memory measurement found; expected Megatron report_memory lines "
            "('[Rank 0] (after 10 iterations) memory (MB) | allocated: ...'), Bridge memory lines, "
            "torch.cuda.memory_summary() or memory_stats() output, nvidia-smi output, or a memory snapshot pickle"
        )
    _join_gpus(collector)
    return Measurements(
        ranks=tuple(collector.ranks[r].freeze() for r in sorted(collector.ranks)),
        gpus=tuple(_gpu_reading(g, r) for g, r in sorted(collector.gpus.items())),
        snapshots=tuple(collector.snapshots),
        sources=tuple(collector.sources),
        notes=tuple(collector.notes),
    )


def _gpu_reading(gpu: int, r: Reading) -> GpuReading:
    return GpuReading(
        gpu=gpu,
        used_bytes=r.device_used_bytes or 0,
        total_bytes=r.device_total_bytes,
        name=r.gpu_name,
        processes_bytes=r.processes_bytes,
        source=r.source,
        line=r.line,
        processes=r.processes,
    )


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)(?![0-9])")


def rank_from_name(label: str) -> int | None:
    """``memory_stats_rank3.json``, ``rank-12.log``, ``snapshot_rank_0.pickle`` -> the rank:
    per-rank files are named so, and their texts often do not say whose they are."""
    m = _RANK_IN_NAME.search(Path(label).name.lower())
    return int(m.group(1)) if m else None


def _join_gpus(collector: _Collector) -> None:
    """Give each rank the nvidia-smi figure of its GPU: GPU i is rank i (one node, one GPU
    per rank, the torchrun default); with one GPU and one rank they are the same device."""
    if not collector.gpus or not collector.ranks:
        return
    ranks = sorted(collector.ranks)
    if len(collector.gpus) == 1 and len(ranks) == 1:
        pairs = [(ranks[0], next(iter(collector.gpus.values())))]
    else:
        pairs = [(r, collector.gpus[r]) for r in ranks if r in collector.gpus]
        if pairs:
            collector.notes["nvidia-smi GPU i is taken as rank i (one node, one GPU per rank)"] = None
    shared = [g for _, g in pairs if (g.processes or 0) > 1]
    if shared:
        collector.notes[
            f"GPU {shared[0].gpu} runs {shared[0].processes} processes: its nvidia-smi total is not one rank's, "
            "so memory outside PyTorch is not computed for it"
        ] = None
        pairs = [(r, g) for r, g in pairs if (g.processes or 0) <= 1]
    for rank, gpu in pairs:
        acc = collector.ranks[rank]
        if acc.device_used is None:
            acc.device_used = gpu.device_used_bytes
        if acc.device_total is None:
            acc.device_total = gpu.device_total_bytes
        acc.kinds["nvidia_smi"] = None


def _is_snapshot(path: Path) -> bool:
    if path.suffix.lower() in SNAPSHOT_SUFFIXES:
        return path.is_file()
    try:
        with path.open("rb") as handle:
            head = handle.read(2)
    except OSError:
        return False  # the text reader names the problem
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _read_snapshot(path: Path, label: str, collector: _Collector) -> None:
    from memtune.runtime.snapshot import read_snapshot, summarize

    value = read_snapshot(path, label)
    named = rank_from_name(label)
    summaries = summarize(value, label)
    if named is not None and len(summaries) == 1:
        summaries = [replace(summaries[0], rank=named)]
    collector.snapshots.extend(summaries)
    for s in summaries:
        reading = Reading(
            kind="snapshot",
            source=label,
            line=0,
            gpu=s.device,
            rank=named if named is not None and len(summaries) == 1 else s.device,
            label="snapshot",
            allocated_bytes=s.allocated_bytes,
            reserved_bytes=s.reserved_bytes,
        )
        collector.add(reading)
    if summaries and (named is None or len(summaries) > 1):
        collector.notes["a snapshot's device index is taken as its rank"] = None
    collector.sources.append(
        SourceSummary(label, ("snapshot",), 0, len(summaries), False, path.stat().st_size if path.exists() else 0)
    )


# ----------------------------------------------------------------------------- text


def _read_text(source: Source, collector: _Collector, chunk_size: int) -> None:
    state = _SourceState(source.label)
    buf = bytearray(chunk_size)
    carry = 0
    base_line = 1
    absolute = 0  # file offset of buf[0]
    first = True
    with TextStream(source) as stream:
        blocks = BlockOffsets(Path(source.name) if stream.plain_file else None, tuple(p.trigger for p in BLOCK_PARSERS))
        try:
            eof = False
            while not eof:
                if len(buf) - carry < chunk_size:
                    buf.extend(bytes(chunk_size - (len(buf) - carry)))
                with memoryview(buf) as view, view[carry : carry + chunk_size] as target:
                    got = stream.readinto(target)
                state.bytes_read += got
                valid = carry + got
                if not got:
                    eof = True
                    limit = valid
                else:
                    limit = buf.rfind(b"\n", 0, valid) + 1
                    if limit == 0:
                        if valid < 4 * chunk_size:
                            carry = valid
                            continue
                        limit = valid
                if limit == 0:
                    break
                region = bytes(buf[:limit])
                keep = _process_region(region, base_line, absolute, first, eof, state, collector, blocks)
                first = False
                if keep == 0 and not eof and valid >= BLOCK_WINDOW + chunk_size:
                    keep = region.find(b"\n") + 1 or limit  # a block that never ends: skip its first line
                base_line += region.count(b"\n", 0, keep)
                absolute += keep
                buf[0 : valid - keep] = buf[keep:valid]
                carry = valid - keep
        finally:
            blocks.close()
    collector.sources.append(
        SourceSummary(
            source=state.label,
            kinds=tuple(k for k in KINDS if k in state.kinds),
            memory_lines=state.memory_lines,
            readings=state.readings,
            sampled=state.sampled,
            bytes_read=state.bytes_read,
        )
    )


def _line_numbers(region: bytes, base_line: int, starts: Iterable[int]) -> dict[int, int]:
    """Line number of each start offset, counting newlines once across the sorted offsets."""
    numbers = {}
    line, pos = base_line, 0
    for start in sorted(set(starts)):
        line += region.count(b"\n", pos, start)
        pos = start
        numbers[start] = line
    return numbers


def _record(reading: Reading, state: _SourceState, collector: _Collector) -> None:
    if reading.kind == "nvidia_smi" and reading.label == "nvidia-smi -q":
        reading = replace(reading, gpu=state.smi_sections)
        state.smi_sections += 1
    state.kinds[reading.kind] = None
    state.readings += 1
    collector.add(reading)


def _process_region(
    region: bytes,
    base_line: int,
    absolute: int,
    first: bool,
    eof: bool,
    state: _SourceState,
    collector: _Collector,
    blocks: BlockOffsets,
) -> int:
    """Read the complete lines in ``region``; return the offset from which to carry text
    into the next chunk (``len(region)`` when nothing is carried)."""
    limit = len(region)
    keep = limit
    block_starts = blocks.hits(region, limit, absolute)
    consumed_until = 0
    if block_starts:
        numbers = _line_numbers(region, base_line, block_starts)
        for start in block_starts:
            if start < consumed_until:
                continue
            window_end = min(limit, start + BLOCK_WINDOW)
            lines = region[start:window_end].decode("utf-8", "replace").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            complete = eof or window_end - start >= BLOCK_WINDOW
            outcome = _parse_block(lines, state.label, numbers[start], complete)
            if outcome is None:
                keep = start
                break
            readings, used = outcome
            for reading in readings:
                _record(reading, state, collector)
            if readings:
                consumed_until = _advance_lines(region, start, used)
    _read_iteration_lines(region, keep, base_line, first, state, collector)
    return keep


def _advance_lines(region: bytes, start: int, count: int) -> int:
    pos = start
    for _ in range(count):
        nxt = region.find(b"\n", pos)
        if nxt < 0:
            return len(region)
        pos = nxt + 1
    return pos


def _parse_block(lines: list[str], source: str, line: int, complete: bool) -> tuple[list[Reading], int] | None:
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


def _read_iteration_lines(
    region: bytes, end: int, base_line: int, first: bool, state: _SourceState, collector: _Collector
) -> None:
    if first:
        hits = find_hits(region, TRIGGERS, end)
        found = tuple(t for t in TRIGGERS if region.find(t, 0, end) >= 0)
        if found:  # later chunks look only for the families this log prints
            state.triggers = found
        state.memory_lines += len(hits)
        if len(hits) <= FIRST_CHUNK_LINES:
            _parse_lines(region, hits, base_line, state, collector)
            return
        # warm-up lives at the start: read its lines one by one, then sample the rest
        _parse_lines(region, hits[:FIRST_CHUNK_LINES], base_line, state, collector)
        state.sampled = True
        rest = hits[FIRST_CHUNK_LINES]
        sample = [s for s in _sample_starts(region, end, collector, rest, state.triggers) if s >= rest]
        _parse_lines(region, sample, base_line, state, collector)
        return
    sample = _sample_starts(region, end, collector, 0, state.triggers)
    if not sample:
        return
    if len(set(sample)) < SAMPLES_PER_CHUNK // 2:
        # sparse (memory every N iterations): the sample already holds nearly every line; read them all
        hits = find_hits(region, state.triggers, end)
        state.memory_lines += len(hits)
        _parse_lines(region, hits, base_line, state, collector)
        return
    readings = _readings_at(region, sample, base_line, state.label)
    if _consistent(readings, collector):
        state.sampled = True
        for reading in readings:
            _record(reading, state, collector)
    else:
        hits = find_hits(region, state.triggers, end)
        state.memory_lines += len(hits)
        _parse_lines(region, hits, base_line, state, collector)


def _readings_at(region: bytes, starts: list[int], base_line: int, source: str) -> list[Reading]:
    numbers = _line_numbers(region, base_line, starts)
    out = []
    for start in sorted(set(starts)):
        end = region.find(b"\n", start)
        text = region[start : end if end >= 0 else len(region)].decode("utf-8", "replace")
        out.extend(parse_reports(text, source, numbers[start]))
    return out


def _parse_lines(region: bytes, starts: list[int], base_line: int, state: _SourceState, collector: _Collector) -> None:
    for reading in _readings_at(region, starts, base_line, state.label):
        _record(reading, state, collector)


def _line_start(region: bytes, pos: int) -> int:
    return region.rfind(b"\n", 0, pos) + 1


def _sample_starts(
    region: bytes, end: int, collector: _Collector, begin: int, triggers: tuple[bytes, ...]
) -> list[int]:
    """Evenly spaced memory lines plus, walking back from the end, the last line of every
    rank seen so far (so each rank's latest figures are always read)."""
    starts: list[int] = []
    for k in range(SAMPLES_PER_CHUNK):
        offset = begin + k * (end - begin) // SAMPLES_PER_CHUNK
        hits = [p for p in (region.find(t, offset, end) for t in triggers) if p >= 0]
        if hits:
            starts.append(_line_start(region, min(hits)))
    wanted = set(collector.ranks)
    budget = 4 * len(wanted) + 16
    pos = end
    while budget > 0 and pos > 0:
        hits = [p for p in (region.rfind(t, 0, pos) for t in triggers) if p >= 0]
        if not hits:
            break
        start = _line_start(region, max(hits))
        starts.append(start)
        line_end = region.find(b"\n", start)
        reading = parse_line(region[start : line_end if line_end >= 0 else end].decode("utf-8", "replace"), "", 0)
        if reading is not None and reading.rank is not None:
            wanted.discard(reading.rank)
        if not wanted:
            break
        pos = start
        budget -= 1
    return starts


def _consistent(readings: list[Reading], collector: _Collector) -> bool:
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
