"""One version everywhere: SKILL.md metadata.version is the release; the others must agree.

A bump that misses one file is the classic way a signed package and its card disagree.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

from memtune.lint.cards import normalize_heading
from memtune.lint.findings import Finding, warning
from memtune.lint.package import Package


def check(version: Any, package: Package, rules: dict[str, Any], card_rules: dict[str, Any]) -> list[Finding]:
    if not isinstance(version, str):
        return []  # frontmatter checks already report a missing or mistyped version
    findings = []
    for label, found in (
        (rules["pyproject"], _pyproject_version(package.read_text(rules["pyproject"]))),
        (rules["python_package"], _dunder_version(package.read_text(rules["python_package"]))),
    ):
        if found is not None and found != version:
            findings.append(
                warning(
                    "meta/version-mismatch",
                    f"{label} says version {found}; SKILL.md metadata.version is {version}",
                    "bump every version together",
                    label,
                )
            )
    card = card_rules["file"]
    text = package.read_text(card)
    if text is not None:
        section = _section_after(text, "skill version")
        if section is not None and version not in section:
            findings.append(
                warning(
                    "meta/version-mismatch",
                    f"{card} 'Skill Version' does not mention {version}",
                    "state the version SKILL.md declares",
                    card,
                )
            )
    return findings


def _pyproject_version(text: str | None) -> str | None:
    if text is None:
        return None
    if sys.version_info < (3, 11):  # no tomllib: a [project] version line is enough to compare
        match = re.search(r'(?ms)^\[project\].*?^version\s*=\s*"([^"]+)"', text)
        return match.group(1) if match else None
    else:
        import tomllib

        try:
            project = tomllib.loads(text).get("project")
        except tomllib.TOMLDecodeError:
            return None
        # the linted package's pyproject may say anything: `project = 1` must not crash the lint
        version = project.get("version") if isinstance(project, dict) else None
        return version if isinstance(version, str) else None


def _dunder_version(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _section_after(text: str, wanted: str) -> str | None:
    """Plain-text scan for a heading (any level) whose normalized text starts with ``wanted``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"^(#{1,6})\s+(.*)$", line)
        if match and normalize_heading(match.group(2)).startswith(wanted):
            rest = []
            for following in lines[index + 1 :]:
                if re.match(rf"^#{{1,{len(match.group(1))}}}\s", following):
                    break
                rest.append(following)
            return "\n".join(rest)
    return None
