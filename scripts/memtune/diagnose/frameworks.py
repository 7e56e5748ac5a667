"""Which training or serving stack a pasted log comes from (data/frameworks.yaml).

Why it matters: the fix for a capacity OOM is a different knob in every stack (Megatron's
parallel layout, vLLM's --gpu-memory-utilization, DeepSpeed's ZeRO stage, ComfyUI's
--lowvram), and some stacks cannot use expandable segments at all (vLLM sleep mode).
Detection is literal signals in the lines the scanner reads (traceback frames, logger
prefixes, worker names); the first framework in file order with a signal wins, so the
more specific stacks (RL trainers that embed vLLM) are listed first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from memtune.files.data_yaml import load_data_yaml
from memtune.files.paths import DATA_DIR

FRAMEWORKS_FILE: Path = DATA_DIR / "frameworks.yaml"


@dataclass(frozen=True)
class Advice:
    """Ranked, stack-specific actions; ``expandable`` is what to know before enabling it."""

    capacity: tuple[str, ...]
    nccl: tuple[str, ...]
    runtime: tuple[str, ...]
    expandable: str | None


@dataclass(frozen=True)
class Framework:
    name: str | None
    label: str
    group: str
    in_megatron: bool
    advice: Advice
    signals: tuple[str, ...] = ()
    line_regex: re.Pattern[str] | None = None
    implied_by_kinds: frozenset[str] = frozenset()

    def as_json(self, matched: list[str], reason: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "group": self.group,
            "in_megatron": self.in_megatron,
            "matched": matched,
            "reason": reason,
        }


@dataclass
class FrameworkHits:
    """Signals seen so far in one input (mutable: filled line by line by the scanner)."""

    seen: dict[str, list[str]] = field(default_factory=dict)  # framework name -> signals

    def add(self, name: str, signal: str) -> None:
        found = self.seen.setdefault(name, [])
        if signal not in found and len(found) < 8:
            found.append(signal)


@dataclass(frozen=True)
class FrameworkSet:
    frameworks: tuple[Framework, ...]
    default: Framework

    def literals(self) -> list[str]:
        return [s for f in self.frameworks for s in f.signals]

    def observe(self, text: str, hits: FrameworkHits) -> None:
        """Record every framework signal ``text`` holds (cheap: substring tests)."""
        for fw in self.frameworks:
            for sig in fw.signals:
                if sig in text:
                    hits.add(str(fw.name), sig)
                    break
            else:
                if fw.line_regex is not None and fw.line_regex.search(text):
                    hits.add(str(fw.name), "log line format")

    def decide(self, hits: FrameworkHits, kinds: set[str]) -> tuple[Framework, list[str], str]:
        """The stack, the signals that named it, and why, from what one input showed."""
        for fw in self.frameworks:
            if fw.name in hits.seen:
                return fw, list(hits.seen[str(fw.name)]), "named by the text"
        for fw in self.frameworks:
            implied = sorted(kinds & fw.implied_by_kinds)
            if implied:
                return fw, [], f"only {fw.label.split(' / ')[0]} prints {', '.join(implied)}"
        return self.default, [], "no framework signal in the text"

    def by_name(self, name: str) -> Framework:
        for fw in self.frameworks:
            if fw.name == name:
                return fw
        raise KeyError(name)


def _advice(raw: dict[str, Any]) -> Advice:
    return Advice(
        capacity=tuple(str(a) for a in raw.get("capacity") or ()),
        nccl=tuple(str(a) for a in raw.get("nccl") or ()),
        runtime=tuple(str(a) for a in raw.get("runtime") or ()),
        expandable=str(raw["expandable"]) if raw.get("expandable") else None,
    )


def _framework(raw: dict[str, Any]) -> Framework:
    regex = raw.get("line_regex")
    return Framework(
        name=raw.get("name"),
        label=str(raw["label"]),
        group=str(raw.get("group", "unknown")),
        in_megatron=bool(raw.get("in_megatron", False)),
        advice=_advice(raw.get("advice") or {}),
        signals=tuple(str(s) for s in raw.get("signals") or ()),
        line_regex=re.compile(regex) if regex else None,
        implied_by_kinds=frozenset(str(k) for k in raw.get("implied_by_kinds") or ()),
    )


@lru_cache(maxsize=2)
def load_frameworks(path: Path = FRAMEWORKS_FILE) -> FrameworkSet:
    doc = load_data_yaml(path)
    try:
        return FrameworkSet(
            frameworks=tuple(_framework(f) for f in doc["frameworks"]),
            default=_framework(doc["default"]),
        )
    except (KeyError, TypeError, re.error) as exc:
        raise ValueError(f"{path}: malformed framework entry ({exc})") from exc
