"""lint_skill.py: Tier-1 static validation of this skill package."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memtune.cli import Command, argument, invoke, option, print_json
from memtune.commands.options import json_option
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError
from memtune.files import paths

if TYPE_CHECKING:  # the linter (PyYAML, markdown-it, jsonschema) loads only when it runs
    from memtune.lint.runner import Report

DESCRIPTION = """\
Tier-1 static validation of an Agent Skill package (this one by default).

Checks: the agentskills.io frontmatter rules (name, description <= 1024 chars, allowed
fields, string metadata) and the reference validator skills-ref on a copy named after the
skill; body <= 500 lines with the required sections and a Failure Diagnosis table;
metadata author 'Name <email>', version and tags; skill-card.md governance sections;
card.yaml and evals/evals.json against their JSON Schemas; every relative Markdown link;
and a security scan of every shipped file (private keys, tokens and cloud secret keys,
network calls, shell=True, eval/exec and disguised forms of them, process spawning,
pickle/marshal/unsafe yaml loads, download-then-run and pipes into a shell, prompt
injection in Markdown).

Exit 0: no errors. Exit 1: at least one error (or warning, with --strict). Exit 2: bad usage."""

EPILOG = """\
examples:
  python3 scripts/lint_skill.py                      # lint this package
  python3 scripts/lint_skill.py --json               # one JSON document: summary + findings
  python3 scripts/lint_skill.py -v ~/.agents/skills/nemo-mbridge-perf-memory-tuning --strict-dirname
"""


@click.command(
    "lint-skill", cls=Command, short_help="Tier-1 static validation of this package", help=DESCRIPTION, epilog=EPILOG
)
@argument(
    "root",
    required=False,
    default=str(paths.SKILL_ROOT),
    help_text="package folder to lint (default: the package this script belongs to)",
)
@json_option()
@option("-v", "--verbose", is_flag=True, help="also print info findings")
@option("--strict", is_flag=True, help="exit 1 on warnings too")
@option("--strict-dirname", is_flag=True, help="require the folder name to equal the skill name (for installed copies)")
@option("--no-skills-ref", is_flag=True, help="skip the skills-ref reference validator")
def command(root: str, as_json: bool, verbose: bool, strict: bool, strict_dirname: bool, no_skills_ref: bool) -> int:
    folder = Path(root).expanduser()
    if not folder.is_dir():
        raise InputError(f"{folder}: not a directory; pass the skill package folder (the one holding SKILL.md)")

    from memtune.lint.findings import counts
    from memtune.lint.runner import Options, lint

    report = lint(folder, Options(run_skills_ref=not no_skills_ref, strict_dirname=strict_dirname))
    tally = counts(report.findings)
    if as_json:
        print_json(report.as_dict())
    else:
        _print_text(report, verbose, tally)
    failed = tally["errors"] > 0 or (strict and tally["warnings"] > 0)
    return EXIT_FINDINGS if failed else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "lint_skill.py", argv)


def _print_text(report: Report, verbose: bool, tally: dict[str, int]) -> None:
    for finding in report.findings:
        if finding.severity == "info" and not verbose:
            continue
        print(f"{finding.severity:<7} {finding.rule:<28} {finding.location()}: {finding.message}")
        if finding.fix and finding.severity != "info":
            print(f"{'':<37}fix: {finding.fix}")
    print(
        f"lint_skill: {tally['errors']} error(s), {tally['warnings']} warning(s), {tally['info']} info "
        f"in {report.root} ({report.files_scanned} shipped files scanned)"
    )
