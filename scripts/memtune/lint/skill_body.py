"""SKILL.md's body: short enough for progressive disclosure, with the sections agents rely on.

The Failure Diagnosis table is also parsed by diagnose.py, so its columns are checked here
too; helper commands quoted in the body must name scripts that exist.
"""

from __future__ import annotations

import re
from typing import Any

from memtune.lint import markdown
from memtune.lint.findings import Finding, error, warning
from memtune.lint.frontmatter import SKILL_FILE, SkillDocument
from memtune.lint.package import Package

HELPER_REF = re.compile(r"\bscripts/([A-Za-z0-9_]+)\.py\b")


def check(doc: SkillDocument, package: Package, rules: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    body_lines = len(doc.body.splitlines())
    if body_lines > rules["max_lines"]:
        findings.append(
            error(
                "body/too-long",
                f"SKILL.md body is {body_lines} lines; the limit is {rules['max_lines']}",
                "move deep material to references/*.md and link it",
                SKILL_FILE,
                doc.body_first_line + rules["max_lines"],
            )
        )
    offset = doc.body_first_line - 1
    toks = markdown.tokens(doc.body)
    found = markdown.headings(toks, offset)
    level2 = {h.text.strip().lower(): h for h in found if h.level == 2}
    for section in rules["required_sections"]:
        if section.lower() not in level2:
            findings.append(
                error(
                    "body/section-missing",
                    f"SKILL.md has no '## {section}' section",
                    f"add a level-2 heading '## {section}'",
                    SKILL_FILE,
                )
            )
    findings += _check_diagnosis_table(toks, offset, rules)
    findings += _check_helpers(doc, package, rules)
    return findings


def _check_diagnosis_table(toks: list[Any], offset: int, rules: dict[str, Any]) -> list[Finding]:
    section = rules["diagnosis_section"]
    columns = [c.lower() for c in rules["diagnosis_columns"]]
    in_section = [t for t in markdown.tables(toks, offset) if t.section.lower() == section.lower()]
    if not in_section:
        return [
            error(
                "body/diagnosis-table",
                f"the '{section}' section has no Markdown table",
                f"add a table with columns {' | '.join(rules['diagnosis_columns'])}",
                SKILL_FILE,
            )
        ]
    table = in_section[0]
    if [h.lower() for h in table.header] != columns:
        return [
            error(
                "body/diagnosis-table",
                f"the '{section}' table's columns are {' | '.join(table.header)}; diagnose.py expects {' | '.join(rules['diagnosis_columns'])}",
                "rename the header cells",
                SKILL_FILE,
                table.line,
            )
        ]
    findings = []
    if not table.rows:
        findings.append(
            error(
                "body/diagnosis-table",
                f"the '{section}' table has no rows",
                "add one row per failure",
                SKILL_FILE,
                table.line,
            )
        )
    for number, row in enumerate(table.rows, start=1):
        empty = [rules["diagnosis_columns"][i] for i, cell in enumerate(row) if not cell]
        if empty:
            findings.append(
                error(
                    "body/diagnosis-table",
                    f"row {number} of the '{section}' table has empty cells: {', '.join(empty)}",
                    "fill every cell",
                    SKILL_FILE,
                    table.line,
                )
            )
    return findings


def _check_helpers(doc: SkillDocument, package: Package, rules: dict[str, Any]) -> list[Finding]:
    findings = []
    named: set[str] = set()
    for number, line in enumerate(doc.body.splitlines(), start=doc.body_first_line):
        for match in HELPER_REF.finditer(line):
            name = match.group(1)
            named.add(name)
            if not (package.root / "scripts" / f"{name}.py").is_file():
                findings.append(
                    error(
                        "body/helper-missing",
                        f"SKILL.md runs scripts/{name}.py, which does not exist",
                        "fix the command or add the helper",
                        SKILL_FILE,
                        number,
                    )
                )
    for helper in rules["agent_helpers"]:
        if helper not in named:
            findings.append(
                warning(
                    "body/helper-undocumented",
                    f"SKILL.md never gives the command for scripts/{helper}.py",
                    "add one line saying when to run it and the exact command",
                    SKILL_FILE,
                )
            )
    return findings
