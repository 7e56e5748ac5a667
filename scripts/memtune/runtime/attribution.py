"""Which configuration change moved the estimated peak, and by how many bytes.

A regression between two runs is rarely one change: a user halves PP and turns on an overlap
flag in the same commit. To say which change did it we estimate run A, run B, and A with each
changed knob applied alone; a knob's share is its alone-estimate minus A's. The knobs do not
add up exactly (halving PP doubles DP, which changes what the distributed optimizer shards),
so the remainder is reported as ``interaction_bytes``; by construction the shares plus the
interaction equal B's peak minus A's, to the byte.

Every figure comes from :func:`memtune.estimate.estimator.estimate` on specs, never from a
formula of our own. A knob the estimator does not read at all (for example a flag that only
changes communication scheduling in the estimator's eyes) is reported as *unmodelled* with
no byte figure: "0 bytes" would be a claim the estimator never made. Whether a knob is read
is observed, not listed: the run is estimated through a :class:`RunSpec` subclass that
records every field the estimator touches, so the answer stays right as the estimator grows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypedDict

from memtune.errors import InputError
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec

#: status of one changed knob
MODELLED = "modelled"  # the estimator reads it; delta_bytes is its alone-effect (may be 0)
UNMODELLED = "unmodelled"  # the estimator never reads it: no byte figure exists
ILLEGAL_ALONE = "illegal-alone"  # applied alone on top of A the run is impossible (e.g. PP vs layers)
STATUSES = (MODELLED, UNMODELLED, ILLEGAL_ALONE)

Estimator = Callable[[ModelSpec, RunSpec], Any]  # returns an object with ``peak_bytes``


@dataclass(frozen=True)
class Knob:
    """One field that differs between the two runs: ``scope`` is ``run`` or ``model``."""

    scope: str
    name: str
    before: Any
    after: Any


class KnobEffectJson(TypedDict):
    """One changed knob as the --json output shows it."""

    knob: str
    scope: str
    before: object
    after: object
    status: str
    delta_bytes: int | None
    note: str


@dataclass(frozen=True)
class KnobEffect:
    """A changed knob and what it does alone on top of run A."""

    knob: Knob
    status: str
    delta_bytes: int | None  # None unless status == MODELLED
    note: str = ""

    def to_json(self) -> KnobEffectJson:
        return {
            "knob": self.knob.name,
            "scope": self.knob.scope,
            "before": _plain(self.knob.before),
            "after": _plain(self.knob.after),
            "status": self.status,
            "delta_bytes": self.delta_bytes,
            "note": self.note,
        }


@dataclass(frozen=True)
class Attribution:
    """B's estimated peak against A's, split by knob. ``sum(known deltas) + interaction == delta``."""

    peak_a: int
    peak_b: int
    peak_stage_a: int
    peak_stage_b: int
    changes: tuple[KnobEffect, ...]

    @property
    def delta_bytes(self) -> int:
        return self.peak_b - self.peak_a

    @property
    def explained_bytes(self) -> int:
        """The sum of the modelled knobs' alone-effects."""
        return sum(c.delta_bytes for c in self.changes if c.delta_bytes is not None)

    @property
    def interaction_bytes(self) -> int:
        """What no single knob accounts for: the knobs' effect on each other (and the knobs
        whose alone-effect could not be computed)."""
        return self.delta_bytes - self.explained_bytes

    @property
    def unmodelled(self) -> tuple[KnobEffect, ...]:
        return tuple(c for c in self.changes if c.status == UNMODELLED)

    def main_cause(self) -> KnobEffect | None:
        """The modelled knob that moved the peak most in the direction it went, if any did."""
        sign = 1 if self.delta_bytes >= 0 else -1
        moving = [c for c in self.changes if c.delta_bytes is not None and c.delta_bytes * sign > 0]
        return max(moving, key=lambda c: abs(c.delta_bytes or 0), default=None)


