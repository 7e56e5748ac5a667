"""Run every Tier-1 check on one package folder, in the order a reader would fix them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtune.lint import cards, frontmatter, links, reference_validator, security, skill_body, versions
from memtune.lint.findings import Finding, counts, error, info, sort_key
from memtune.lint.package import Package, ignored_but_installable, load_rules, shipped_files


@dataclass(frozen=True)
class Options:
    run_skills_ref: bool = True
    strict_dirname: bool = False  # folder must equal the skill name (lint an installed copy)


@dataclass(frozen=True)
class Report:
    root: Path
    findings: tuple[Finding, ...]
    files_scanned: int
    file_list_method: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "summary": {
                **counts(self.findings),
                "files_scanned": self.files_scanned,
                "file_list": self.file_list_method,
            },
            "findings": [f.as_dict() for f in self.findings],
        }


def lint(root: Path, options: Options = Options()) -> Report:
    rules = load_rules("rules")
    package = Package(root)
    findings: list[Finding] = []

    skill_md = root / frontmatter.SKILL_FILE
    text = package.read_text(frontmatter.SKILL_FILE)
    if text is None:
        findings.append(
            error("spec/skill-md-missing", "SKILL.md is missing", "add SKILL.md with YAML frontmatter", "SKILL.md")
        )
    else:
        try:
            doc = frontmatter.parse(text)
        except frontmatter.FrontmatterError as exc:
            findings.append(error("spec/frontmatter", str(exc), "fix the YAML frontmatter", "SKILL.md", exc.line))
            doc = None
        if doc is not None:
            findings += frontmatter.check(doc, text, root.resolve().name, rules["frontmatter"], options.strict_dirname)
            findings += skill_body.check(doc, package, rules["skill_body"])
            metadata = doc.data.get("metadata")
            version = metadata.get("version") if isinstance(metadata, dict) else None
            findings += versions.check(version, package, rules["versions"], rules["skill_card"])
        if options.run_skills_ref:
            name = doc.data.get("name") if doc is not None else None
            findings += reference_validator.validate_copy(skill_md, name)

    findings += cards.check_skill_card(package, rules["skill_card"])
    findings += cards.check_card_yaml(package, rules["card"])
    findings += cards.check_evals(package, rules["evals"])
    findings += links.check(package, rules["links"])

    files, method = shipped_files(root)
    findings += security.check(package, files, load_rules("security"))
    findings.append(info("security/scope", f"scanned {len(files)} shipped files (listed by {method})"))
    local_only = ignored_but_installable(root)
    if local_only:
        shown = ", ".join(local_only[:8]) + (f", ... ({len(local_only) - 8} more)" if len(local_only) > 8 else "")
        findings.append(
            info(
                "security/local-install-extra",
                f"git-ignored, not scanned, yet copied by a local `npx skills add` of this folder: {shown}",
                "install from the pushed repository (or a `git archive` export), not from a work tree",
            )
        )
    return Report(root, tuple(sorted(findings, key=sort_key)), len(files), method)
