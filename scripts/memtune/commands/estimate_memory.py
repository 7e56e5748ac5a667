"""estimate_memory.py: How much memory will this Megatron run need per GPU, and where does it go?"""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("estimate_memory.py", "How much memory will this Megatron run need per GPU, and where does it go?")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