def _plain(value: Any) -> Any:
    """A JSON-ready value: tuples become lists, anything exotic its text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def knob_changes(model_a: ModelSpec, run_a: RunSpec, model_b: ModelSpec, run_b: RunSpec) -> list[Knob]:
    """Every model and run field whose value differs, model first, in declaration order.

    The model's display name is not a knob (two readers name one model differently), nor is
    ``extra`` (reader bookkeeping the estimator does not price)."""
    out: list[Knob] = []
    for f in fields(ModelSpec):
        if f.name in ("name", "extra"):
            continue
        before, after = getattr(model_a, f.name), getattr(model_b, f.name)
        if before != after:
            out.append(Knob("model", f.name, before, after))
    for f in fields(RunSpec):
        before, after = getattr(run_a, f.name), getattr(run_b, f.name)
        if before != after:
            out.append(Knob("run", f.name, before, after))
    return out


def _watched(run: RunSpec, reads: set[str]) -> RunSpec:
    """A copy of ``run`` that adds the name of every field read through it to ``reads``.

    ``dataclasses.replace`` on it builds the same subclass, so runs the estimator derives
    from it are watched too."""
    names = frozenset(f.name for f in fields(RunSpec))

    class WatchedRunSpec(RunSpec):
        def __getattribute__(self, name: str) -> Any:
            if name in names:
                reads.add(name)
            return super().__getattribute__(name)

    WatchedRunSpec.__qualname__ = WatchedRunSpec.__name__ = "RunSpec"
    return WatchedRunSpec(**{f.name: getattr(run, f.name) for f in fields(RunSpec)})


def _apply(model: ModelSpec, run: RunSpec, knobs: tuple[Knob, ...]) -> tuple[ModelSpec, RunSpec]:
    """A's specs with ``knobs`` set to B's values."""
    model_changes = {k.name: k.after for k in knobs if k.scope == "model"}
    run_changes = {k.name: k.after for k in knobs if k.scope == "run"}
    return (model.with_(**model_changes) if model_changes else model, run.with_(**run_changes) if run_changes else run)


def _pair_illegal(
    estimator: Estimator,
    model_a: ModelSpec,
    run_a: RunSpec,
    peak_a: int,
    effects: list[KnobEffect],
    illegal: list[tuple[Knob, str]],
) -> list[KnobEffect]:
    """Knobs that only make sense together (micro-batch with global batch, PP with the layer
    split) are priced as one change: an impossible knob is tried with each other changed
    knob, and the first partner that makes A legal joins it in one entry (``mbs+gbs``),
    taking the partner's own entry with it so nothing is counted twice. A knob no single
    partner rescues stays ``illegal-alone`` and its effect is in the interaction."""
    out = list(effects)
    taken: set[int] = set()  # id() of the knobs already priced in a pair (a joined knob holds dicts: unhashable)
    for knob, reason in illegal:
        if id(knob) in taken:
            continue
        partners = [e.knob for e in out if id(e.knob) not in taken and e.status == MODELLED and "+" not in e.knob.name]
        partners += [k for k, _ in illegal if k is not knob and id(k) not in taken]
        for partner in partners:
            try:
                est = estimator(*_apply(model_a, run_a, (knob, partner)))
            except (InputError, ValueError):
                continue
            taken.update((id(knob), id(partner)))
            out = [e for e in out if e.knob is not partner]
            joined = Knob(
                knob.scope if knob.scope == partner.scope else "run",
                f"{knob.name}+{partner.name}",
                {knob.name: knob.before, partner.name: partner.before},
                {knob.name: knob.after, partner.name: partner.after},
            )
            note = f"applied together: {knob.name} alone on top of A is impossible ({reason})"
            out.append(KnobEffect(joined, MODELLED, int(est.peak_bytes) - peak_a, note))
            break
        else:
            out.append(KnobEffect(knob, ILLEGAL_ALONE, None, f"alone on top of A: {reason}"))
    return out


def estimate_watching(estimator: Estimator, model: ModelSpec, run: RunSpec) -> tuple[Any, frozenset[str]]:
    """The estimate of ``run`` and the run fields the estimator read to make it."""
    reads: set[str] = set()
    result = estimator(model, _watched(run, reads))
    return result, frozenset(reads)


def attribute(
    model_a: ModelSpec, run_a: RunSpec, model_b: ModelSpec, run_b: RunSpec, estimator: Estimator | None = None
) -> Attribution:
    """Split B's estimated peak minus A's by changed knob (see the module docstring).

    Raises InputError when A or B itself cannot be estimated (an impossible run): then there
    is no delta to split. A knob that is impossible only when applied alone (PP 4 -> 2 is fine
    with B's layer split but not A's) is reported as ``illegal-alone`` and its effect falls
    into the interaction."""
    if estimator is None:
        from memtune.estimate.estimator import estimate

        estimator = estimate
    est_a, read_a = estimate_watching(estimator, model_a, run_a)
    est_b, read_b = estimate_watching(estimator, model_b, run_b)
    knobs = knob_changes(model_a, run_a, model_b, run_b)
    effects: list[KnobEffect] = []
    illegal: list[tuple[Knob, str]] = []
    for knob in knobs:
        try:
            est_alone, read_alone = estimate_watching(estimator, *_apply(model_a, run_a, (knob,)))
        except (InputError, ValueError) as exc:
            illegal.append((knob, str(exc).splitlines()[0]))
            continue
        read = read_a | read_b | read_alone
        if knob.scope == "run" and knob.name not in read:
            effects.append(
                KnobEffect(knob, UNMODELLED, None, "the estimator does not read this knob: its effect is not estimated")
            )
            continue
        effects.append(KnobEffect(knob, MODELLED, int(est_alone.peak_bytes) - int(est_a.peak_bytes)))
    effects = _pair_illegal(estimator, model_a, run_a, int(est_a.peak_bytes), effects, illegal)
    effects.sort(key=lambda e: (e.delta_bytes is None, -abs(e.delta_bytes or 0)))
    return Attribution(
        peak_a=int(est_a.peak_bytes),
        peak_b=int(est_b.peak_bytes),
        peak_stage_a=int(est_a.peak_stage),
        peak_stage_b=int(est_b.peak_stage),
        changes=tuple(effects),
    )
