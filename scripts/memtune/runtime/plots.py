"""The two charts the helpers draw: measured memory per rank, and the estimate's stages.

Kept apart from :mod:`memtune.runtime.svg` (which only knows lines, bars and text) so the
choice of what to show is in one small place: allocated after each iteration per rank
(the curve a leak bends), the reserved curve of the rank that reserves most (what the card
must hold), and the card's limit; for an estimate, each stage's components stacked.
"""

from __future__ import annotations

from typing import Any

from memtune.runtime.model import Measurements
from memtune.runtime.svg import line_chart, stacked_bars
from memtune.runtime.verdicts import iteration_series
from memtune.units import GIB

MAX_RANK_LINES = 12


def runtime_chart(measurements: Measurements, limit_bytes: int | None) -> str:
    """Memory per rank over iterations; per-rank bars when the inputs hold no iteration series."""
    ranked = sorted(measurements.ranks, key=lambda r: -(r.peak_reserved_bytes or r.peak_allocated_bytes or 0))
    with_series = [r for r in ranked if len(iteration_series(r)) >= 2]
    if not with_series:
        bars = []
        for r in sorted(ranked[:24], key=lambda r: r.rank):
            allocated = r.peak_allocated_bytes or 0
            reserved = r.peak_reserved_bytes or allocated
            outside = max(0, (r.device_used_bytes or 0) - reserved) if r.device_used_bytes else 0
            bars.append(
                (
                    f"rank {r.rank}",
                    [
                        ("peak allocated", allocated),
                        ("reserved, unused", max(0, reserved - allocated)),
                        ("outside PyTorch", outside),
                    ],
                )
            )
        return stacked_bars("Measured peak memory per rank", bars, limit_bytes, x_label="rank")
    series: list[tuple[str, list[tuple[float, int]]]] = []
    for r in sorted(with_series[:MAX_RANK_LINES], key=lambda r: r.rank):
        points = [(float(p.iteration or 0), p.allocated_bytes or 0) for p in iteration_series(r)]
        series.append((f"rank {r.rank} allocated", points))
    top = with_series[0]
    top_reserved: list[tuple[float, int]] = [
        (float(p.iteration or 0), p.reserved_bytes) for p in iteration_series(top) if p.reserved_bytes is not None
    ]
    if top_reserved:
        series.append((f"rank {top.rank} reserved", top_reserved))
    title = "Memory after each iteration"
    if len(with_series) > MAX_RANK_LINES:
        title += f" ({MAX_RANK_LINES} of {len(with_series)} ranks: highest peaks)"
    return line_chart(title, series, limit_bytes)


def estimate_chart(estimate: Any, limit_bytes: int | None, model_name: str = "") -> str:
    """Each pipeline stage's estimated components (one GPU of the stage) against the limit."""
    bars = []
    for stage in estimate.stages:
        parts = [(name.replace("_", " "), int(value)) for name, value in stage.components().items() if value]
        bars.append((f"stage {stage.stage}", parts))
    peak = estimate.peak_bytes / GIB
    title = f"Estimated memory per GPU{' - ' + model_name if model_name else ''} (peak {peak:.1f} GiB)"
    return stacked_bars(title, bars, limit_bytes)
