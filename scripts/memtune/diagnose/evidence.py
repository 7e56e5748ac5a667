"""The facts in data/oom_evidence.yaml: message-format markers, thresholds, hint lines.

Kept apart from the failure patterns because these do not make a finding on their own:
they date the PyTorch release that printed a message (memtune.diagnose.torch_era) and qualify a
finding (memtune.diagnose.advice): a CUDA-graph capture frame above the error, a platform that
ignores expandable segments, a GPU so small that "0 bytes free" is the whole story.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from memtune.files.data_yaml import load_data_yaml
from memtune.files.paths import DATA_DIR

EVIDENCE_FILE: Path = DATA_DIR / "oom_evidence.yaml"


@dataclass(frozen=True)
class FormatMarker:
    """A wording that only releases in ``[since, before)`` print (None: open end)."""

    marker: re.Pattern[str]
    since: str | None
    before: str | None
    label: str
    evidence: str


@dataclass(frozen=True)
class Hint:
    """A non-failure line that changes what a nearby failure means."""

    name: str
    literals: tuple[str, ...]
    regex: re.Pattern[str]
    within_lines_before: int | None  # None: anywhere in the same input


@dataclass(frozen=True)
class Evidence:
    formats: tuple[FormatMarker, ...]
    idle_over_request_below: float
    request_share_of_gpu_at_least: float
    tiny_gpu_bytes: int
    held_elsewhere_share_at_least: float
    hints: tuple[Hint, ...]

    def hint_literals(self) -> list[str]:
        return [lit for h in self.hints for lit in h.literals]

    def hints_in(self, text: str) -> list[str]:
        """Names of the hints ``text`` carries (each regex only runs if a literal is there)."""
        return [h.name for h in self.hints if any(lit in text for lit in h.literals) and h.regex.search(text)]


@lru_cache(maxsize=2)
def load_evidence(path: Path = EVIDENCE_FILE) -> Evidence:
    doc = load_data_yaml(path)
    try:
        formats = tuple(
            FormatMarker(
                marker=re.compile(f["marker"]),
                since=f.get("since"),
                before=f.get("before"),
                label=str(f["label"]),
                evidence=str(f["evidence"]),
            )
            for f in doc["torch_formats"]
        )
        hints = tuple(
            Hint(
                name=str(h["name"]),
                literals=tuple(str(x) for x in h["literals"]),
                regex=re.compile(h["regex"]),
                within_lines_before=h.get("within_lines_before"),
            )
            for h in doc["hints"]
        )
        near = doc["near_capacity"]
        return Evidence(
            formats=formats,
            idle_over_request_below=float(near["idle_over_request_below"]),
            request_share_of_gpu_at_least=float(near["request_share_of_gpu_at_least"]),
            tiny_gpu_bytes=int(doc["tiny_gpu_bytes"]),
            held_elsewhere_share_at_least=float(doc["held_elsewhere_share_at_least"]),
            hints=hints,
        )
    except (KeyError, TypeError, re.error) as exc:
        raise ValueError(f"{path}: malformed evidence entry ({exc})") from exc
