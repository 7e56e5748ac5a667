"""SKILL.md's YAML header: split it off, parse it the way skills-ref does, check the spec.

skills-ref parses the header with strictyaml (no flow lists, no duplicate keys, every
scalar a string), so a header PyYAML accepts can still fail ``agentskills validate``.
We parse with strictyaml when it is importable and fall back to ``yaml.safe_load`` plus
explicit type checks when it is not, saying so in an info finding.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from memtune.lint.findings import Finding, error, info

SKILL_FILE = "SKILL.md"


class FrontmatterError(ValueError):
    """SKILL.md has no parseable YAML header; the message says what is wrong."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class SkillDocument:
    """SKILL.md split into its header (parsed) and its Markdown body."""

    data: dict[str, Any]
    body: str
    body_first_line: int  # 1-based line number of the body's first line in SKILL.md
    parser: str
    notes: tuple[str, ...] = field(default=())


def split(text: str) -> tuple[str, str, int]:
    """``(header_text, body_text, body_first_line)``: the header sits between two ``---`` lines."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != "---":
        raise FrontmatterError("SKILL.md must start with a '---' line opening the YAML frontmatter", 1)
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r\n") == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :]), index + 2
    raise FrontmatterError("the YAML frontmatter is never closed by a '---' line", 1)


def parse(text: str) -> SkillDocument:
    header, body, body_line = split(text)
    data, parser, notes = _parse_header(header)
    if not isinstance(data, dict):
        raise FrontmatterError("the frontmatter must be a YAML mapping (key: value lines)", 2)
    return SkillDocument(data=data, body=body, body_first_line=body_line, parser=parser, notes=tuple(notes))


def _parse_header(header: str) -> tuple[Any, str, list[str]]:
    try:
        import strictyaml
    except ImportError:
        strictyaml = None
    if strictyaml is not None:
        try:
            return strictyaml.load(header).data, "strictyaml", []
        except strictyaml.YAMLError as exc:
            raise FrontmatterError(
                f"strictyaml (as used by skills-ref) rejects the frontmatter: {_one_line(exc)}", _mark_line(exc)
            ) from None
    import yaml

    from memtune.files import yaml_guard

    try:
        data = yaml_guard.safe_load(header)
    except yaml_guard.YamlLimitError as exc:
        raise FrontmatterError(f"the frontmatter YAML {exc}", 1) from None
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"invalid YAML in the frontmatter: {_one_line(exc)}", _mark_line(exc)) from None
    note = "strictyaml is not installed: parsed with yaml.safe_load (install skills-ref for the exact spec parser)"
    return data, "yaml.safe_load", [note]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _mark_line(exc: Exception) -> int | None:
    """Line of a YAML error inside SKILL.md (the header starts on line 2)."""
    for attr in ("problem_mark", "context_mark"):
        line = getattr(getattr(exc, attr, None), "line", None)
        if isinstance(line, int):
            return line + 2
    return None


def field_line(text: str, key: str) -> int | None:
    """1-based line of a top-level ``key:`` in SKILL.md, for pointing findings at it."""
    pattern = re.compile(rf"^{re.escape(key)}\s*:")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


def check(
    doc: SkillDocument, text: str, folder_name: str, rules: dict[str, Any], strict_dirname: bool = False
) -> list[Finding]:
    """The agentskills.io spec rules plus this project's metadata rules."""
    findings: list[Finding] = [info("spec/parser", note, file=SKILL_FILE) for note in doc.notes]
    data = doc.data

    def where(key: str) -> int | None:
        return field_line(text, key)

    unknown = sorted(set(map(str, data)) - set(rules["allowed_fields"]))
    for key in unknown:
        findings.append(
            error(
                "spec/unknown-field",
                f"top-level frontmatter field '{key}' is not allowed by the Agent Skills spec "
                f"(allowed: {', '.join(rules['allowed_fields'])})",
                "move its content into 'description' (trigger phrases) or under 'metadata' as a string",
                SKILL_FILE,
                where(key),
            )
        )
    for key in rules["required_fields"]:
        if key not in data:
            findings.append(
                error(
                    "spec/missing-field",
                    f"required frontmatter field '{key}' is missing",
                    f"add '{key}:' to the frontmatter",
                    SKILL_FILE,
                    2,
                )
            )

    if "name" in data:
        findings += _check_name(data["name"], folder_name, rules, strict_dirname, where("name"))
    if "description" in data:
        findings += _check_text(data["description"], "description", 1, rules["description_max"], where("description"))
    if "compatibility" in data:
        findings += _check_text(
            data["compatibility"], "compatibility", 1, rules["compatibility_max"], where("compatibility")
        )
    if "license" in data:
        findings += _check_text(data["license"], "license", 1, None, where("license"))
    if "allowed-tools" in data:
        findings += _check_text(data["allowed-tools"], "allowed-tools", 1, None, where("allowed-tools"))
    findings += _check_metadata(data.get("metadata"), rules, where("metadata") or 2)
    return findings


