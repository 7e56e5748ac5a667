"""run_benchmark.py: Run the Tier-3 evals with and without the skill and write BENCHMARK.md."""

from __future__ import annotations

from typing import Sequence

from memtune.cli import InputError, make_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser("run_benchmark.py", "Run the Tier-3 evals with and without the skill and write BENCHMARK.md.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.parse_args(argv)
    raise InputError("not implemented yet")
