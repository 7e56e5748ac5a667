"""The shapes of trace_regression's JSON documents, for the checker.

The helper builds plain dicts (what ``--json`` prints, checked against
``data/schemas/output/trace_regression.schema.json``) and its text renderers read them back;
these TypedDicts let strict mypy check every key on both sides without a class per row at run
time. Standard library only: the helper's ``--help`` imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from memtune.runtime.attribution import KnobEffectJson
    from memtune.runtime.flag_diff import FlagChangeJson


class ConfigSide(TypedDict):
    source: str
    kind: str
    peak_bytes: int
    peak_stage: int


class MeasuredSide(TypedDict):
    source: str
    kind: str
    formats: list[str]
    peak_bytes: int | None


class FigureRow(TypedDict):
    figure: str
    a_bytes: int | None
    b_bytes: int | None
    delta_bytes: int | None


class RankRow(TypedDict):
    rank: int
    figure: str | None
    a_bytes: int | None
    b_bytes: int | None
    delta_bytes: int | None
    threshold_bytes: int | None
    regressed: bool
    trend_a: str | None
    trend_b: str | None
    figures: list[FigureRow]


class MeasurementDocument(TypedDict):
    """Two measurements compared, rank by rank (``mode`` "measurement")."""

    mode: str
    a: MeasuredSide
    b: MeasuredSide
    figure: str
    delta_bytes: int | None
    threshold_bytes: int | None
    resolution_bytes: int
    regressed: bool
    regressed_ranks: list[int]
    ranks: list[RankRow]
    only_in_a: list[int]
    only_in_b: list[int]
    notes: list[str]


class KnobShare(TypedDict):
    knob: str
    delta_bytes: int
    share_of_measured: float | None


class Explanation(TypedDict):
    """Which changed knob explains the measured change, and what is left over."""

    verdict: str
    figure: str
    measured_delta_bytes: int
    allocator_reserve_delta_bytes: int | None
    estimated_delta_bytes: int
    unexplained_bytes: int
    tolerance_bytes: int
    main_cause: str | None
    knobs: list[KnobShare]
    candidates: list[str]


class CommitStep(TypedDict):
    commit: str
    subject: str
    peak_bytes: int | None
    fits: bool | None
    problem: str


class GitWalk(TypedDict):
    range: str
    path: str
    start: str
    end: str
    over_limit_at_start: bool
    commits: list[CommitStep]
    first_over_limit: CommitStep | None


class _ConfigFields(TypedDict):
    mode: str
    a: ConfigSide
    b: ConfigSide
    delta_bytes: int
    changes: list[KnobEffectJson]
    interaction_bytes: int
    main_cause: str | None
    unmodelled: list[str]
    gpu_memory_bytes: int | None
    fits_a: bool | None
    fits_b: bool | None
    threshold_bytes: int | None
    regressed: bool
    notes: list[str]


class ConfigDocument(_ConfigFields, total=False):
    """Two configurations compared (``mode`` "config"); the fields below are added when the
    files' flags were compared, for ``--git``, and with two measurements as well (``mode``
    "measurement+config")."""

    flags: list[FlagChangeJson]
    git: GitWalk
    measured: MeasurementDocument
    explanation: Explanation
