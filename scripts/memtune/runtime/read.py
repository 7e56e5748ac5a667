"""Read every memory figure a run printed, from any number of logs, tables and snapshots.

``read_measurements(paths)`` is the one entry point (runtime_memory and trace_regression
both call it). A multi-GB, multi-rank log costs a bounded amount of memory and little more
time than grep needs to count its lines:

* the literal triggers of every format are searched with ``bytes.find`` (C speed) and only
  the lines that hold one are decoded;
* multi-line texts (memory_summary tables, memory_stats dumps, nvidia-smi output) are read
  whole from their first line;
* per-iteration lines (report_memory, Bridge, DeepSpeed, NeMo) are all parsed in small logs,
  and the first ``FIRST_CHUNK_LINES`` of every log (warm-up lives there). Past them, a chunk
  dense with memory lines is sampled: evenly spaced lines plus the last line of every rank.
  The peaks stay exact because ``max allocated`` / ``max reserved`` are running maxima that
  only grow, and the sample checks that: when a sampled peak or iteration number goes down
  (a reset, a restarted job appending to the same log), that chunk is parsed line by line.

Plain files of ``MAPPED_MIN_BYTES`` or more (with GNU grep present) are mapped, not copied:
one grep pass in a child process finds the tables' lines while this process samples the
memory lines in place, touching only the pages it reads and releasing each window after it.
Other inputs (stdin, .gz, UTF-16, smaller files) stream through 8 MiB chunks, a table that
straddles two chunks carried into the next one.

Each rank's series is thinned evenly past ``MAX_POINTS`` (the first points always kept),
which is more than a verdict or a plot needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from memtune.diagnose.log_reader import Source, TextStream
from memtune.errors import InputError
from memtune.runtime.block_offsets import BlockOffsets
from memtune.runtime.blocks import BLOCK_PARSERS
from memtune.runtime.collect import Collector, SourceState, gpu_reading, join_gpus, rank_from_name, record
from memtune.runtime.mapped import read_mapped
from memtune.runtime.model import Measurements, Reading, SourceSummary
from memtune.runtime.scan import BLOCK_WINDOW, process_region
from memtune.units import MIB

CHUNK_SIZE = 8 << 20
SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".pt", ".snapshot")
BARE_CSV_MAX_BYTES = 4096
MAPPED_MIN_BYTES = 64 << 20  # a plain file this large is mapped and sampled in place (see runtime/mapped.py)


def read_measurements(paths: Sequence[str | Path], chunk_size: int = CHUNK_SIZE) -> Measurements:
    """Every memory figure in ``paths`` (logs plain or .gz, ``-`` for stdin, snapshot pickles).

    Raises InputError (one line) for a missing, binary or hostile input, and when nothing in
    any input is a memory measurement.
    """
    if not paths:
        raise InputError("give at least one FILE: a training log, nvidia-smi output or a memory snapshot")
    collector = Collector()
    for raw in paths:
        label = str(raw)
        path = Path(label)
        if label != "-" and _is_snapshot(path):
            _read_snapshot(path, label, collector)
        elif label != "-" and _mappable(path):
            read_mapped(path, label, collector, chunk_size)
        else:
            _read_text(Source(label), collector, chunk_size)
    if not collector.ranks and not collector.gpus and not collector.snapshots:
        names = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
        raise InputError(
            f"{names}: no memory measurement found; expected Megatron report_memory lines "
            "('[Rank 0] (after 10 iterations) memory (MB) | allocated: ...'), Bridge memory lines, "
            "torch.cuda.memory_summary() or memory_stats() output, nvidia-smi output, or a memory snapshot pickle"
        )
    join_gpus(collector)
    return Measurements(
        ranks=tuple(collector.ranks[r].freeze() for r in sorted(collector.ranks)),
        gpus=tuple(gpu_reading(g, r) for g, r in sorted(collector.gpus.items())),
        snapshots=tuple(collector.snapshots),
        sources=tuple(collector.sources),
        notes=tuple(collector.notes),
    )


def _is_snapshot(path: Path) -> bool:
    if path.suffix.lower() in SNAPSHOT_SUFFIXES:
        return path.is_file()
    try:
        with path.open("rb") as handle:
            head = handle.read(2)
    except OSError:
        return False  # the text reader names the problem
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _read_snapshot(path: Path, label: str, collector: Collector) -> None:
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


def _read_text(source: Source, collector: Collector, chunk_size: int) -> None:
    state = SourceState(source.label)
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
                if first and len(region) <= BARE_CSV_MAX_BYTES:
                    state.whole = region
                keep = process_region(region, base_line, absolute, first, eof, state, collector, blocks)
                first = False
                if keep == 0 and not eof and valid >= BLOCK_WINDOW + chunk_size:
                    keep = region.find(b"\n") + 1 or limit  # a block that never ends: skip its first line
                base_line += region.count(b"\n", 0, keep)
                absolute += keep
                buf[0 : valid - keep] = buf[keep:valid]
                carry = valid - keep
        finally:
            blocks.close()
    if not state.readings and state.whole and len(state.whole) == state.bytes_read:
        _read_bare_csv(state.whole, state, collector)
    collector.sources.append(state.summary())


_BARE_ROW = re.compile(rb"^\s*(\d+)(?:\s*MiB)?\s*,\s*(\d+)(?:\s*MiB)?\s*$")


def _read_bare_csv(text: bytes, state: SourceState, collector: Collector) -> None:
    """A file holding only ``61335, 143771`` rows: the output of ``nvidia-smi
    --query-gpu=memory.used,memory.total --format=csv,noheader,nounits`` saved without the
    command. Nothing names the columns, so two-column rows are read as that query (the one
    people run for memory) only when every row has used <= total, and a note says so."""
    rows = [line for line in text.splitlines() if line.strip()]
    matches = [_BARE_ROW.match(line) for line in rows]
    if not rows or len(rows) > 64 or not all(matches):
        return
    pairs = [(int(m.group(1)), int(m.group(2))) for m in matches if m]
    if not all(used <= total and total > 0 for used, total in pairs):
        return
    for index, (used, total) in enumerate(pairs):
        record(
            Reading(
                kind="nvidia_smi",
                source=state.label,
                line=index + 1,
                gpu=index,
                label="nvidia-smi --query-gpu (no header)",
                device_used_bytes=used * MIB,
                device_total_bytes=total * MIB,
                resolution_bytes=MIB,
            ),
            state,
            collector,
        )
    collector.notes[
        f"{state.label}: rows without a header read as nvidia-smi --query-gpu=memory.used,memory.total "
        "(MiB, one row per GPU); keep the header or the command line to be sure"
    ] = None


def _mappable(path: Path) -> bool:
    """A large plain (not gzip, not UTF-16) regular file, with GNU grep to find its tables."""
    try:
        if not path.is_file() or path.stat().st_size < MAPPED_MIN_BYTES:
            return False
        with path.open("rb") as handle:
            head = handle.read(2)
    except OSError:
        return False
    from memtune.diagnose.grep_prefilter import choose

    return head not in (b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff") and choose(path, path.stat().st_size) == "grep"
