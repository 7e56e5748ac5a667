"""Run the reference validator (PyPI ``skills-ref``, CLI ``agentskills validate``) in-process.

skills-ref requires the folder to be named exactly like the skill, so a checkout under
any other name fails by design. We therefore validate a throw-away folder named after
the skill that holds SKILL.md — the only file skills-ref reads — which is exactly what an
installed copy (``.agents/skills/<name>``) looks like to it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from memtune.lint.findings import Finding, error, info

RULE = "spec/skills-ref"
SAFE_FOLDER = re.compile(r"^[^/\\\x00]+$")


def validate_copy(skill_md: Path, name: object) -> list[Finding]:
    try:
        from skills_ref.validator import validate
    except ImportError:
        return [
            info(
                RULE,
                "skills-ref is not installed, so the reference validator did not run (the built-in spec rules did)",
                "pip install skills-ref to also run 'agentskills validate'",
                "SKILL.md",
            )
        ]
    version = _version()
    folder = name if isinstance(name, str) and SAFE_FOLDER.match(name) and name not in (".", "..") else "unnamed-skill"
    with tempfile.TemporaryDirectory(prefix="lint-skill-") as tmp:
        copy = Path(tmp) / folder
        copy.mkdir()
        shutil.copyfile(skill_md, copy / "SKILL.md")
        try:
            problems = validate(copy)
        except UnicodeDecodeError as exc:  # skills-ref reads SKILL.md as strict UTF-8 and does not catch this
            return [
                error(
                    RULE,
                    f"skills-ref {version} validate cannot read SKILL.md: not UTF-8 text (byte offset {exc.start})",
                    "save SKILL.md as UTF-8",
                    "SKILL.md",
                )
            ]
    if not problems:
        return [info(RULE, f"skills-ref {version} validate passed on a copy named '{folder}'", file="SKILL.md")]
    return [
        error(
            RULE,
            f"skills-ref {version} validate: {problem}",
            "fix the frontmatter so 'agentskills validate' passes",
            "SKILL.md",
        )
        for problem in problems
    ]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("skills-ref")
    except Exception:  # noqa: BLE001 - only used for the message
        return "(unknown version)"
