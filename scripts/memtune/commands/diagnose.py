"""diagnose.py: Read an OOM error or a training log: fragmentation or real capacity, and what to do."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("diagnose.py", "Read an OOM error or a training log: fragmentation or real capacity, and what to do.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
