#!/usr/bin/env python3
"""Memory went up between two runs or two commits: which change did it?

Thin entry point: the work is done by memtune.commands.trace_regression. Run with --help.
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
    launch("memtune.commands.trace_regression", prog="trace_regression.py", requires=("yaml",))
