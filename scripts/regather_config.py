#!/usr/bin/env python3
"""Decide whether LoRA sequence_parallel_input_regather applies and write the change.

Thin entry point: the work is done by memtune.commands.regather_config. Run with --help.
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
    launch("memtune.commands.regather_config", prog="regather_config.py", requires=("yaml",))
