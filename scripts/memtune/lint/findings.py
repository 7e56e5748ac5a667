"""The one record every lint check produces, and how a list of them is summarised.

Stdlib only: the CLI imports this before it knows whether PyYAML & co. are installed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True)
class Finding:
    """One problem (or, for ``info``, one fact worth knowing) about the package.

    ``rule`` is a stable slug (``spec/name-format``) that tests and CI can match on;
    ``file`` is relative to the package root; ``line`` is 1-based when known.
    """

    rule: str
    severity: str
    message: str
    fix: str = ""
    file: str = ""
    line: int | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def location(self) -> str:
        if not self.file:
            return "-"
        return f"{self.file}:{self.line}" if self.line else self.file


def error(rule: str, message: str, fix: str = "", file: str = "", line: int | None = None) -> Finding:
    return Finding(rule, ERROR, message, fix, file, line)


def warning(rule: str, message: str, fix: str = "", file: str = "", line: int | None = None) -> Finding:
    return Finding(rule, WARNING, message, fix, file, line)


def info(rule: str, message: str, fix: str = "", file: str = "", line: int | None = None) -> Finding:
    return Finding(rule, INFO, message, fix, file, line)


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """``{"errors": n, "warnings": n, "info": n}`` (the keys the JSON summary uses)."""
    tally = {ERROR: 0, WARNING: 0, INFO: 0}
    for finding in findings:
        tally[finding.severity] += 1
    return {"errors": tally[ERROR], "warnings": tally[WARNING], "info": tally[INFO]}


def sort_key(finding: Finding) -> tuple[int, str, int, str]:
    """Errors first, then warnings, then info; within a severity, by file and line."""
    return (SEVERITIES.index(finding.severity), finding.file, finding.line or 0, finding.rule)
