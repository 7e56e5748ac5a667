"""Security scan of every shipped file: secrets, download-and-run, unsafe Python.

Everything in the repository reaches every user (``npx skills add`` copies it all), so
the scan covers tests, test data and dot-files as well as the helpers. Secrets are
searched in every file (binary files as latin-1, ``.gz`` files after decompressing);
pipe-to-shell in text; unsafe calls in Python via ``pysafety`` (syntax tree, not text).
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.lint import pysafety
from memtune.lint.findings import Finding, error, info
from memtune.lint.package import Package


@dataclass(frozen=True)
class TextRule:
    id: str
    what: str
    pattern: re.Pattern[str]


def _compile(entries: list[dict[str, str]]) -> tuple[TextRule, ...]:
    return tuple(TextRule(e["id"], e["what"], re.compile(e["regex"])) for e in entries)


@dataclass(frozen=True)
class ScanRules:
    secrets: tuple[TextRule, ...]
    pipe_to_shell: tuple[TextRule, ...]
    python: pysafety.PyRules
    max_bytes: int
    markdown: tuple[TextRule, ...] = ()

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> ScanRules:
        return cls(
            _compile(table["secrets"]),
            _compile(table["pipe_to_shell"]),
            pysafety.PyRules.from_table(table),
            int(table["max_scan_bytes"]),
            _compile(table.get("markdown_injection", [])),
        )


_CONTINUATION = re.compile(r"\\\r?\n")


def join_continuations(text: str) -> str:
    """Backslash-newline replaced by spaces of the same length: a command split over lines
    reads as one line, and every offset (so every reported line number) stays the same."""
    return _CONTINUATION.sub(lambda m: " " * len(m.group(0)), text)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def scan_text(text: str, label: str, rules: ScanRules, is_text: bool = True) -> list[Finding]:
    """Secrets (always) and pipe-to-shell (text only) in one file's content."""
    findings = []
    for rule in rules.secrets:
        for match in rule.pattern.finditer(text):
            findings.append(
                error(
                    f"security/{rule.id}",
                    f"{rule.what} in a shipped file",
                    "remove it from the repository (and rotate it: it has been exposed)",
                    label,
                    _line_of(text, match.start()),
                )
            )
    if is_text:
        joined = join_continuations(text)
        for rule in rules.pipe_to_shell:
            for match in rule.pattern.finditer(joined):
                findings.append(
                    error(
                        f"security/{rule.id}",
                        f"{rule.what}: {' '.join(match.group(0).split())[:80]}",
                        "download, verify, then run a pinned file; never pipe the network into a shell",
                        label,
                        _line_of(text, match.start()),
                    )
                )
    if is_text and label.lower().endswith(".md"):
        for rule in rules.markdown:
            for match in rule.pattern.finditer(text):
                findings.append(
                    error(
                        f"security/{rule.id}",
                        f"{rule.what}: {match.group(0)[:80]!r}",
                        "remove the line: documentation informs the agent, it never overrides its instructions",
                        label,
                        _line_of(text, match.start()),
                    )
                )
    return findings


def _decode(data: bytes) -> tuple[str, bool]:
    """The text to scan and whether the file is text (no NUL byte, valid UTF-8)."""
    if b"\0" in data[:8192]:
        return data.decode("latin-1"), False
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("latin-1"), False


def scan_file(path: Path, label: str, rules: ScanRules) -> list[Finding]:
    with open(path, "rb") as handle:
        data = handle.read(rules.max_bytes + 1)
    findings: list[Finding] = []
    if len(data) > rules.max_bytes:
        data = data[: rules.max_bytes]
        findings.append(
            info(
                "security/truncated",
                f"larger than {rules.max_bytes} bytes: only the first part was scanned",
                file=label,
            )
        )
    if label.endswith(".gz"):
        try:
            inner = gzip.decompress(data)[: rules.max_bytes]
        except (OSError, EOFError, zlib.error):
            inner = None
        if inner is not None:
            text, is_text = _decode(inner)
            findings += scan_text(text, label, rules, is_text)
            return findings
    text, is_text = _decode(data)
    findings += scan_text(text, label, rules, is_text)
    if is_text:
        for py_label, source in pysafety.iter_python_sources([(label, text)]):
            findings += pysafety.scan(source, py_label, rules.python)
    return findings


def check(package: Package, files: list[Path], table: dict[str, Any]) -> list[Finding]:
    rules = ScanRules.from_table(table)
    root = package.root.resolve()
    findings: list[Finding] = []
    for path in files:
        label = path.relative_to(package.root).as_posix() if path.is_relative_to(package.root) else str(path)
        if path.is_symlink():
            target = path.resolve()
            if target != root and root not in target.parents:
                findings.append(
                    error(
                        "security/symlink-outside",
                        f"symbolic link to {target}, outside the package",
                        "ship the file itself, not a link out of the package",
                        label,
                    )
                )
                continue
        findings += scan_file(path, label, rules)
    return findings
