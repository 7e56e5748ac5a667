"""sign_skill.py: Sign or verify skill.oms.sig over every shipped file."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("sign_skill.py", "Sign or verify skill.oms.sig over every shipped file.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
