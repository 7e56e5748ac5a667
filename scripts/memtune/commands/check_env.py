"""check_env.py: Check a launch script, environment and config for memory misconfiguration before launch."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("check_env.py", "Check a launch script, environment and config for memory misconfiguration before launch.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
