"""Two measurements of a run, before and after a change: what grew, on which rank, by how much.

A CI gate has to answer "did memory regress?" from two logs without a human reading them.
The answer is per rank because ranks differ (pipeline stage 0 holds the most activations; one
MoE rank can take the hot experts), and the job fails on its worst rank, so both the
per-rank deltas and the change of the worst rank are reported. The figure compared is the
allocator's peak *reserved* memory when both sides measured it (that is what the CUDA driver
must grant, and what runs out), else peak allocated, else what nvidia-smi saw used.

A change within the sources' rounding (Megatron prints MB with one or two decimals; Bridge
prints GB with two) is never a regression, whatever the threshold.

Inputs are :class:`memtune.runtime.model.Measurements` from E1's reader; nothing here parses.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.runtime.model import Measurements, RankMeasurements

#: Figures compared per rank (RankMeasurements attribute names), in the order shown.
FIGURES = (
    "peak_reserved_bytes",
    "peak_allocated_bytes",
    "last_reserved_bytes",
    "last_allocated_bytes",
    "inactive_split_bytes",
    "device_used_bytes",
)
#: Which figure decides a regression: the first one both sides measured.
HEADLINE_ORDER = ("peak_reserved_bytes", "peak_allocated_bytes", "device_used_bytes")


@dataclass(frozen=True)
class Threshold:
    """Growth that counts as a regression: ``share`` of A's figure, or ``size`` bytes."""

    share: float | None = None
    size: int | None = None

    def bytes_of(self, base: int) -> int:
        return int(base * self.share) if self.share is not None else int(self.size or 0)


@dataclass(frozen=True)
class FigureDelta:
    figure: str
    a_bytes: int | None
    b_bytes: int | None

    @property
    def delta_bytes(self) -> int | None:
        return None if self.a_bytes is None or self.b_bytes is None else self.b_bytes - self.a_bytes


@dataclass(frozen=True)
class RankDelta:
    """One rank on both sides; ``figure`` is the headline figure the verdict uses (None when
    the two sides share no peak figure for this rank)."""

    rank: int
    figures: tuple[FigureDelta, ...]
    figure: str | None
    a_bytes: int | None
    b_bytes: int | None
    threshold_bytes: int | None
    resolution_bytes: int

    @property
    def delta_bytes(self) -> int | None:
        return None if self.a_bytes is None or self.b_bytes is None else self.b_bytes - self.a_bytes

    @property
    def regressed(self) -> bool:
        delta = self.delta_bytes
        if delta is None or self.threshold_bytes is None:
            return False
        return delta > max(self.threshold_bytes, self.resolution_bytes)


@dataclass(frozen=True)
class MeasuredDiff:
    """Every rank both sides measured, the ranks only one side has, and the worst-rank change."""

    ranks: tuple[RankDelta, ...]
    only_in_a: tuple[int, ...]
    only_in_b: tuple[int, ...]
    figure: str | None  # headline figure of the worst-rank comparison
    peak_a: int | None  # worst rank of A by that figure
    peak_b: int | None
    threshold_bytes: int | None
    resolution_bytes: int

    @property
    def delta_bytes(self) -> int | None:
        return None if self.peak_a is None or self.peak_b is None else self.peak_b - self.peak_a

    @property
    def regressed_ranks(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.regressed)

    @property
    def peak_regressed(self) -> bool:
        delta = self.delta_bytes
        if delta is None or self.threshold_bytes is None:
            return False
        return delta > max(self.threshold_bytes, self.resolution_bytes)

    @property
    def regressed(self) -> bool:
        """B is worse beyond the threshold on its worst rank or on any rank both measured."""
        return self.peak_regressed or bool(self.regressed_ranks)


def _by_rank(m: Measurements) -> dict[int, RankMeasurements | None]:
    """Ranks of a measurement; GPUs seen only by nvidia-smi stand in as ranks (GPU i = rank i)."""
    out: dict[int, RankMeasurements | None] = {r.rank: r for r in m.ranks}
    for gpu in m.gpus:
        out.setdefault(gpu.gpu, None)
    return out


def _figure(m: Measurements, rank: int, rm: RankMeasurements | None, name: str) -> int | None:
    if rm is not None:
        value: int | None = getattr(rm, name)
        if value is not None:
            return value
    if name == "device_used_bytes":
        return next((g.used_bytes for g in m.gpus if g.gpu == rank), None)
    return None


def _headline(pairs: list[tuple[int | None, int | None, str]]) -> tuple[str | None, int | None, int | None]:
    for name in HEADLINE_ORDER:
        for a, b, figure in pairs:
            if figure == name and a is not None and b is not None:
                return name, a, b
    return None, None, None


def compare(a: Measurements, b: Measurements, threshold: Threshold) -> MeasuredDiff:
    """Per-rank deltas of every figure and the worst-rank change, B against A."""
    ranks_a, ranks_b = _by_rank(a), _by_rank(b)
    common = sorted(set(ranks_a) & set(ranks_b))
    rank_deltas: list[RankDelta] = []
    for rank in common:
        ra, rb = ranks_a[rank], ranks_b[rank]
        figures = tuple(FigureDelta(name, _figure(a, rank, ra, name), _figure(b, rank, rb, name)) for name in FIGURES)
        figure, fa, fb = _headline([(f.a_bytes, f.b_bytes, f.figure) for f in figures])
        resolution = max(ra.resolution_bytes if ra else 1, rb.resolution_bytes if rb else 1)
        rank_deltas.append(
            RankDelta(
                rank=rank,
                figures=figures,
                figure=figure,
                a_bytes=fa,
                b_bytes=fb,
                threshold_bytes=None if fa is None else threshold.bytes_of(fa),
                resolution_bytes=resolution,
            )
        )
    figure, peak_a, peak_b = _worst(a, b, ranks_a, ranks_b)
    resolution = max([1, *(r.resolution_bytes for r in (*a.ranks, *b.ranks))])
    return MeasuredDiff(
        ranks=tuple(rank_deltas),
        only_in_a=tuple(sorted(set(ranks_a) - set(ranks_b))),
        only_in_b=tuple(sorted(set(ranks_b) - set(ranks_a))),
        figure=figure,
        peak_a=peak_a,
        peak_b=peak_b,
        threshold_bytes=None if peak_a is None else threshold.bytes_of(peak_a),
        resolution_bytes=resolution,
    )


def _worst(
    a: Measurements,
    b: Measurements,
    ranks_a: dict[int, RankMeasurements | None],
    ranks_b: dict[int, RankMeasurements | None],
) -> tuple[str | None, int | None, int | None]:
    """The headline figure both sides have on some rank, and each side's largest value of it
    over all its ranks (the rank that runs out first need not be the same rank on both)."""
    for name in HEADLINE_ORDER:
        va = [v for r, rm in ranks_a.items() if (v := _figure(a, r, rm, name)) is not None]
        vb = [v for r, rm in ranks_b.items() if (v := _figure(b, r, rm, name)) is not None]
        if va and vb:
            return name, max(va), max(vb)
    return None, None, None
