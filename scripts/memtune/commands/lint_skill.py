"""lint_skill.py: Tier-1 static validation of this skill package."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("lint_skill.py", "Tier-1 static validation of this skill package.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