def _check_name(
    name: Any, folder_name: str, rules: dict[str, Any], strict_dirname: bool, line: int | None
) -> list[Finding]:
    if not isinstance(name, str) or not name.strip():
        return [
            error(
                "spec/name-format",
                "'name' must be a non-empty string",
                "set name: <lowercase-hyphenated-name>",
                SKILL_FILE,
                line,
            )
        ]
    findings = []
    if len(name) > rules["name_max"]:
        findings.append(
            error(
                "spec/name-length",
                f"'name' is {len(name)} characters; the limit is {rules['name_max']}",
                "shorten the name",
                SKILL_FILE,
                line,
            )
        )
    if not re.fullmatch(rules["name_pattern"], name):
        findings.append(
            error(
                "spec/name-format",
                f"name '{name}' must be lowercase letters, digits and single hyphens, not starting or ending with a hyphen",
                "e.g. nemo-mbridge-perf-memory-tuning",
                SKILL_FILE,
                line,
            )
        )
    normalized_folder = unicodedata.normalize("NFKC", folder_name)
    if normalized_folder != unicodedata.normalize("NFKC", name.strip()):
        message = (
            f"the package folder is '{folder_name}' but the skill is named '{name}'; the spec requires "
            "them to match, so installed copies are named after the skill"
        )
        if strict_dirname:
            findings.append(error("spec/name-folder", message, f"rename the folder to '{name}'", SKILL_FILE, line))
        else:
            findings.append(
                info(
                    "spec/name-folder",
                    message
                    + " (a checkout may be named anything; the skills-ref check uses a copy named after the skill)",
                    file=SKILL_FILE,
                    line=line,
                )
            )
    return findings


def _check_text(value: Any, key: str, minimum: int, maximum: int | None, line: int | None) -> list[Finding]:
    if not isinstance(value, str):
        return [
            error(
                f"spec/{key}-type",
                f"'{key}' must be a string, found {type(value).__name__}",
                f"write {key} as plain text",
                SKILL_FILE,
                line,
            )
        ]
    length = len(value)
    if length < minimum or not value.strip():
        return [error(f"spec/{key}-length", f"'{key}' is empty", f"write a non-empty {key}", SKILL_FILE, line)]
    if maximum is not None and length > maximum:
        return [
            error(
                f"spec/{key}-length",
                f"'{key}' is {length} characters; the limit is {maximum}",
                f"shorten {key} to at most {maximum} characters",
                SKILL_FILE,
                line,
            )
        ]
    return []


def _check_metadata(metadata: Any, rules: dict[str, Any], line: int) -> list[Finding]:
    if metadata is None:
        return [
            error(
                "meta/missing",
                "frontmatter has no 'metadata' map (author, version, tags)",
                "add metadata: with author, version and tags",
                SKILL_FILE,
                line,
            )
        ]
    if not isinstance(metadata, dict):
        return [
            error(
                "spec/metadata-type",
                f"'metadata' must be a map of strings, found {type(metadata).__name__}",
                "write metadata as 'key: value' lines",
                SKILL_FILE,
                line,
            )
        ]
    findings = []
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            findings.append(
                error(
                    "spec/metadata-type",
                    f"metadata '{key}' must map a string to a string, found {type(value).__name__}",
                    "write lists as one comma-separated string (e.g. tags: a, b, c)",
                    SKILL_FILE,
                    line,
                )
            )
    for key in rules["required_metadata"]:
        if key not in metadata:
            findings.append(
                error("meta/missing", f"metadata.{key} is missing", f"add {key}: under metadata", SKILL_FILE, line)
            )
    author = metadata.get("author")
    if isinstance(author, str) and not re.fullmatch(rules["author_pattern"], author.strip()):
        findings.append(
            error(
                "meta/author",
                f"metadata.author '{author}' is not in 'Name <email>' form",
                "e.g. author: Jane Doe <jane@example.com>",
                SKILL_FILE,
                line,
            )
        )
    version = metadata.get("version")
    if isinstance(version, str) and not re.fullmatch(rules["version_pattern"], version.strip()):
        findings.append(
            error(
                "meta/version",
                f"metadata.version '{version}' is not a release version like 1.2.3",
                "use MAJOR.MINOR.PATCH",
                SKILL_FILE,
                line,
            )
        )
    tags = metadata.get("tags")
    if isinstance(tags, str):
        items = [tag.strip() for tag in tags.split(",")]
        bad = [tag for tag in items if not re.fullmatch(rules["tag_pattern"], tag)]
        if not tags.strip() or bad:
            findings.append(
                error(
                    "meta/tags",
                    f"metadata.tags must be comma-separated lowercase tags; bad: {bad or ['(empty)']}",
                    "e.g. tags: gpu-memory, oom, lora",
                    SKILL_FILE,
                    line,
                )
            )
        elif len(set(items)) != len(items):
            findings.append(error("meta/tags", "metadata.tags repeats a tag", "list each tag once", SKILL_FILE, line))
    return findings
