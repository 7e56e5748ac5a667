"""Does the estimated run fit the GPU? One policy for every helper that answers it.

The verdict compares the **device view** of the most-loaded GPU (``MemoryEstimate.peak_bytes``:
the allocated peak, the caching allocator's reserve above it and the memory outside PyTorch -
what nvidia-smi shows and what the card runs out of) with the GPU's memory:

* ``DOES NOT FIT`` - the device view exceeds the GPU;
* ``BORDERLINE`` - it fits with less free memory than the band (10% of the GPU by default):
  inside the estimator's own spread on the device view (P90 |error| about 15% on the external
  nvidia-smi points) and within reach of allocator fragmentation;
* ``FITS`` - at least the band is left free.

``plan_memory --headroom`` defaults to the same band, so a run the estimate calls FITS is one the
planner would not change, and a BORDERLINE one is one it plans for. Data here, words in the
renderers: this module returns a value; ``commands/`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memtune.spec.fit_band import BORDERLINE_SHARE
from memtune.units import GIB

__all__ = ["BORDERLINE_SHARE", "FitVerdict", "fit_verdict"]
#: Which of the estimate's two views the verdict compares (see estimator.StageEstimate).
VERDICT_VIEW = "device"

FITS = "FITS"
BORDERLINE = "BORDERLINE"
DOES_NOT_FIT = "DOES NOT FIT"


@dataclass(frozen=True)
class FitVerdict:
    """The fit of ``needed_bytes`` (device view of the most-loaded GPU) on ``gpu_memory_bytes``."""

    status: str
    needed_bytes: int
    gpu_memory_bytes: int
    band_share: float = BORDERLINE_SHARE
    view: str = VERDICT_VIEW

    @property
    def headroom_bytes(self) -> int:
        """Free memory left at the peak (negative: short by this much)."""
        return self.gpu_memory_bytes - self.needed_bytes

    @property
    def headroom_share(self) -> float:
        return self.headroom_bytes / self.gpu_memory_bytes if self.gpu_memory_bytes else 0.0

    @property
    def fits(self) -> bool:
        return self.status != DOES_NOT_FIT

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "view": self.view,
            "needed_bytes": self.needed_bytes,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "headroom_bytes": self.headroom_bytes,
            "headroom_share": round(self.headroom_share, 4),
            "borderline_band_share": round(self.band_share, 4),
        }

    def sentence(self) -> str:
        """One line for people, with the figures behind the word.

        Every status opens with the peak itself ("needs 55.57 GiB"): the line is the one an agent
        quotes, and a line that gave only the headroom was quoted as the peak."""
        need, gpu, head = self.needed_bytes / GIB, self.gpu_memory_bytes / GIB, self.headroom_bytes / GIB
        basis = f"{self.view} view: allocated peak + allocator reserve + memory outside PyTorch"
        if self.status == DOES_NOT_FIT:
            return (
                f"DOES NOT FIT: needs {need:.2f} GiB on the most-loaded GPU ({basis}), GPU has {gpu:.1f} GiB "
                f"(short by {-head:.1f} GiB). Next: plan_memory.py with the same arguments."
            )
        if self.status == BORDERLINE:
            return (
                f"BORDERLINE: needs {need:.2f} GiB on the most-loaded GPU, {head:.1f} GiB "
                f"({self.headroom_share:.0%}) headroom of {gpu:.1f} GiB, under the {self.band_share:.0%} band "
                f"({basis}); the estimate's spread or allocator fragmentation can still OOM - set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or plan with plan_memory.py."
            )
        return (
            f"FITS: needs {need:.2f} GiB on the most-loaded GPU, {head:.1f} GiB ({self.headroom_share:.0%}) "
            f"headroom of {gpu:.1f} GiB ({basis})."
        )


def fit_verdict(needed_bytes: int, gpu_memory_bytes: int, band_share: float = BORDERLINE_SHARE) -> FitVerdict:
    """FITS / BORDERLINE / DOES NOT FIT for a device-view need on a GPU of ``gpu_memory_bytes``."""
    head = gpu_memory_bytes - needed_bytes
    if head < 0:
        status = DOES_NOT_FIT
    elif head < band_share * gpu_memory_bytes:
        status = BORDERLINE
    else:
        status = FITS
    return FitVerdict(status, int(needed_bytes), int(gpu_memory_bytes), band_share)
