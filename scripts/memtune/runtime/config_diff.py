"""Which keys of a Megatron Bridge config differ between two runs, and what each means to the estimate.

Like :mod:`memtune.runtime.flag_diff` for launch flags: the knob split compares specs, so a
config key the Bridge reader never maps to a spec field would vanish from it. Each changed leaf
is applied alone on top of A and A is read again (through ``read``, the helper's own loader, so
presets, ``_memtune`` metadata and GPU counts are handled as for A itself); the spec fields
that move are the knobs it maps to. A key that moves nothing is either listed in
data/bridge_no_memory_keys.yaml (paths, logging, schedules, ...) or unmodelled.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from memtune.errors import InputError
from memtune.runtime.flag_diff import MAPPED, NO_MEMORY_EFFECT, NOT_MODELLED, UNREADABLE, FlagChange, spec_fields

#: Beyond this many changed keys (two unrelated recipes) only the first are re-read: each costs a load.
MAX_KEYS = 300

_ABSENT = object()

#: Reads a whole config (a mapping like the YAML) into (model, run); raises InputError when it cannot.
Reader = Callable[[dict[str, Any]], tuple[Any, Any]]


def _leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, Mapping) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, str(key)))
    else:
        yield path, node


@lru_cache(maxsize=1)
def _no_memory_table() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    table = load_data_yaml(DATA_DIR / "bridge_no_memory_keys.yaml") or {}
    return (
        frozenset(table.get("sections", ())),
        frozenset(table.get("keys", ())),
        frozenset(table.get("suffixes", ())),
    )


def no_memory_effect(path: tuple[str, ...]) -> bool:
    """True when data/bridge_no_memory_keys.yaml says this key does not change GPU memory."""
    sections, keys, suffixes = _no_memory_table()
    return path[0] in sections or ".".join(path) in keys or path[-1] in suffixes


def _set(cfg: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = cfg
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    if value is _ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)


def key_changes(cfg_a: Mapping[str, Any], cfg_b: Mapping[str, Any], read: Reader) -> list[FlagChange]:
    """Every leaf key whose value differs (or that one side lacks), with what it moves.

    Raises InputError when A itself cannot be read (then there is nothing to compare with)."""
    leaves_a, leaves_b = dict(_leaves(cfg_a)), dict(_leaves(cfg_b))
    base = spec_fields(*read(copy.deepcopy(dict(cfg_a))))
    out: list[FlagChange] = []
    order = [*leaves_a, *(p for p in leaves_b if p not in leaves_a)]
    # a section that is empty or null on one side and filled on the other is compared key by
    # key (its leaves), not also as one changed "section" value
    sections = {p[:i] for p in order for i in range(1, len(p))}
    changed = [p for p in order if p and p not in sections and leaves_a.get(p, _ABSENT) != leaves_b.get(p, _ABSENT)]
    for path in changed[:MAX_KEYS]:
        before, after = leaves_a.get(path, _ABSENT), leaves_b.get(path, _ABSENT)
        knobs: tuple[str, ...] = ()
        trial = copy.deepcopy(dict(cfg_a))
        _set(trial, path, after)
        try:
            moved = spec_fields(*read(trial))
        except (InputError, ValueError):
            status = UNREADABLE
        else:
            knobs = tuple(k for k, v in moved.items() if base.get(k) != v)
            if knobs:
                status = MAPPED
            elif no_memory_effect(path):
                status = NO_MEMORY_EFFECT
            else:
                status = NOT_MODELLED
        out.append(
            FlagChange(
                ".".join(path),
                None if before is _ABSENT else before,
                None if after is _ABSENT else after,
                status,
                knobs,
            )
        )
    return out
