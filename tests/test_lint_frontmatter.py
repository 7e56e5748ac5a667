"""Frontmatter parsing and spec rules, including the path taken without strictyaml/skills-ref."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memtune.lint import frontmatter, reference_validator
from memtune.lint.package import load_rules

RULES = load_rules("rules")["frontmatter"]
GOOD = """---
name: demo-skill
description: Does one thing well. Use for 'demo'.
license: Apache-2.0
metadata:
  author: Jane Doe <jane@example.com>
  version: 1.2.3
  tags: demo, example
---

# Demo
"""


def check(text: str, folder: str = "demo-skill", **kw) -> list[tuple[str, str]]:
    doc = frontmatter.parse(text)
    return [(f.rule, f.severity) for f in frontmatter.check(doc, text, folder, RULES, **kw)]


def test_good_header_has_no_findings() -> None:
    assert check(GOOD) == []


def test_body_line_number_points_after_the_header() -> None:
    doc = frontmatter.parse(GOOD)
    assert GOOD.splitlines()[doc.body_first_line - 1] == ""
    assert doc.body.lstrip().startswith("# Demo")


@pytest.mark.parametrize(
    "text, message",
    [
        ("# no header\n", "must start with a '---' line"),
        ("---\nname: x\n", "never closed"),
        ("---\n- a\n- b\n---\n", "mapping"),
    ],
)
def test_unparseable_headers_raise_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(frontmatter.FrontmatterError, match=message):
        frontmatter.parse(text)


@pytest.mark.parametrize("name", ["Demo", "demo_skill", "-demo", "demo-", "de--mo", "d" * 65])
def test_bad_names(name: str) -> None:
    found = check(GOOD.replace("name: demo-skill", f"name: {name}"), folder=name)
    assert any(rule in ("spec/name-format", "spec/name-length") and sev == "error" for rule, sev in found), found


def test_folder_mismatch_is_info_unless_strict() -> None:
    assert check(GOOD, folder="checkout") == [("spec/name-folder", "info")]
    assert check(GOOD, folder="checkout", strict_dirname=True) == [("spec/name-folder", "error")]


def test_compatibility_limit() -> None:
    assert check(GOOD.replace("license:", f"compatibility: {'c' * 500}\nlicense:")) == []
    assert check(GOOD.replace("license:", f"compatibility: {'c' * 501}\nlicense:")) == [
        ("spec/compatibility-length", "error")
    ]


@pytest.mark.parametrize(
    "old, new, rule",
    [
        ("  version: 1.2.3\n", "  version: one\n", "meta/version"),
        ("  tags: demo, example\n", "  tags: demo, Demo Tag\n", "meta/tags"),
        ("  tags: demo, example\n", "  tags: demo, demo\n", "meta/tags"),
        ("  author: Jane Doe <jane@example.com>\n", "  author: jane@example.com\n", "meta/author"),
        ("  version: 1.2.3\n", "", "meta/missing"),
    ],
)
def test_metadata_rules(old: str, new: str, rule: str) -> None:
    assert check(GOOD.replace(old, new)) == [(rule, "error")]


def test_without_strictyaml_falls_back_and_still_rejects_list_metadata(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "strictyaml", None)  # import now raises ImportError
    text = GOOD.replace("tags: demo, example", "tags: [demo, example]")
    found = check(text)
    assert ("spec/parser", "info") in found
    assert ("spec/metadata-type", "error") in found
    assert frontmatter.parse(GOOD).parser == "yaml.safe_load"


def test_with_strictyaml_a_flow_list_is_a_parse_error() -> None:
    pytest.importorskip("strictyaml")  # dev installs have it (skills-ref depends on it)
    with pytest.raises(frontmatter.FrontmatterError, match="strictyaml"):
        frontmatter.parse(GOOD.replace("tags: demo, example", "tags: [demo, example]"))


def test_reference_validator_absent_is_info(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "skills_ref.validator", None)
    skill = tmp_path / "SKILL.md"
    skill.write_text(GOOD, encoding="utf-8")
    found = reference_validator.validate_copy(skill, "demo-skill")
    assert [(f.rule, f.severity) for f in found] == [("spec/skills-ref", "info")]
    assert "not installed" in found[0].message


def test_reference_validator_runs_on_a_copy_named_after_the_skill(tmp_path: Path) -> None:
    pytest.importorskip("skills_ref")
    skill = tmp_path / "SKILL.md"  # the folder is named after pytest's tmp dir, not the skill
    skill.write_text(GOOD, encoding="utf-8")
    assert [f.severity for f in reference_validator.validate_copy(skill, "demo-skill")] == ["info"]
    skill.write_text(GOOD.replace("license:", "when_to_use: x\nlicense:"), encoding="utf-8")
    assert [f.severity for f in reference_validator.validate_copy(skill, "demo-skill")] == ["error"]
