"""Gather readings per rank while the inputs stream past: running peaks and last values,
each rank's series thinned evenly past ``MAX_POINTS`` (the first points always kept), and the
nvidia-smi figures joined to the ranks at the end.

Every reader of :mod:`memtune.runtime.read` (streamed, mapped, snapshot) hands its readings
to one :class:`Collector` through :func:`record`, so the per-rank arithmetic lives once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from memtune.runtime.lines import TRIGGERS
from memtune.runtime.model import (
    KINDS,
    GpuReading,
    RankMeasurements,
    Reading,
    SnapshotSummary,
    SourceSummary,
)

MAX_POINTS = 4096
PINNED_POINTS = 64  # the first points of every rank are never thinned away (warm-up)


@dataclass
class RankSeries:
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
class Collector:
    """Everything read so far, across sources."""

    ranks: dict[int, RankSeries] = field(default_factory=dict)
    gpus: dict[int, Reading] = field(default_factory=dict)
    snapshots: list[SnapshotSummary] = field(default_factory=list)
    sources: list[SourceSummary] = field(default_factory=list)
    notes: dict[str, None] = field(default_factory=dict)

    def rank(self, rank: int) -> RankSeries:
        acc = self.ranks.get(rank)
        if acc is None:
            acc = self.ranks[rank] = RankSeries(rank)
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
class SourceState:
    label: str
    kinds: dict[str, None] = field(default_factory=dict)
    memory_lines: int = 0
    readings: int = 0
    sampled: bool = False
    bytes_read: int = 0
    smi_sections: int = 0
    triggers: tuple[bytes, ...] = TRIGGERS  # narrowed to the families found in the first chunk
    whole: bytes = b""  # a small input's whole text, for the headerless-CSV fallback

    def summary(self) -> SourceSummary:
        """What was read from this source, for the report's list of inputs."""
        return SourceSummary(
            source=self.label,
            kinds=tuple(k for k in KINDS if k in self.kinds),
            memory_lines=self.memory_lines,
            readings=self.readings,
            sampled=self.sampled,
            bytes_read=self.bytes_read,
        )


def record(reading: Reading, state: SourceState, collector: Collector) -> None:
    if reading.kind == "nvidia_smi" and reading.label == "nvidia-smi -q":
        reading = replace(reading, gpu=state.smi_sections)
        state.smi_sections += 1
    state.kinds[reading.kind] = None
    state.readings += 1
    collector.add(reading)


def gpu_reading(gpu: int, r: Reading) -> GpuReading:
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


def join_gpus(collector: Collector) -> None:
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
