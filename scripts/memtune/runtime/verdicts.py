"""What the measured figures mean, per rank: the figures people ask for and a verdict from a fixed list.

Figures (all bytes): the peaks, the reserve PyTorch holds beyond its peak allocation
(``reserved - allocated``: cached blocks that fragmentation keeps from being reused), the
memory outside PyTorch (``nvidia-smi used - reserved``: CUDA context, NCCL buffers, cuBLAS
workspaces) and the headroom to the card.

Verdict kinds (the JSON schema lists the same; every rank gets exactly one of the trend
kinds, and the condition kinds when they apply):

* trend: ``leak`` (allocated after each iteration keeps growing once warm-up is over),
  ``warming-up`` (too few reports after warm-up to tell), ``stable``, ``no-series`` (one
  reading, no iterations: nothing to say about a trend);
* condition: ``fragmentation`` (the reserve beyond the peak is a large share of what
  PyTorch reserved, or a snapshot's free space is split into small blocks),
  ``allocator-retries`` (cudaMalloc failed and the allocator flushed its cache and retried),
  ``near-capacity`` (peak reserved plus memory outside PyTorch within 5% of the card, or over it).

The thresholds are stated with each verdict's numbers, so an agent can quote them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from memtune.runtime.model import Measurements, RankMeasurements, Reading, SnapshotSummary
from memtune.units import GIB, MIB, human_bytes

TREND_KINDS = ("leak", "warming-up", "stable", "no-series")
CONDITION_KINDS = ("fragmentation", "allocator-retries", "near-capacity")
VERDICT_KINDS = TREND_KINDS + CONDITION_KINDS

#: Iterations that allocate for the first time (Adam moments at the first step, buffers,
#: the second iteration's steady working set): growth there is warm-up, not a leak.
WARMUP_ITERATIONS = 2
#: Reports after warm-up needed before a trend is judged.
MIN_TREND_POINTS = 4
#: Growth below this (or below 2 rounding units of the log) is noise, not a leak.
LEAK_MIN_BYTES = 64 * MIB
#: Reserve beyond the peak allocation that reads as fragmentation (share of reserved, and at least this much).
FRAGMENTATION_SHARE = 0.20
FRAGMENTATION_MIN_BYTES = 1 * GIB
#: Headroom to the card below this share of it is near capacity.
NEAR_CAPACITY_SHARE = 0.05


@dataclass(frozen=True)
class RankFigures:
    """The derived per-rank figures (bytes; shares are fractions of the stated whole)."""

    rank: int
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    reserved_unallocated_bytes: int | None  # peak reserved - peak allocated
    reserved_unallocated_share: float | None  # of peak reserved
    outside_pytorch_bytes: int | None  # device used - reserved (same moment when the source gives both)
    device_used_bytes: int | None
    limit_bytes: int | None  # the card: --gpu, else the device total the inputs report
    headroom_bytes: int | None  # limit - (peak reserved + outside PyTorch when known)
    headroom_share: float | None  # of the limit
    first_iteration: int | None
    last_iteration: int | None
    iterations_reported: int


@dataclass(frozen=True)
class Verdict:
    kind: str
    rank: int | None  # None: a snapshot not tied to a rank
    severity: str  # "error" | "warning" | "info"
    message: str
    evidence: dict[str, int | float | str | None] = field(default_factory=dict)


def iteration_series(rank: RankMeasurements) -> list[Reading]:
    """Readings that describe the state after an iteration, one per iteration, in order.

    Megatron also reports around checkpoint saves ("(before save_checkpoint for iteration
    K)"); when the log has "(after K iterations)" reports those are the series, because the
    checkpoint ones measure a different moment of the same iteration.
    """
    with_iteration = [p for p in rank.points if p.iteration is not None and p.allocated_bytes is not None]
    after = [
        p for p in with_iteration if p.label.startswith("(after") and "iteration" in p.label and "save" not in p.label
    ]
    chosen = after or with_iteration
    series: list[Reading] = []
    for p in chosen:
        if series and series[-1].iteration == p.iteration:
            series[-1] = p
        elif series and (p.iteration or 0) < (series[-1].iteration or 0):
            series = [p]  # the job started again (a new run appended to the log): judge the latest run
        else:
            series.append(p)
    return series


def figures(rank: RankMeasurements, gpu_limit_bytes: int | None) -> RankFigures:
    series = iteration_series(rank)
    unallocated = share = None
    if rank.peak_reserved_bytes is not None and rank.peak_allocated_bytes is not None:
        unallocated = max(0, rank.peak_reserved_bytes - rank.peak_allocated_bytes)
        share = unallocated / rank.peak_reserved_bytes if rank.peak_reserved_bytes else 0.0
    outside = None
    if rank.device_used_bytes is not None:
        reserved_then = _reserved_with_device(rank)
        if reserved_then is not None:
            outside = max(0, rank.device_used_bytes - reserved_then)
    limit = gpu_limit_bytes or rank.device_total_bytes
    headroom = headroom_share = None
    if limit and rank.peak_reserved_bytes is not None:
        headroom = limit - rank.peak_reserved_bytes - (outside or 0)
        headroom_share = headroom / limit
    return RankFigures(
        rank=rank.rank,
        peak_allocated_bytes=rank.peak_allocated_bytes,
        peak_reserved_bytes=rank.peak_reserved_bytes,
        reserved_unallocated_bytes=unallocated,
        reserved_unallocated_share=share,
        outside_pytorch_bytes=outside,
        device_used_bytes=rank.device_used_bytes,
        limit_bytes=limit,
        headroom_bytes=headroom,
        headroom_share=headroom_share,
        first_iteration=series[0].iteration if series else None,
        last_iteration=series[-1].iteration if series else None,
        iterations_reported=len(series),
    )


def _reserved_with_device(rank: RankMeasurements) -> int | None:
    """PyTorch's reserve at the moment the device figure was taken: the same reading when
    one source gave both (Megatron's "total device memory used"), else the latest reserve."""
    for p in reversed(rank.points):
        if p.device_used_bytes is not None and p.reserved_bytes is not None:
            return p.reserved_bytes
    return rank.last_reserved_bytes if rank.last_reserved_bytes is not None else rank.peak_reserved_bytes


def trend_verdict(rank: RankMeasurements) -> Verdict:
    series = iteration_series(rank)
    if len(series) < 2:
        only = series[0].label if series else (rank.points[-1].label if rank.points else "")
        return Verdict(
            "no-series",
            rank.rank,
            "info",
            f"rank {rank.rank}: one reading ({only or 'no iteration'}); a trend needs reports from several "
            "iterations (Megatron: --log-memory-interval N)",
        )
    post = [p for p in series if (p.iteration or 0) > WARMUP_ITERATIONS]
    first, last = series[0], series[-1]
    if len(post) < MIN_TREND_POINTS:
        growth = (last.allocated_bytes or 0) - (first.allocated_bytes or 0)
        return Verdict(
            "warming-up",
            rank.rank,
            "info",
            f"rank {rank.rank}: only {len(post)} report(s) after the first {WARMUP_ITERATIONS} iterations "
            f"(iterations {first.iteration}-{last.iteration}); allocated moved by {_fmt(growth)}: "
            "too early to tell a leak from warm-up",
            {"growth_bytes": growth, "from_iteration": first.iteration, "to_iteration": last.iteration},
        )
    values = [p.allocated_bytes or 0 for p in post]
    # Quarters of the iteration range, not of the reports: a huge log is read densely at its
    # start and sampled after, so equal counts would all come from the first iterations.
    low, high = post[0].iteration or 0, post[-1].iteration or 0
    width = max(1, high - low + 1)
    quarters: list[list[int]] = [[], [], [], []]
    centers: list[list[int]] = [[], [], [], []]
    for p in post:
        k = min(3, ((p.iteration or 0) - low) * 4 // width)
        quarters[k].append(p.allocated_bytes or 0)
        centers[k].append(p.iteration or 0)
    levels = [int(median(q)) for q in quarters if q]
    middles = [float(median(c)) for c in centers if c]
    growth = levels[-1] - levels[0]
    noise = max(LEAK_MIN_BYTES, 2 * rank.resolution_bytes)
    # A leak keeps growing: every quarter of the run above the one before. Warm-up that
    # ends early leaves the later quarters level; jitter leaves them unordered.
    rising = len(levels) >= 3 and all(b - a > rank.resolution_bytes for a, b in zip(levels, levels[1:], strict=False))
    # the rate between the first and last quarter's middles: a leak that starts after warm-up
    # is not diluted by the flat iterations before it
    span = middles[-1] - middles[0] if len(middles) > 1 else 0.0
    evidence: dict[str, int | float | str | None] = {
        "from_iteration": post[0].iteration,
        "to_iteration": post[-1].iteration,
        "start_allocated_bytes": levels[0],
        "end_allocated_bytes": levels[-1],
        "growth_bytes": growth,
        "reports_after_warmup": len(post),
    }
    if rising and growth > noise:
        per_iteration = growth / span if span > 0 else float(growth)
        total = values[-1] - values[0]
        evidence["growth_bytes"] = total
        evidence["growth_bytes_per_iteration"] = round(per_iteration, 1)
        return Verdict(
            "leak",
            rank.rank,
            "error",
            f"rank {rank.rank}: allocated memory after each iteration grows from {_fmt(values[0])} to "
            f"{_fmt(values[-1])} between iterations {post[0].iteration} and {post[-1].iteration} "
            f"(+{_fmt(total)}, ~{_fmt(int(per_iteration))} per iteration, higher in every quarter of the run): "
            "something keeps tensors alive across iterations (losses or outputs kept with their graph, "
            "a growing cache or list)",
            evidence,
        )
    spread = max(values) - min(values)
    evidence["spread_bytes"] = spread
    return Verdict(
        "stable",
        rank.rank,
        "info",
        f"rank {rank.rank}: allocated after each iteration stays within {_fmt(spread)} over iterations "
        f"{post[0].iteration}-{post[-1].iteration} ({len(post)} reports after warm-up): no leak",
        evidence,
    )


def condition_verdicts(rank: RankMeasurements, fig: RankFigures) -> list[Verdict]:
    out: list[Verdict] = []
    if (
        fig.reserved_unallocated_bytes is not None
        and fig.reserved_unallocated_share is not None
        and fig.reserved_unallocated_share >= FRAGMENTATION_SHARE
        and fig.reserved_unallocated_bytes >= FRAGMENTATION_MIN_BYTES
    ):
        out.append(
            Verdict(
                "fragmentation",
                rank.rank,
                "warning",
                f"rank {rank.rank}: PyTorch reserved {_fmt(fig.peak_reserved_bytes)} at peak but allocated at most "
                f"{_fmt(fig.peak_allocated_bytes)}: {_fmt(fig.reserved_unallocated_bytes)} "
                f"({fig.reserved_unallocated_share:.0%} of reserved) is cached but unused; set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to return it",
                {
                    "reserved_unallocated_bytes": fig.reserved_unallocated_bytes,
                    "reserved_unallocated_share": round(fig.reserved_unallocated_share, 4),
                    "threshold_share": FRAGMENTATION_SHARE,
                },
            )
        )
    idle = _idle_reserve_after_failure(rank)
    if idle is not None and not any(v.kind == "fragmentation" for v in out):
        unused, share = idle
        out.append(
            Verdict(
                "fragmentation",
                rank.rank,
                "warning",
                f"rank {rank.rank}: after the allocator failed ({rank.ooms or 0} OOM(s), {rank.alloc_retries or 0} "
                f"retr{'y' if rank.alloc_retries == 1 else 'ies'}), {_fmt(unused)} ({share:.0%} of reserved) was "
                "reserved but unallocated: free memory split into blocks too small for the request; set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                {
                    "reserved_unallocated_bytes": unused,
                    "reserved_unallocated_share": round(share, 4),
                    "threshold_share": FRAGMENTATION_SHARE,
                },
            )
        )
    if rank.alloc_retries:
        out.append(
            Verdict(
                "allocator-retries",
                rank.rank,
                "warning",
                f"rank {rank.rank}: {rank.alloc_retries} cudaMalloc retr{'y' if rank.alloc_retries == 1 else 'ies'}: "
                "the allocator ran out, freed its cache and tried again (slow, and one step from an OOM); "
                "fragmentation under memory pressure",
                {"alloc_retries": rank.alloc_retries},
            )
        )
    if fig.headroom_share is not None and fig.headroom_share < NEAR_CAPACITY_SHARE and fig.limit_bytes:
        used = fig.limit_bytes - (fig.headroom_bytes or 0)
        over = fig.headroom_bytes is not None and fig.headroom_bytes < 0
        out.append(
            Verdict(
                "near-capacity",
                rank.rank,
                "error" if over else "warning",
                f"rank {rank.rank}: peak reserved{' + outside PyTorch' if fig.outside_pytorch_bytes else ''} "
                f"{_fmt(used)} of {_fmt(fig.limit_bytes)} "
                + (
                    f"is over the card by {_fmt(-(fig.headroom_bytes or 0))}"
                    if over
                    else f"leaves {_fmt(fig.headroom_bytes)} ({fig.headroom_share:.1%})"
                )
                + f"; below {NEAR_CAPACITY_SHARE:.0%} headroom a longer sequence or fragmentation tips it into OOM",
                {
                    "headroom_bytes": fig.headroom_bytes,
                    "headroom_share": round(fig.headroom_share, 4),
                    "limit_bytes": fig.limit_bytes,
                    "threshold_share": NEAR_CAPACITY_SHARE,
                },
            )
        )
    return out


def _idle_reserve_after_failure(rank: RankMeasurements) -> tuple[int, float] | None:
    """(reserved - allocated, its share) now, when the allocator has failed or retried: the
    figure an OOM message calls "reserved by PyTorch but unallocated"."""
    if not (rank.ooms or rank.alloc_retries):
        return None
    if rank.last_reserved_bytes is None or rank.last_allocated_bytes is None or not rank.last_reserved_bytes:
        return None
    unused = rank.last_reserved_bytes - rank.last_allocated_bytes
    share = unused / rank.last_reserved_bytes
    if unused >= FRAGMENTATION_MIN_BYTES and share >= FRAGMENTATION_SHARE:
        return unused, share
    return None


def snapshot_verdicts(snapshot: SnapshotSummary) -> list[Verdict]:
    """A snapshot whose free reserve is split into blocks much smaller than the whole."""
    if snapshot.free_bytes < FRAGMENTATION_MIN_BYTES or not snapshot.reserved_bytes:
        return []
    share = snapshot.free_bytes / snapshot.reserved_bytes
    # Free reserve in one large block is a cache ready for the next step; split into blocks
    # far smaller than the total, it cannot serve a large request.
    if share < FRAGMENTATION_SHARE or snapshot.largest_free_block_bytes >= snapshot.free_bytes / 2:
        return []
    return [
        Verdict(
            "fragmentation",
            snapshot.rank if snapshot.rank is not None else snapshot.device,
            "warning",
            f"snapshot {snapshot.source} (device {snapshot.device}): {_fmt(snapshot.free_bytes)} ({share:.0%} of "
            f"{_fmt(snapshot.reserved_bytes)} reserved) is free inside {snapshot.segments} segments, in "
            f"{snapshot.free_blocks} blocks of which the largest is {_fmt(snapshot.largest_free_block_bytes)}: "
            "a request larger than that block needs new memory although this much is free"
            + ("" if snapshot.expandable_segments else "; expandable_segments:True lets segments grow instead"),
            {
                "free_bytes": snapshot.free_bytes,
                "largest_free_block_bytes": snapshot.largest_free_block_bytes,
                "reserved_unallocated_share": round(share, 4),
                "source": snapshot.source,
            },
        )
    ]


def all_verdicts(measurements: Measurements, gpu_limit_bytes: int | None) -> tuple[list[RankFigures], list[Verdict]]:
    """Figures and verdicts for every rank (trend first, then conditions), then snapshots."""
    figs: list[RankFigures] = []
    verdicts: list[Verdict] = []
    for rank in measurements.ranks:
        fig = figures(rank, gpu_limit_bytes)
        figs.append(fig)
        verdicts.append(trend_verdict(rank))
        verdicts.extend(condition_verdicts(rank, fig))
    for snapshot in measurements.snapshots:
        verdicts.extend(snapshot_verdicts(snapshot))
    return figs, verdicts


def _fmt(value: int | None) -> str:
    return human_bytes(value)
