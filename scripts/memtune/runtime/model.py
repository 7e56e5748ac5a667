"""What a run measured, as frozen data: one reading, one rank's series, all of it.

Every reader (log lines, summary tables, stats dumps, nvidia-smi, snapshots) turns its text
into :class:`Reading` values, and :mod:`memtune.runtime.read` gathers them per rank into
:class:`Measurements`. Keeping the shapes here, apart from the parsers, is what lets
trace_regression and the verdicts depend on the figures without depending on how a figure
was spelled in the log. All sizes are bytes (``int``); a figure the source did not give is
``None``, never 0, because "not measured" and "nothing allocated" mean different things.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The formats a reading can come from (``Reading.kind``; the JSON's ``formats``).
KINDS = (
    "report_memory",  # Megatron-LM report_memory: "[Rank N] (after K iterations) memory (MB) | allocated: ..."
    "bridge_memory",  # Megatron Bridge: "[Rank N] (after K iterations) memory (GB) | mem-allocated-gigabytes: ..."
    "deepspeed_memory",  # DeepSpeed see_memory_usage: "MA 1.2 GB  Max_MA 2.3 GB  CA 3.4 GB  Max_CA 4 GB"
    "nemo_memory",  # NeMo 2 step lines: "... | max_memory_reserved: 57466159104 | max_memory_allocated: 53930270720 | ..."
    "memory_summary",  # torch.cuda.memory_summary() table
    "memory_stats",  # torch.cuda.memory_stats() printed dict, OrderedDict or JSON
    "nvidia_smi",  # nvidia-smi table, --query-gpu CSV, or -q "FB Memory Usage"
    "snapshot",  # torch.cuda.memory._dump_snapshot pickle
)


@dataclass(frozen=True)
class Reading:
    """One observation of one rank (or one GPU, for nvidia-smi) at one moment.

    ``allocated_bytes``/``reserved_bytes`` are the current values when it was printed;
    ``max_*`` the allocator's running peaks (since start or the last reset_peak_memory_stats).
    ``device_used_bytes`` is what the driver counts for the whole device (nvidia-smi used, or
    Megatron's ``total device memory used``): PyTorch's reserve plus memory outside PyTorch.
    """

    kind: str
    source: str  # file label as given
    line: int  # 1-based line where the reading starts (0: a binary snapshot)
    rank: int | None = None  # global rank when the text names one
    gpu: int | None = None  # device index (nvidia-smi GPU, memory_summary "device ID", snapshot device)
    iteration: int | None = None  # "(after K iterations)", "... for iteration K"
    label: str = ""  # what the run printed before "memory": "(after 10 iterations)", "(before save_checkpoint ...)"
    allocated_bytes: int | None = None
    max_allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    max_reserved_bytes: int | None = None
    inactive_split_bytes: int | None = None  # non-releasable: split blocks that cannot serve a bigger request
    device_used_bytes: int | None = None
    device_total_bytes: int | None = None
    alloc_retries: int | None = None  # cudaMalloc retries (allocator flushed its cache and tried again)
    ooms: int | None = None  # CUDA OOMs the allocator counted
    gpu_name: str | None = None
    processes_bytes: int | None = None  # nvidia-smi: sum of the per-process "GPU Memory Usage" column
    processes: int | None = None  # nvidia-smi: compute processes listed on this GPU
    resolution_bytes: int = 1  # the unit the source rounded to (1 MiB for "39779 MiB"), so comparisons allow it


@dataclass(frozen=True)
class FrameGroup:
    """Live allocations of a snapshot grouped by the frame that made them."""

    frame: str  # "file.py:123 function", or "(no stack recorded)"
    bytes: int
    allocations: int
    largest_bytes: int


@dataclass(frozen=True)
class SnapshotSummary:
    """What a memory snapshot shows about the allocator's state on one device."""

    source: str
    device: int
    segments: int
    reserved_bytes: int  # sum of segment sizes
    allocated_bytes: int  # sum of live (active) blocks
    free_bytes: int  # reserved but not allocated: cached free blocks inside segments
    largest_free_block_bytes: int
    free_blocks: int
    expandable_segments: bool | None
    top_allocations: tuple[FrameGroup, ...]
    trace_entries: int  # device_traces events (history recorded with _record_memory_history)
    rank: int | None = None  # the rank its file name gives (snapshot_rank3.pickle); else its device is used


@dataclass(frozen=True)
class RankMeasurements:
    """Everything measured for one rank, from every source that named it.

    ``points`` are the readings in log order with an iteration or a label (bounded: a huge
    log keeps an evenly thinned series, the first warm-up points always included); the peaks
    are over every reading that was parsed, not only the kept points.
    """

    rank: int
    points: tuple[Reading, ...]
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    last_allocated_bytes: int | None
    last_reserved_bytes: int | None
    inactive_split_bytes: int | None
    device_used_bytes: int | None  # nvidia-smi (or Megatron's device figure) for this rank's GPU
    device_total_bytes: int | None
    alloc_retries: int | None
    ooms: int | None
    kinds: tuple[str, ...]  # formats this rank's readings came from
    sources: tuple[str, ...]
    readings_parsed: int  # readings parsed for this rank (every one in small logs; a sample in huge ones)
    resolution_bytes: int = 1


@dataclass(frozen=True)
class GpuReading:
    """One GPU as nvidia-smi reported it (the last reading per GPU index)."""

    gpu: int
    used_bytes: int
    total_bytes: int | None
    name: str | None
    processes_bytes: int | None  # sum of the per-process "GPU Memory Usage" column, when listed
    source: str
    line: int
    processes: int | None = None  # compute processes listed on it (more than one: the GPU is shared)


@dataclass(frozen=True)
class SourceSummary:
    """What one input held."""

    source: str
    kinds: tuple[str, ...]
    memory_lines: int  # per-iteration memory lines (report_memory, Bridge, DeepSpeed) found where every line was read; a sampled file counts only those
    readings: int  # readings parsed from it
    sampled: bool  # True when the file was too large to parse every memory line (see read.py)
    bytes_read: int


@dataclass(frozen=True)
class Measurements:
    """All inputs together: per-rank figures, nvidia-smi per GPU, snapshots, and notes."""

    ranks: tuple[RankMeasurements, ...]
    gpus: tuple[GpuReading, ...]
    snapshots: tuple[SnapshotSummary, ...]
    sources: tuple[SourceSummary, ...]
    notes: tuple[str, ...] = field(default=())

    def rank(self, rank: int) -> RankMeasurements | None:
        for r in self.ranks:
            if r.rank == rank:
                return r
        return None

    @property
    def peak_allocated_bytes(self) -> int | None:
        values = [r.peak_allocated_bytes for r in self.ranks if r.peak_allocated_bytes is not None]
        return max(values) if values else None

    @property
    def peak_reserved_bytes(self) -> int | None:
        values = [r.peak_reserved_bytes for r in self.ranks if r.peak_reserved_bytes is not None]
        return max(values) if values else None

    @property
    def kinds(self) -> tuple[str, ...]:
        seen = dict.fromkeys(k for s in self.sources for k in s.kinds)
        return tuple(k for k in KINDS if k in seen)
