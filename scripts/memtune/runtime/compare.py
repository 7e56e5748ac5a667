"""Measured beside estimated, per pipeline stage, and which part explains the difference.

The estimator (memtune.estimate.estimator) predicts what each stage's GPU holds as two
numbers the run can be checked against: what ``torch.cuda.max_memory_allocated`` reports
(tensors) and the runtime overhead outside PyTorch (CUDA context, NCCL). It says nothing
about the allocator's cached reserve. So a gap between what the card holds and the
estimate splits into three measurable parts:

* **model**: measured peak allocated minus estimated allocated (the estimate of the
  model's own tensors is off: activations, a buffer it does not know about);
* **allocator reserve**: measured peak reserved minus measured peak allocated (memory the
  caching allocator holds but no tensor uses: fragmentation; the estimate has none);
* **outside PyTorch**: measured device use minus reserved, minus the estimated overhead
  (a bigger CUDA context, NCCL buffers, cuBLAS workspaces).

The part with the largest magnitude is named as the explanation. :func:`expectations` is the
only function that reads the estimate, so a different estimator view changes one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memtune.runtime.model import Measurements

PARTS = ("model", "allocator-reserve", "outside-pytorch")


@dataclass(frozen=True)
class StageExpectation:
    """What the estimator expects on one GPU of a pipeline stage (bytes)."""

    stage: int
    allocated_bytes: int  # max_memory_allocated: tensors at the step's peak
    outside_bytes: int  # runtime overhead the allocator never sees
    total_bytes: int


def expectations(estimate: Any) -> list[StageExpectation]:
    """Per-stage expectations from a ``memtune.estimate.estimator.MemoryEstimate``."""
    return [
        StageExpectation(
            stage=s.stage,
            allocated_bytes=int(s.allocated_bytes),
            outside_bytes=int(s.overhead),
            total_bytes=int(s.total_bytes),
        )
        for s in estimate.stages
    ]


@dataclass(frozen=True)
class StageComparison:
    stage: int
    ranks: tuple[int, ...]  # measured ranks on this stage
    estimated_allocated_bytes: int
    measured_allocated_bytes: int | None  # max over the stage's ranks
    measured_reserved_bytes: int | None
    estimated_outside_bytes: int
    measured_outside_bytes: int | None
    estimated_total_bytes: int
    model_gap_bytes: int | None  # measured allocated - estimated allocated
    allocator_reserve_bytes: int | None  # measured reserved - measured allocated (the estimate has none)
    outside_gap_bytes: int | None  # measured outside PyTorch - estimated overhead
    gap_bytes: int | None  # the sum of the known parts
    explains: str | None  # the part with the largest magnitude (PARTS), None without a measurement
    model_error_share: float | None  # model_gap / estimated allocated


def stage_of_rank(rank: int, world_size: int, pp: int) -> int | None:
    """Megatron's default rank order (tp-cp-ep-dp-pp) puts pipeline parallelism outermost:
    ranks [k * world/pp, (k+1) * world/pp) form stage k."""
    if rank >= world_size or pp < 1:
        return None
    return rank // max(1, world_size // pp)


def compare(
    measurements: Measurements, estimate: Any, world_size: int, pp: int
) -> tuple[list[StageComparison], list[str]]:
    """Comparison rows for every stage with at least one measured rank, and notes."""
    notes: list[str] = []
    by_stage: dict[int, list[int]] = {}
    for rank in measurements.ranks:
        stage = stage_of_rank(rank.rank, world_size, pp)
        if stage is None:
            notes.append(f"rank {rank.rank} is outside the configured world size {world_size}: not compared")
            continue
        by_stage.setdefault(stage, []).append(rank.rank)
    if pp > 1:
        notes.append(
            f"ranks mapped to pipeline stages by Megatron's default order (pipeline outermost): "
            f"{max(1, world_size // pp)} consecutive ranks per stage"
        )
    rows: list[StageComparison] = []
    for exp in expectations(estimate):
        ranks = by_stage.get(exp.stage, [])
        if not ranks:
            continue
        measured = [measurements.rank(r) for r in ranks]
        allocs = [m.peak_allocated_bytes for m in measured if m and m.peak_allocated_bytes is not None]
        reserves = [m.peak_reserved_bytes for m in measured if m and m.peak_reserved_bytes is not None]
        outsides = []
        for m in measured:
            if m and m.device_used_bytes is not None:
                reserved_now = m.last_reserved_bytes if m.last_reserved_bytes is not None else m.peak_reserved_bytes
                if reserved_now is not None:
                    outsides.append(max(0, m.device_used_bytes - reserved_now))
        alloc = max(allocs) if allocs else None
        reserved = max(reserves) if reserves else None
        outside = max(outsides) if outsides else None
        model_gap = alloc - exp.allocated_bytes if alloc is not None else None
        reserve_gap = max(0, reserved - alloc) if reserved is not None and alloc is not None else None
        outside_gap = outside - exp.outside_bytes if outside is not None else None
        parts = {"model": model_gap, "allocator-reserve": reserve_gap, "outside-pytorch": outside_gap}
        known = {k: v for k, v in parts.items() if v is not None}
        rows.append(
            StageComparison(
                stage=exp.stage,
                ranks=tuple(ranks),
                estimated_allocated_bytes=exp.allocated_bytes,
                measured_allocated_bytes=alloc,
                measured_reserved_bytes=reserved,
                estimated_outside_bytes=exp.outside_bytes,
                measured_outside_bytes=outside,
                estimated_total_bytes=exp.total_bytes,
                model_gap_bytes=model_gap,
                allocator_reserve_bytes=reserve_gap,
                outside_gap_bytes=outside_gap,
                gap_bytes=sum(known.values()) if known else None,
                explains=max(known, key=lambda k: abs(known[k])) if known else None,
                model_error_share=(model_gap / exp.allocated_bytes)
                if model_gap is not None and exp.allocated_bytes
                else None,
            )
        )
    return rows, notes
