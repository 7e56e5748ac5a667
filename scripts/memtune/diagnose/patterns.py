"""The failure patterns diagnose.py looks for, loaded from data/oom_patterns.yaml.

Patterns are data so that a new error string (a new Megatron guard, a new PyTorch wording)
is a one-line YAML change with an example the tests pick up, not a code change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from memtune.files.data_yaml import load_data_yaml
from memtune.files.paths import DATA_DIR

PATTERNS_FILE: Path = DATA_DIR / "oom_patterns.yaml"

ALLOCATOR_KINDS = ("fragmentation", "capacity", "impossible-request")
MEMORIES = ("gpu", "host")  # a kind's `memory`: which memory ran out


@dataclass(frozen=True)
class Detector:
    """One line-level test: ``kind`` is None for the allocator family (decided by numbers).

    ``requires`` / ``unless`` are second regexes the line must / must not match: kept
    separate from ``regex`` so that each is one linear scan (no look-around over the whole
    line).  ``fold_lines``: a hit this close after the previous finding of the same kind and
    source is the same failure printing another line (see memtune.diagnose.scan).
    """

    kind: str | None
    regex: re.Pattern[str]
    numbers: re.Pattern[str] | None = None
    requires: re.Pattern[str] | None = None
    unless: re.Pattern[str] | None = None
    note: str | None = None
    note_is_advice: bool = False
    fold_lines: int = 0
    numbers_from: str | None = None  # a parser of memtune.diagnose.parse for sizes the line states
    numbers_follow: int = 0  # the numbers may continue on up to this many following lines
    # The line shows only a SIGKILL (exit code -9 / 137, "Killed"), not who sent it: reported
    # with less confidence, and as a consequence when the same input holds a GPU failure.
    signal_only: bool = False

    @property
    def is_allocator(self) -> bool:
        return self.kind is None

    def search(self, text: str) -> re.Match[str] | None:
        m = self.regex.search(text)
        if m is None:
            return None
        if self.requires is not None and self.requires.search(text) is None:
            return None
        if self.unless is not None and self.unless.search(text) is not None:
            return None
        return m


@dataclass(frozen=True)
class KindInfo:
    kind: str
    priority: int
    table_key: str
    next_step: str
    examples: tuple[str, ...]
    memory_failure: bool = False  # memory ran out (not a config error or warning)
    memory: str = "gpu"  # which memory: "gpu", or "host" (the node's CPU RAM: an OOM-killer kill)
    last_resort: bool = False  # dropped when the same input holds a GPU memory_failure finding

    @property
    def gpu_memory_failure(self) -> bool:
        """A GPU ran out of memory: the failure a host kill or an unrecognized line may echo."""
        return self.memory_failure and self.memory == "gpu"


@dataclass(frozen=True)
class PatternSet:
    triggers: tuple[bytes, ...]
    window_triggers: tuple[bytes, ...]
    detectors: tuple[Detector, ...]
    context: tuple[re.Pattern[str], ...]
    kinds: dict[str, KindInfo]

    def grep_pattern(self) -> str:
        """The triggers as one ``grep -E`` alternation (the prefilter's and the speed baseline's)."""
        return ere_alternation(self.triggers)

    def detect(self, text: str) -> tuple[Detector, re.Match[str]] | None:
        for det in self.detectors:
            m = det.search(text)
            if m:
                return det, m
        return None

    def run_facts(self, text: str) -> dict[str, int]:
        """Run parameters a start-up line states (e.g. Megatron's parallel layout)."""
        for rx in self.context:
            m = rx.search(text)
            if m:
                return {k: int(v) for k, v in m.groupdict().items() if v is not None}
        return {}

    def has_trigger(self, text: str) -> bool:
        raw = text.encode("utf-8", "replace")
        return any(t in raw for t in self.triggers)

    @cached_property
    def _trigger_rx(self) -> re.Pattern[bytes]:
        # One alternation of the literals: on a short line one search beats a loop of
        # ``in`` tests (it is the per-line check of a dense log's window lines).
        return re.compile(b"|".join(re.escape(t) for t in self.triggers))

    @cached_property
    def _trigger_rx_str(self) -> re.Pattern[str]:
        return re.compile("|".join(re.escape(t.decode("utf-8")) for t in self.triggers))

    def has_trigger_in(self, line: bytes | str) -> bool:
        """:meth:`has_trigger` for a raw line, bytes or text, without re-encoding it."""
        if isinstance(line, str):
            return self._trigger_rx_str.search(line) is not None
        return self._trigger_rx.search(line) is not None


def ere_alternation(literals: tuple[bytes, ...]) -> str:
    """Fixed strings as one POSIX ERE alternation (``a|b\\.c``)."""
    return "|".join(_ere_escape(t.decode("utf-8")) for t in literals)


def _ere_escape(literal: str) -> str:
    """Escape only POSIX ERE metacharacters (Python's re.escape adds escapes grep warns about)."""
    return "".join("\\" + ch if ch in ".[]()*+?{}|^$\\" else ch for ch in literal)


class PatternError(ValueError):
    """The pattern file is malformed (a packaging bug, reported with the file name)."""


def minimal_triggers(literals: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The literals without those that contain another one (first-seen order kept).

    A line holding "[torch_memory_saver.cpp]" also holds "torch_memory_saver", so the longer
    literal selects no extra line: dropping it keeps the prefilter's output identical and
    saves one pass over the log per dropped literal.
    """
    unique = list(dict.fromkeys(literals))
    return tuple(t for t in unique if not any(o != t and o in t for o in unique))


def _optional_regex(text: object) -> re.Pattern[str] | None:
    return re.compile(str(text)) if text else None


def context_literals() -> list[str]:
    """Framework signals and evidence-hint literals (their own data files), as triggers."""
    from memtune.diagnose import evidence as oom_evidence  # noqa: PLC0415 - data modules, no cycle
    from memtune.diagnose import frameworks  # noqa: PLC0415

    return [*frameworks.load_frameworks().literals(), *oom_evidence.load_evidence().hint_literals()]


def load_pattern_doc(path: Path) -> dict[str, Any]:
    doc = load_data_yaml(path)
    if not isinstance(doc, dict):
        raise PatternError(f"{path}: expected a mapping at the top level")
    return doc


@lru_cache(maxsize=4)
def load_patterns(path: Path = PATTERNS_FILE) -> PatternSet:
    doc = load_pattern_doc(path)
    try:
        triggers = tuple(str(t).encode("utf-8") for t in doc["triggers"])
        window_triggers = tuple(str(t).encode("utf-8") for t in doc["window_triggers"])
        context = tuple(re.compile(entry["regex"]) for entry in doc.get("context") or ())
        detectors = []
        for entry in doc["detectors"]:
            kind = entry.get("kind")
            if kind is None and entry.get("family") != "allocator":
                raise PatternError(f"{path}: detector {entry!r} needs `kind` or `family: allocator`")
            detectors.append(
                Detector(
                    kind=kind,
                    regex=re.compile(entry["regex"]),
                    numbers=_optional_regex(entry.get("numbers")),
                    requires=_optional_regex(entry.get("requires")),
                    unless=_optional_regex(entry.get("unless")),
                    note=str(entry["note"]) if entry.get("note") else None,
                    note_is_advice=bool(entry.get("note_is_advice", False)),
                    fold_lines=int(entry.get("fold_lines") or 0),
                    numbers_from=str(entry["numbers_from"]) if entry.get("numbers_from") else None,
                    numbers_follow=int(entry.get("numbers_follow") or 0),
                    signal_only=bool(entry.get("signal_only", False)),
                )
            )
        kinds = {}
        for name, info in doc["kinds"].items():
            kinds[name] = KindInfo(
                kind=name,
                priority=int(info["priority"]),
                table_key=str(info["table_key"]),
                next_step=str(info["next_step"]),
                examples=tuple(str(e) for e in info.get("examples", ())),
                memory_failure=bool(info.get("memory_failure", False)),
                memory=str(info.get("memory", "gpu")),
                last_resort=bool(info.get("last_resort", False)),
            )
    except (KeyError, TypeError, re.error) as exc:
        raise PatternError(f"{path}: malformed pattern entry ({exc})") from exc
    if bad := sorted(k.kind for k in kinds.values() if k.memory not in MEMORIES):
        raise PatternError(f"{path}: `memory` must be one of {', '.join(MEMORIES)} (kinds {bad})")
    named = {d.kind for d in detectors if d.kind} | set(ALLOCATOR_KINDS)
    if named != set(kinds):
        raise PatternError(f"{path}: detectors and kinds disagree: {sorted(named ^ set(kinds))}")
    if not all(any(w.find(t) != -1 for t in triggers) for w in window_triggers):
        raise PatternError(f"{path}: every window trigger must contain a trigger")
    # Lines that name the framework or carry a hint are read too (data/frameworks.yaml,
    # data/oom_evidence.yaml): one trigger list, so every search path sees the same lines.
    extra = [lit.encode("utf-8") for lit in context_literals()]
    triggers = minimal_triggers(triggers + tuple(extra))
    return PatternSet(
        triggers=triggers, window_triggers=window_triggers, detectors=tuple(detectors), context=context, kinds=kinds
    )
