"""lint_skill.py end to end: the repo lints clean, broken copies report the right errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from helper_cli import Result, invoke
from lint_helpers import REPO_ROOT, SKILL_NAME, copy_package, messages, replace_in, rules, run

NAME_LINE = f"name: {SKILL_NAME}"

# Each test lints a whole copy of the package: unchanged files are scanned once per session.
pytestmark = pytest.mark.usefixtures("cached_security_scan")


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A fresh copy of the package in a folder named after the skill (not a git checkout)."""
    return copy_package(tmp_path)


def lint_cli(*args: str) -> Result:
    return invoke("lint_skill", *args)


# --- the repository itself ---------------------------------------------------------------


def test_repo_lints_with_zero_errors_and_zero_warnings() -> None:
    report = run(REPO_ROOT)
    bad = [f for f in report.findings if f.severity in ("error", "warning")]
    assert bad == []
    assert report.files_scanned > 20


def test_cli_json_on_repo_exits_0_with_one_document() -> None:
    result = lint_cli("--json")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["summary"]["errors"] == 0
    assert document["summary"]["warnings"] == 0
    ran = [f for f in document["findings"] if f["rule"] == "spec/skills-ref"]
    assert ran and ran[0]["severity"] == "info" and "passed" in ran[0]["message"]


def test_copy_named_after_skill_is_clean_and_runs_skills_ref(pkg: Path) -> None:
    report = run(pkg, strict_dirname=True)
    assert rules(report) == set() and rules(report, "warning") == set()
    assert report.file_list_method == "directory walk"
    assert any("passed on a copy named" in m for m in messages(report, "spec/skills-ref"))


def agentskills_cli() -> Path:
    cli = Path(sys.executable).parent / "agentskills"
    assert cli.exists(), "skills-ref's 'agentskills' CLI is missing: pip install -e '.[dev]'"
    return cli


