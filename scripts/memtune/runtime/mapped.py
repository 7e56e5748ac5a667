"""Read a large plain log in place: mapped, not copied, its tables found by GNU grep.

One grep pass in a child process finds the tables' lines while this process samples the
memory lines from the mapping, touching only the pages it reads and releasing each window
after it. :mod:`memtune.runtime.read` decides which files come here (``MAPPED_MIN_BYTES``).
"""

from __future__ import annotations

import mmap
from dataclasses import replace
from pathlib import Path

from memtune.errors import InputError
from memtune.runtime.block_offsets import BlockOffsets
from memtune.runtime.blocks import BLOCK_PARSERS
from memtune.runtime.collect import Collector, SourceState, record
from memtune.runtime.scan import (
    BLOCK_WINDOW,
    advance_lines,
    line_numbers,
    parse_block,
    read_iteration_lines,
    trigger_lines,
)

MAPPED_WINDOW_CHUNKS = 4  # a mapped file is sampled in windows of this many chunks after the first
#: What grep looks for in a mapped file: the tables a training log prints anywhere (a summary
#: at an OOM, nvidia-smi at start-up). Two long literals cost grep almost nothing; the other
#: formats (memory_stats dumps, nvidia-smi CSV and -q), which come as files of their own, are
#: looked for in the first chunk of a mapped file, and everywhere in every other input.
MAPPED_GREP_TRIGGERS = (b"PyTorch CUDA memory summary", b"NVIDIA-SMI ")


def read_mapped(path: Path, label: str, collector: Collector, chunk_size: int) -> None:
    """A large plain log, read in place: its tables from GNU grep's offsets (one pass in a
    child process, in parallel), its per-iteration lines chunk by chunk from the mapped
    file, touching only the pages a sample needs (each chunk's pages are released after it).
    Only the first chunk is read with line numbers; readings past it carry line 0 (unknown)."""
    state = SourceState(label)
    with path.open("rb") as handle:
        try:
            mm = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise InputError(
                f"{label}: cannot map the file ({exc}); pipe it in instead: cat {label} | runtime_memory.py -"
            ) from exc
    with mm:
        size = len(mm)
        if b"\x00" in mm[: 64 << 10]:
            raise InputError(
                f"{label}: looks like a binary file (NUL bytes), not a text log; pass the training log (plain or .gz)"
            )
        # grep looks for the tables in a child process while this one samples the memory lines
        blocks = BlockOffsets(path, MAPPED_GREP_TRIGGERS, fixed=True)
        early: list[tuple[int, int]] = []
        try:
            state.bytes_read = size
            pos = 0
            first = True
            window = chunk_size * MAPPED_WINDOW_CHUNKS
            while pos < size:
                end = min(size, pos + (chunk_size if first else window))
                if end < size:
                    newline = mm.find(b"\n", end)
                    end = size if newline < 0 else newline + 1
                if first:
                    region = mm[pos:end]
                    read_iteration_lines(region, len(region), 1, True, state, collector)
                    others = tuple(p.trigger for p in BLOCK_PARSERS if p.trigger not in MAPPED_GREP_TRIGGERS)
                    starts = trigger_lines(region, others, 0, len(region))
                    early = sorted(line_numbers(region, 1, starts).items())
                else:
                    read_iteration_lines(mm, end, 0, False, state, collector, begin=pos, numbered=False)
                _release(mm, pos, end)
                first = False
                pos = end
            # grep gives offsets, not line numbers (counting lines would cost it a full pass):
            # a table found past the first chunk has line 0, unknown
            numbered = dict(early)
            hits = sorted({**{o: 0 for o in (blocks.all_hits() if blocks.by_grep else [])}, **numbered}.items())
        finally:
            blocks.close()
        # Tables are applied after the memory lines: they are few (often one, at an OOM at the end).
        consumed_until = 0
        for offset, line in hits:
            if offset < consumed_until:
                continue
            text = mm[offset : min(size, offset + BLOCK_WINDOW)].decode("utf-8", "replace").split("\n")
            outcome = parse_block(text, label, line, True)
            if outcome and outcome[0]:
                for reading in outcome[0]:
                    record(reading if line else replace(reading, line=0), state, collector)
                consumed_until = advance_lines(mm, offset, outcome[1])
    collector.sources.append(state.summary())


def _release(mm: mmap.mmap, start: int, end: int) -> None:
    """Drop the chunk's pages from this process (they stay in the page cache): keeps the
    resident size at a chunk or so whatever the file's size."""
    advise = getattr(mm, "madvise", None)
    dontneed = getattr(mmap, "MADV_DONTNEED", None)
    if advise is None or dontneed is None:
        return
    page = mmap.PAGESIZE
    first = start - start % page
    try:
        advise(dontneed, first, max(0, end - first))
    except (OSError, ValueError):
        pass
