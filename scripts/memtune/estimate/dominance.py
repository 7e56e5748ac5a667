"""Which recompute settings the planner should not offer because a cheaper one saves as much.

Selective sets are enumerated module by module, so under flash attention ``[core_attn, mlp]``
sits next to ``[mlp]``: both save the same memory (core attention keeps only the softmax
statistics there), and the pair re-runs attention for nothing. A row like that is not wrong, but
an agent reading the table top-down may pick it, and the user pays throughput for no memory.
The rule is the planner's own resolution: a setting is *dominated* when another recompute
setting lowers the peak to within ``resolution_bytes`` of it (or below) at a strictly smaller
throughput cost. Only recompute rows are compared: across categories (pipeline vs tensor
parallelism, say) a cheaper row that saves as much is still a different kind of change, with
consequences the table's two numbers do not show; and only rows whose price rests on evidence
(measured, calibrated, first-principles): an unknown cost is a placeholder 0%, which would
otherwise push out every priced row beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from memtune.estimate.throughput_cost import PRICED_KINDS

#: Two throughput prices closer than this are the same price (the cost model's resolution is 0.1%).
COST_RESOLUTION = 0.001


# Read-only members, so the planner's frozen dataclasses satisfy them.
class _Cost(Protocol):
    @property
    def change(self) -> float: ...

    @property
    def kind(self) -> str: ...


class _Candidate(Protocol):
    @property
    def title(self) -> str: ...

    @property
    def category(self) -> str: ...


class _Row(Protocol):
    @property
    def candidate(self) -> _Candidate: ...

    @property
    def peak_bytes(self) -> int | None: ...

    @property
    def cost(self) -> _Cost | None: ...


R = TypeVar("R", bound=_Row)


@dataclass(frozen=True)
class Dominated:
    """A recompute row left out, and the cheaper row that saves as much memory."""

    title: str
    instead: str


def _saves_as_much_for_less(other: _Row, row: _Row, resolution_bytes: int) -> bool:
    assert other.peak_bytes is not None and other.cost is not None
    assert row.peak_bytes is not None and row.cost is not None
    return (
        other.peak_bytes <= row.peak_bytes + resolution_bytes and other.cost.change > row.cost.change + COST_RESOLUTION
    )


def _comparable(row: _Row) -> bool:
    return (
        row.candidate.category == "recompute"
        and row.peak_bytes is not None
        and row.cost is not None
        and row.cost.kind in PRICED_KINDS  # an unknown 0% or an assumed price decides nothing
    )


def split_dominated(rows: Sequence[R], resolution_bytes: int) -> tuple[list[R], list[Dominated]]:
    """``rows`` without the dominated recompute rows (their order kept), and what was left out.

    Rows are decided cheapest first and compared only with rows already kept, so every row left
    out names a row that stays in the table (no chain of near-ties can remove a setting that
    saves clearly more than anything kept)."""
    by_price = sorted(
        (r for r in rows if _comparable(r)), key=lambda r: -(r.cost.change if r.cost is not None else 0.0)
    )
    kept_recompute: list[R] = []
    instead_of: dict[int, str] = {}
    for row in by_price:
        cheaper = [k for k in kept_recompute if _saves_as_much_for_less(k, row, resolution_bytes)]
        if cheaper:
            instead_of[id(row)] = cheaper[0].candidate.title
        else:
            kept_recompute.append(row)
    kept = [r for r in rows if id(r) not in instead_of]
    dropped = [Dominated(r.candidate.title, instead_of[id(r)]) for r in rows if id(r) in instead_of]
    return kept, dropped