def test_real_agentskills_validate_passes_on_copy_named_after_skill(pkg: Path) -> None:
    result = subprocess.run([str(agentskills_cli()), "validate", str(pkg)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_real_agentskills_validate_rejects_folder_with_another_name(tmp_path: Path) -> None:
    """The by-design failure lint avoids by validating a copy named after the skill."""
    other = copy_package(tmp_path, "some-checkout")
    result = subprocess.run(
        [str(agentskills_cli()), "validate", str(other)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "must match skill name" in result.stdout + result.stderr
    report = run(other)
    assert rules(report) == set()  # lint: info only, unless --strict-dirname
    assert "spec/name-folder" in rules(run(other, strict_dirname=True))


# --- broken copies -----------------------------------------------------------------------


def test_bad_name(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", NAME_LINE, "name: Nemo_MBridge--Memory")
    report = run(pkg)
    assert "spec/name-format" in rules(report)
    assert "spec/skills-ref" in rules(report)  # the reference validator agrees


def test_description_of_1025_chars_is_an_error_and_1024_is_not(pkg: Path) -> None:
    skill = pkg / "SKILL.md"
    original = skill.read_text(encoding="utf-8")
    header_end = original.index("license:")
    for length, expect_error in ((1024, False), (1025, True)):
        skill.write_text(f"---\n{NAME_LINE}\ndescription: {'d' * length}\n" + original[header_end:], encoding="utf-8")
        report = run(pkg)
        assert ("spec/description-length" in rules(report)) is expect_error, length
        assert ("spec/skills-ref" in rules(report)) is expect_error, length
    assert any("1025 characters" in m for m in messages(report, "spec/description-length"))


def test_when_to_use_at_top_level(pkg: Path) -> None:
    replace_in(
        pkg / "SKILL.md", "license: Apache-2.0\n", "license: Apache-2.0\nwhen_to_use: GPU OOM errors, 'out of memory'\n"
    )
    report = run(pkg)
    assert "spec/unknown-field" in rules(report)
    assert any("when_to_use" in m for m in messages(report, "spec/unknown-field"))
    assert "spec/skills-ref" in rules(report)


def test_missing_instructions_section(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", "\n## Instructions\n", "\n## Steps\n")
    report = run(pkg)
    assert messages(report, "body/section-missing") == ["SKILL.md has no '## Instructions' section"]


def test_card_yaml_missing_evidence(pkg: Path) -> None:
    card = yaml.safe_load((pkg / "card.yaml").read_text(encoding="utf-8"))
    del card["evidence"]
    (pkg / "card.yaml").write_text(yaml.safe_dump(card, sort_keys=False), encoding="utf-8")
    report = run(pkg)
    assert any("'evidence' is a required property" in m for m in messages(report, "card/schema"))


def test_private_key_in_a_shipped_file(pkg: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (pkg / "signing" / "oops.pem").write_bytes(pem)
    report = run(pkg)
    hits = [f for f in report.findings if f.rule == "security/private-key"]
    assert [(f.severity, f.file, f.line) for f in hits] == [("error", "signing/oops.pem", 1)]
    assert rules(report) == {"security/private-key"}


def test_link_that_does_not_resolve(pkg: Path) -> None:
    with open(pkg / "SKILL.md", "a", encoding="utf-8") as handle:
        handle.write("- [Gone](references/no-such-file.md)\n")
    report = run(pkg)
    found = [f for f in report.findings if f.rule == "links/unresolved"]
    assert len(found) == 1 and found[0].file == "SKILL.md"
    assert "references/no-such-file.md" in found[0].message


def test_broken_anchor_and_link_escaping_the_package(pkg: Path) -> None:
    with open(pkg / "skill-card.md", "a", encoding="utf-8") as handle:
        handle.write("\nSee [rules](SKILL.md#no-such-heading) and [outside](../elsewhere.md).\n")
    report = run(pkg)
    assert {"links/anchor", "links/outside-package"} <= rules(report)


def test_flow_list_in_metadata_is_rejected_like_skills_ref(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", "  tags: megatron-bridge,", "  tags: [megatron-bridge,")
    replace_in(pkg / "SKILL.md", "pytorch-allocator\n", "pytorch-allocator]\n")
    report = run(pkg)
    assert "spec/frontmatter" in rules(report)


def test_author_without_email(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", " <memtune-maintainers@users.noreply.github.com>", "")
    assert "meta/author" in rules(run(pkg))


def test_missing_skill_card_section(pkg: Path) -> None:
    replace_in(pkg / "skill-card.md", "## Deployment Geography\n", "## Where\n")
    report = run(pkg)
    assert messages(report, "card/section-missing") == ["skill-card.md has no 'Deployment Geography' section"]


def test_diagnosis_table_columns(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", "| Symptom | Cause | Confirm | Fix |", "| Symptom | Cause | Fix | Confirm |")
    assert "body/diagnosis-table" in rules(run(pkg))


def test_evals_checked_against_schema_once_present(pkg: Path) -> None:
    evals = pkg / "evals"
    evals.mkdir(exist_ok=True)
    (evals / "evals.schema.json").write_text(
        json.dumps(
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "required": ["tasks"],
                "properties": {"tasks": {"type": "array", "minItems": 1}},
            }
        ),
        encoding="utf-8",
    )
    (evals / "evals.json").write_text(json.dumps({"tasks": []}), encoding="utf-8")
    assert "evals/schema" in rules(run(pkg))
    (evals / "evals.json").write_text(json.dumps({"tasks": [{"id": "t1"}]}), encoding="utf-8")
    assert "evals/schema" not in rules(run(pkg))


def test_cli_text_output_and_exit_1_on_errors(pkg: Path) -> None:
    replace_in(pkg / "SKILL.md", NAME_LINE, "name: -bad-")
    result = lint_cli(str(pkg))
    assert result.returncode == 1
    assert "spec/name-format" in result.stdout
    assert "error(s)" in result.stdout.splitlines()[-1]


def test_cli_missing_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    result = lint_cli(str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_version_bumped_in_one_place_only_is_a_warning(pkg: Path) -> None:
    replace_in(pkg / "pyproject.toml", 'version = "0.1.0"', 'version = "0.2.0"')
    report = run(pkg)
    assert rules(report) == set()
    assert messages(report, "meta/version-mismatch") == [
        "pyproject.toml says version 0.2.0; SKILL.md metadata.version is 0.1.0"
    ]


def test_odd_pyproject_shapes_are_not_a_crash_nor_a_version(pkg: Path) -> None:
    # found by mypy: `.get("project", {}).get("version")` raised AttributeError on `project = 1`
    (pkg / "pyproject.toml").write_text('project = 1\n[tool.x]\nversion = "9.9"\n', encoding="utf-8")
    assert messages(run(pkg), "meta/version-mismatch") == []
    (pkg / "pyproject.toml").write_text("[project]\nversion = 2\n", encoding="utf-8")
    assert messages(run(pkg), "meta/version-mismatch") == []


def test_unsafe_code_added_to_a_helper_is_caught(pkg: Path) -> None:
    target = pkg / "scripts" / "memtune" / "commands" / "plan_memory.py"
    with open(target, "a", encoding="utf-8") as handle:
        handle.write("\n\ndef _fetch(url):\n    import urllib.request\n    return urllib.request.urlopen(url)\n")
    found = [(f.rule, f.file) for f in run(pkg).findings if f.severity == "error"]
    assert ("security/network", "scripts/memtune/commands/plan_memory.py") in found


def test_reference_not_linked_from_skill_md_is_a_warning(pkg: Path) -> None:
    (pkg / "references" / "hidden.md").write_text("# Hidden\n\nNobody links here.\n", encoding="utf-8")
    report = run(pkg)
    assert rules(report) == set()
    assert [(f.rule, f.file) for f in report.findings if f.severity == "warning"] == [
        ("links/orphan-reference", "references/hidden.md")
    ]
    with open(pkg / "references" / "measured-results.md", "a", encoding="utf-8") as handle:
        handle.write("\nSee also [hidden](hidden.md).\n")  # reachable through a linked reference
    assert rules(run(pkg), "warning") == set()


def test_upstream_shaped_skill_md_fails_the_checks_this_package_passes(pkg: Path) -> None:
    """DESIGN §5 anchor: the upstream SKILL.md's header (name, description, license, when_to_use)
    and section layout (no Instructions/Examples, no metadata) fail exactly these rules."""
    upstream_sections = [
        "What It Is",
        "Quick Decision",
        "Enablement",
        "A Note on VPP",
        "Compatibility and Constraints",
        "Measured Results",
        "Code Anchors",
        "Failure Diagnosis",
        "Known Limitations",
        "Verification",
    ]
    body = "\n".join(f"## {title}\n\nText.\n" for title in upstream_sections)
    (pkg / "SKILL.md").write_text(
        f"---\n{NAME_LINE}\ndescription: Lowering peak GPU memory in Megatron Bridge.\nlicense: Apache-2.0\n"
        "when_to_use: GPU OOM errors; 'out of memory', 'OOM'\n---\n\n# Memory Tuning\n\n" + body,
        encoding="utf-8",
    )
    report = run(pkg)
    assert messages(report, "spec/unknown-field") and "spec/skills-ref" in rules(report)
    missing = messages(report, "body/section-missing")
    assert missing == [
        "SKILL.md has no '## Instructions' section",
        "SKILL.md has no '## Examples' section",
        "SKILL.md has no '## Constraints' section",
    ]
    assert "frontmatter has no 'metadata' map (author, version, tags)" in messages(report, "meta/missing")


def test_symlink_pointing_out_of_the_package(pkg: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not part of the skill\n", encoding="utf-8")
    (pkg / "references" / "notes.txt").symlink_to(outside)
    found = [(f.rule, f.file) for f in run(pkg).findings if f.severity == "error"]
    assert found == [("security/symlink-outside", "references/notes.txt")]
