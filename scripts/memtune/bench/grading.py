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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

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
    def from_json(doc: Mapping[str, Any]) -> Grade:
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


# A size as answers write it: "172 MiB", "2.84GiB", "147.4 GB", "40,406,826,834,985 bytes".
_SIZE = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)\s*"
    r"(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B)(?![A-Za-z])",
    re.IGNORECASE,
)
_PREFIX = {"k": 1, "m": 2, "g": 3, "t": 4}


def significant_digits(number: str) -> int:
    """Digits that carry information: "0.05" has 1, "172" and "2.8" have 3 and 2, "80" has 2."""
    digits = number.replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def extract_sizes(text: str) -> list[tuple[str, tuple[float, ...], float]]:
    """Every size written with a unit: (as written, candidate byte values, rounding allowance).

    Why two candidates: "GB" and "GiB" are used interchangeably in training logs and
    tools (PyTorch prints GiB, many dashboards print the same number as GB), so a prefix
    is read both ways. Why an allowance: "0.17 GiB" is an honest rounding of 172 MiB; the
    last written digit may be off by half a unit (never credited beyond 5%, see
    size_matches)."""
    found = []
    for match in _SIZE.finditer(text):
        number, unit = match.group(1).replace(",", ""), match.group(2).lower()
        value = float(number)
        decimals = len(number.split(".", 1)[1]) if "." in number else 0
        power = _PREFIX.get(unit[0], 0) if unit not in ("b", "byte", "bytes") else 0
        scales = (1.0,) if power == 0 else (1000.0**power, 1024.0**power)
        candidates = tuple(value * scale for scale in scales)
        allowance = 0.5 * 10.0**-decimals * max(scales)
        found.append((match.group(0), candidates, allowance))
    return found


def size_matches(spec: Mapping[str, Any], text: str) -> str | None:
    """The first size in ``text`` within tolerance of ``spec["bytes"]`` (as written), else None.

    A helper's number must carry its unit, and at least ``min_digits`` significant digits
    (default 2): a bare "172" could be anything, and a one-digit "~3 GB" from SKILL.md's
    measured tables lies near many users' numbers by coincidence. A spec whose own
    input is that coarse (values rounded to 0.01 GiB) sets ``min_digits`` to 1."""
    target = float(spec["bytes"])
    relative = float(spec.get("rel_tolerance", 0.02))
    min_digits = int(spec.get("min_digits", 2))
    for written, candidates, allowance in extract_sizes(text):
        number = _SIZE.match(written)
        assert number is not None, written  # ``written`` is a whole _SIZE match, so it matches again
        if significant_digits(number.group(1)) < min_digits:
            continue
        allowed = max(relative * target, min(allowance, 0.05 * target))
        if any(abs(c - target) <= allowed for c in candidates):
            return written
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
        if "bytes" in spec:  # a size with its unit (GiB/GB/MiB/..., rounding accepted)
            written = size_matches(spec, answer)
            results.append(CheckResult("number", str(spec["label"]), written is not None, written or ""))
            continue
        hit_number = number_matches(spec, numbers)
        results.append(
            CheckResult(
                "number", str(spec["label"]), hit_number is not None, "" if hit_number is None else repr(hit_number)
            )
        )
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
