#!/usr/bin/env python3
"""Run the Tier-3 evals with and without the skill and write BENCHMARK.md.

Thin entry point: the work is done by memtune.commands.run_benchmark. Run with --help.
"""

import os
import sys
from pathlib import Path

# Before any package import: never read or write bytecode inside the skill folder. The
# signature cannot vouch for a cache, and Python would run a planted unchecked .pyc there;
# a prefix that cannot be a directory means sources are always compiled fresh.
sys.pycache_prefix = os.path.join(os.devnull, "memtune-no-bytecode")
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.run_benchmark", prog="run_benchmark.py", requires=("yaml",))
