"""Reuse another run's without-skill attempts instead of sampling them again.

Why: a local run on two shared cores costs hours, and the without-skill condition does not
depend on how the skill is activated: the agent never sees the skill there, the catalog is the
decoys alone and the seed depends only on (case, attempt) (``Task.seed``). A discover run and a
forced run of the same agent, model, loop settings, dataset and SKILL.md therefore sample the
same condition twice. ``run --baseline-from RUN_ID`` copies the source run's without-skill records
(marked ``baseline_from``) and runs only what is still missing. Anything that could change that
condition must be equal in both headers, or the copy is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memtune.bench.agent_types import WITHOUT
from memtune.bench.results import Key, RunFile, result_key, same_tasks

#: Agent settings that only act on the with-skill condition (the rest must match exactly).
WITH_SKILL_ONLY_SETTINGS = frozenset({"activation"})

#: Header fields that decide the without-skill condition, with the name a refusal shows.
_SAME_FIELDS = (
    ("harness", ("harness",)),
    ("agent", ("agent",)),
    ("model", ("model",)),
    ("SKILL.md sha256", ("skill", "sha256")),
    ("security rules", ("security_rules_sha256",)),
)


def _get(header: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = header
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def baseline_mismatch(source: Mapping[str, Any], target: Mapping[str, Any]) -> list[str]:
    """What differs between two run headers in a way that could change the without-skill
    condition (empty: the source's without-skill attempts are this run's)."""
    out = [name for name, path in _SAME_FIELDS if _get(source, path) != _get(target, path)]
    if not same_tasks(source, target):
        out.append("tasks (questions, files)")
    src_cases = [c.get("id") for c in _get(source, ("dataset", "cases")) or []]
    dst_cases = [c.get("id") for c in _get(target, ("dataset", "cases")) or []]
    if not set(dst_cases) <= set(src_cases):
        out.append("cases")
    a = source.get("agent_settings") or {}
    b = target.get("agent_settings") or {}
    out += [
        f"agent setting {key}"
        for key in sorted(set(a) | set(b))
        if key not in WITH_SKILL_ONLY_SETTINGS and a.get(key) != b.get(key)
    ]
    return out


def baseline_records(source: RunFile, attempts: int, cases: Iterable[str], done: set[Key]) -> list[dict[str, Any]]:
    """The source's without-skill records this run still lacks (attempts 1..``attempts``,
    the given cases), each marked with the run it came from."""
    wanted = set(cases)
    out: list[dict[str, Any]] = []
    seen: set[Key] = set()
    for record in source.results:
        key = result_key(record)
        if record.get("condition") != WITHOUT or key in done or key in seen:
            continue
        if record.get("case_id") not in wanted or int(record.get("attempt", 0)) > attempts:
            continue
        seen.add(key)
        out.append({**record, "baseline_from": source.run_id})
    return out
