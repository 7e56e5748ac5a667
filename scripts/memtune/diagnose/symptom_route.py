"""Which --symptom questions are a change between two runs, and the workflow that answers them.

The Failure Diagnosis table describes single failures.  "Memory went up after I upgraded"
or "it used to fit, now it OOMs" is a different question: the answer is in the difference
between the two runs, so ranking table rows by shared words puts an unrelated row first.
Such a query is recognised by the phrases in data/oom_patterns.yaml (``symptom_routes``)
and answered with the regression workflow's commands before any row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from memtune.diagnose.patterns import PATTERNS_FILE, PatternError, load_pattern_doc

MAX_QUERY_CHARS = 2000  # a symptom is a sentence; a pasted log belongs in FILE, not --symptom


@dataclass(frozen=True)
class Route:
    """A kind of question and the helpers that answer it."""

    name: str
    title: str
    regexes: tuple[re.Pattern[str], ...]
    steps: tuple[str, ...]

    def matches(self, query: str) -> str | None:
        """The words of ``query`` that mark it as this kind of question, or None."""
        text = query[:MAX_QUERY_CHARS]
        for rx in self.regexes:
            m = rx.search(text)
            if m:
                return m.group(0)
        return None


@dataclass(frozen=True)
class RouteMatch:
    route: Route
    because: str  # the words that matched


@lru_cache(maxsize=4)
def load_routes(path: Path = PATTERNS_FILE) -> tuple[Route, ...]:
    doc = load_pattern_doc(path)
    try:
        return tuple(
            Route(
                name=str(entry["name"]),
                title=str(entry["title"]),
                regexes=tuple(re.compile(str(rx), re.IGNORECASE) for rx in entry["regex"]),
                steps=tuple(str(s) for s in entry["steps"]),
            )
            for entry in doc.get("symptom_routes") or ()
        )
    except (KeyError, TypeError, re.error) as exc:
        raise PatternError(f"{path}: malformed symptom_routes entry ({exc})") from exc


def route_for(query: str, routes: tuple[Route, ...] | None = None) -> RouteMatch | None:
    """The first route whose phrases occur in ``query``, with the words that matched."""
    for route in load_routes() if routes is None else routes:
        because = route.matches(query)
        if because is not None:
            return RouteMatch(route, because.strip())
    return None
