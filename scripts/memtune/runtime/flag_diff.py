"""Which Megatron-LM flags differ between two launch scripts, and what each means to the estimate.

The knob split (:mod:`memtune.runtime.attribution`) compares the specs the readers build, so a
flag the readers never map to a spec field would vanish from it: change ``--foo-overlap`` and
the knob list says nothing. This module diffs the flags themselves and, for each changed one,
re-reads A with only that flag changed: the spec fields that move are the knobs it maps to.
A flag that moves no field is either listed in data/megatron_flags.yaml as leaving memory
unchanged (logging, checkpointing, ...) or unmodelled: its effect on memory is unknown, and
trace_regression reports it so, never as 0 bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, TypedDict

from memtune.errors import InputError

MAPPED = "mapped"  # changes these spec fields (see the knob split for the bytes)
NO_MEMORY_EFFECT = "no-memory-effect"  # data/megatron_flags.yaml: does not change GPU memory
NOT_MODELLED = "not-modelled"  # moves no field the estimator reads: effect unknown
UNREADABLE = "unreadable-alone"  # A with only this flag changed cannot be read (e.g. needs a partner flag)
FLAG_STATUSES = (MAPPED, NO_MEMORY_EFFECT, NOT_MODELLED, UNREADABLE)

_ABSENT = object()


class FlagChangeJson(TypedDict):
    """One differing flag or config key as the --json output shows it."""

    flag: str
    before: object
    after: object
    status: str
    knobs: list[str]


@dataclass(frozen=True)
class FlagChange:
    flag: str  # --spelled-like-this
    before: Any  # None when absent from A
    after: Any  # None when absent from B
    status: str
    knobs: tuple[str, ...]  # spec fields it moves (model and run), when mapped

    def to_json(self) -> FlagChangeJson:
        return {
            "flag": self.flag,
            "before": _plain(self.before),
            "after": _plain(self.after),
            "status": self.status,
            "knobs": list(self.knobs),
        }


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


@lru_cache(maxsize=1)
def _no_memory_table() -> tuple[tuple[str, ...], frozenset[str]]:
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    table = load_data_yaml(DATA_DIR / "megatron_flags.yaml") or {}
    return tuple(table.get("prefixes", ())), frozenset(table.get("names", ()))


def spec_fields(model: Any, run: Any) -> dict[str, Any]:
    out = {f"model.{f.name}": getattr(model, f.name) for f in fields(model) if f.name not in ("name", "extra")}
    out.update({f.name: getattr(run, f.name) for f in fields(run)})
    return out


def flag_changes(
    flags_a: Mapping[str, Any],
    flags_b: Mapping[str, Any],
    world_size: int | None,
    mcore_version: tuple[int, ...] | None = None,
) -> list[FlagChange]:
    """Every flag whose value differs (or that only one side has), in A's order then B's;
    ``mcore_version`` reads both lines with that release's flag defaults, as the estimate does."""
    from memtune.readers.megatron_args import normalize_flag, specs_from_megatron_args

    a = {normalize_flag(k): v for k, v in flags_a.items()}
    b = {normalize_flag(k): v for k, v in flags_b.items()}
    model0, run0, _ = specs_from_megatron_args(a, world_size=world_size, mcore_version=mcore_version)
    base = spec_fields(model0, run0)
    prefixes, names = _no_memory_table()
    out: list[FlagChange] = []
    for name in [*a, *(k for k in b if k not in a)]:
        before, after = a.get(name, _ABSENT), b.get(name, _ABSENT)
        if before == after:
            continue
        knobs: tuple[str, ...] = ()
        trial = dict(a)
        if after is _ABSENT:
            trial.pop(name)
        else:
            trial[name] = after
        try:
            model, run, _ = specs_from_megatron_args(trial, world_size=world_size, mcore_version=mcore_version)
        except (InputError, ValueError):
            status = UNREADABLE
        else:
            moved = spec_fields(model, run)
            knobs = tuple(k for k, v in moved.items() if base.get(k) != v)
            if knobs:
                status = MAPPED
            elif name in names or name.startswith(prefixes):
                status = NO_MEMORY_EFFECT
            else:
                status = NOT_MODELLED
        out.append(
            FlagChange(
                "--" + name.replace("_", "-"),
                None if before is _ABSENT else before,
                None if after is _ABSENT else after,
                status,
                knobs,
            )
        )
    return out
