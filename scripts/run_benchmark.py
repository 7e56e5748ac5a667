#!/usr/bin/env python3
"""Run the Tier-3 evals with and without the skill and write BENCHMARK.md.

Thin entry point: the work is done by memtune.commands.run_benchmark. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.run_benchmark", prog="run_benchmark.py", requires=('yaml',))
