"""plan_memory.py: This run does not fit: which change makes it fit at the lowest throughput cost?"""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("plan_memory.py", "This run does not fit: which change makes it fit at the lowest throughput cost?")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
