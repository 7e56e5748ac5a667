"""The governance files next to SKILL.md: skill-card.md, card.yaml, evals/evals.json."""

from __future__ import annotations

import json
import re
from typing import Any

from memtune.lint import markdown
from memtune.lint.findings import Finding, error, info, warning
from memtune.lint.package import Package
from memtune.lint.schema_check import load_schema, violations


def normalize_heading(text: str) -> str:
    """'Reference(s): <br>' -> 'references'; 'License/Terms of Use:' -> 'license/terms of use'."""
    text = re.sub(r"<br\s*/?>", " ", text, flags=re.IGNORECASE)
    text = text.replace("(s)", "s").strip().rstrip(":").strip().lower()
    return re.sub(r"\s+", " ", text)


def check_skill_card(package: Package, rules: dict[str, Any]) -> list[Finding]:
    name = rules["file"]
    text = package.read_text(name)
    if text is None:
        return [
            error("card/skill-card-missing", f"{name} is missing", "add the NVIDIA skill-card governance file", name)
        ]
    toks = markdown.tokens(text)
    found = markdown.headings(toks)
    lines = text.splitlines()
    findings = []
    located: dict[str, markdown.Heading] = {}
    for section in rules["required_sections"]:
        pattern = re.compile(section["match"])
        match = next((h for h in found if pattern.match(normalize_heading(h.text))), None)
        if match is None:
            findings.append(
                error(
                    "card/section-missing",
                    f"{name} has no '{section['name']}' section",
                    f"add a heading '## {section['name']}'",
                    name,
                )
            )
            continue
        located[section["name"]] = match
        content = _section_text(lines, found, match)
        if not re.sub(r"<br\s*/?>", "", content, flags=re.IGNORECASE).strip():
            findings.append(
                error(
                    "card/section-empty",
                    f"{name} section '{section['name']}' is empty",
                    "write the section",
                    name,
                    match.line,
                )
            )
    benchmark = rules["benchmark_file"]
    for section_name in rules["benchmark_sections"]:
        heading = located.get(section_name)
        if heading is not None and benchmark not in _section_text(lines, found, heading):
            findings.append(
                warning(
                    "card/benchmark-pointer",
                    f"{name} section '{section_name}' does not point at {benchmark}",
                    f"link {benchmark} instead of quoting figures",
                    name,
                    heading.line,
                )
            )
    return findings


def _section_text(lines: list[str], found: list[markdown.Heading], heading: markdown.Heading) -> str:
    """Text from below ``heading`` up to the next heading of the same or a higher level."""
    later = [h.line for h in found if h.line > heading.line and h.level <= heading.level]
    end = (later[0] - 1) if later else len(lines)
    return "\n".join(lines[heading.line : end])


def check_card_yaml(package: Package, rules: dict[str, Any]) -> list[Finding]:
    import yaml

    name, schema_name = rules["file"], rules["schema"]
    text = package.read_text(name)
    if text is None:
        return [error("card/card-yaml-missing", f"{name} is missing", "add the technique card", name)]
    from memtune.files import yaml_guard

    try:
        card = yaml_guard.safe_load(text)
    except yaml_guard.YamlLimitError as exc:
        return [
            error(
                "card/card-yaml-too-big",
                f"{name}: the YAML {exc}",
                "write the card out plainly, without deep nesting or alias chains",
                name,
            )
        ]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return [
            error(
                "card/card-yaml-syntax",
                f"{name} is not valid YAML: {' '.join(str(exc).split())}",
                "fix the YAML",
                name,
                mark.line + 1 if mark is not None else None,
            )
        ]
    schema, problems = load_schema(package.root / schema_name, "card/schema", schema_name)
    if schema is None:
        return problems
    return violations(card, schema, "card/schema", name)


def check_evals(package: Package, rules: dict[str, Any]) -> list[Finding]:
    name, schema_name = rules["file"], rules["schema"]
    text = package.read_text(name)
    if text is None:
        return [
            info(
                "evals/absent",
                f"{name} does not exist yet; its schema check was skipped",
                f"add {name} and {schema_name}",
                name,
            )
        ]
    try:
        dataset = json.loads(text)
    except json.JSONDecodeError as exc:
        return [error("evals/syntax", f"{name} is not valid JSON: {exc.msg}", "fix the JSON", name, exc.lineno)]
    schema, problems = load_schema(package.root / schema_name, "evals/schema", schema_name)
    if schema is None:
        return problems
    return violations(dataset, schema, "evals/schema", name)
