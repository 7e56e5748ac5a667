#!/usr/bin/env python3
"""What did this run measure (logs, nvidia-smi, memory snapshots), and what does it mean?

Thin entry point: the work is done by memtune.commands.runtime_memory. Run with --help.
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
    launch("memtune.commands.runtime_memory", prog="runtime_memory.py", requires=("yaml",))
