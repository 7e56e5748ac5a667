"""Validate a document against a JSON Schema (draft 2020-12) and report each violation."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memtune.lint.findings import Finding, error


def load_schema(path: Path, rule: str, label: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The schema, or None plus the finding that says why it cannot be used."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, [error(rule, f"schema {label} is missing", "restore the schema file", label)]
    except json.JSONDecodeError as exc:
        return None, [error(rule, f"schema {label} is not valid JSON: {exc.msg}", "fix the JSON", label, exc.lineno)]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return None, [error(rule, f"schema {label} is not a valid JSON Schema: {exc.message}", "fix the schema", label)]
    if not isinstance(schema, dict):  # `true`/`false` are valid schemas, but not ones ours can be
        return None, [error(rule, f"schema {label} is not a JSON object", "write the schema as an object", label)]
    return schema, []


def violations(instance: Any, schema: Mapping[str, Any], rule: str, label: str) -> list[Finding]:
    """One error per schema violation, located by its JSON path inside the document."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    findings = []
    for problem in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        where = "/".join(str(part) for part in problem.absolute_path) or "(top level)"
        findings.append(
            error(rule, f"{label} at {where}: {problem.message}", "make the document match its schema", label)
        )
    return findings
