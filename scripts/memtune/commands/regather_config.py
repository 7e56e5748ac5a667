"""regather_config.py: Decide whether LoRA sequence_parallel_input_regather applies and write the change."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("regather_config.py", "Decide whether LoRA sequence_parallel_input_regather applies and write the change.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
