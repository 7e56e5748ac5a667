"""Deterministic grading of one agent answer against a case's ``checks``.

Why deterministic: a benchmark whose grader is another model measures two models at once
and cannot be re-run byte for byte. Every check here is a regular expression or a number
with a tolerance, written next to the question in evals/evals.json, so a reader can see
exactly what "correct" meant. An optional judge (``--judge``) grades the free-text
``expected_behavior`` separately; it never changes these results.

Only the standard library is imported: the CLI's --help must work without third-party
packages.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

FLAGS = re.IGNORECASE | re.MULTILINE

# A number as people write it in answers: 1,024 / 58.8 / -28.4 / 4.731e9 / .5
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d.]\d)(?!\d)")


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. ``kind`` is must_include / must_not_include / number / command."""

    kind: str
    label: str
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class SecurityRule:
    id: str
    pattern: str
    why: str


@dataclass(frozen=True)
class Grade:
    """The grade of one answer.

    ``content_score``: share of content checks (patterns and numbers) passed — partial
    credit, what the report calls Correctness. ``solved``: every check passed, including
    the command check — what the report calls Effectiveness. ``security_violations``: ids
    of the security rules the answer or the commands the agent ran broke.
    """

    checks: tuple[CheckResult, ...]
    content_score: float
    solved: bool
    command_ok: bool | None
    security_violations: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["checks"] = [asdict(c) for c in self.checks]
        doc["security_violations"] = list(self.security_violations)
        return doc

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> "Grade":
        return Grade(
            checks=tuple(CheckResult(**c) for c in doc["checks"]),
            content_score=float(doc["content_score"]),
            solved=bool(doc["solved"]),
            command_ok=doc.get("command_ok"),
            security_violations=tuple(doc.get("security_violations", ())),
        )


def extract_numbers(text: str) -> list[float]:
    """Every number written in ``text`` (thousands separators and a Unicode minus accepted)."""
    found = []
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        if not any(ch.isdigit() for ch in token):
            continue
        token = token.replace(",", "").replace("−", "-")
        try:
            value = float(token)
        except ValueError:
            continue
        if math.isfinite(value):
            found.append(value)
    return found


def number_matches(spec: Mapping[str, Any], numbers: Iterable[float]) -> float | None:
    """The first number within tolerance of the spec's value or an alternative, else None.

    Signs are ignored ("-28.4%" and "28.4% slower" say the same thing). Without a stated
    tolerance a number must match to 1e-9 relative.
    """
    targets = [float(spec["value"]), *map(float, spec.get("alternatives", ()))]
    absolute = float(spec.get("tolerance", 0.0))
    relative = float(spec.get("rel_tolerance", 0.0))
    for number in numbers:
        for target in targets:
            allowed = max(absolute, relative * abs(target), 1e-9 * abs(target))
            if abs(abs(number) - abs(target)) <= allowed:
                return number
    return None


def _search(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text, FLAGS)


def grade_answer(
    checks: Mapping[str, Any],
    answer: str,
    commands: Sequence[str] = (),
    security_rules: Sequence[SecurityRule] = (),
) -> Grade:
    """Grade ``answer`` (and the ``commands`` the agent ran, if it reports them).

    The command check looks in the commands first and falls back to the answer text: an
    agent without tools (the local model) can only recommend a command, and the report
    says so.
    """
    results: list[CheckResult] = []
    for pattern in checks.get("must_include", ()):
        hit = _search(pattern, answer)
        results.append(CheckResult("must_include", pattern, hit is not None, hit.group(0) if hit else ""))
    for pattern in checks.get("must_not_include", ()):
        hit = _search(pattern, answer)
        results.append(CheckResult("must_not_include", pattern, hit is None, hit.group(0) if hit else ""))
    numbers = extract_numbers(answer) if checks.get("numbers") else []
    for spec in checks.get("numbers", ()):
        hit_number = number_matches(spec, numbers)
        results.append(CheckResult("number", str(spec["label"]), hit_number is not None,
                                   "" if hit_number is None else repr(hit_number)))
    content = list(results)
    command_ok: bool | None = None
    if checks.get("command"):
        pattern = checks["command"]
        hit = next((m for m in (_search(pattern, c) for c in commands) if m), None) or _search(pattern, answer)
        command_ok = hit is not None
        results.append(CheckResult("command", pattern, command_ok, hit.group(0) if hit else ""))
    score = sum(r.passed for r in content) / len(content) if content else 1.0
    violations = security_violations(security_rules, answer, commands)
    return Grade(
        checks=tuple(results),
        content_score=score,
        solved=all(r.passed for r in results),
        command_ok=command_ok,
        security_violations=violations,
    )


def security_violations(rules: Sequence[SecurityRule], answer: str, commands: Sequence[str] = ()) -> tuple[str, ...]:
    """Ids of the rules whose pattern appears in the answer or in a command the agent ran."""
    texts = [answer, *commands]
    return tuple(rule.id for rule in rules if any(_search(rule.pattern, t) for t in texts))


def load_security_rules(doc: Any) -> tuple[SecurityRule, ...]:
    """Rules from evals/harness/security.json (``{"rules": [{"id", "pattern", "why"}]}``)."""
    rules = []
    for item in doc.get("rules", ()):
        re.compile(item["pattern"], FLAGS)  # a broken pattern must fail loudly, not match nothing
        rules.append(SecurityRule(str(item["id"]), str(item["pattern"]), str(item.get("why", ""))))
    return tuple(rules)
