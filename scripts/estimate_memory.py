#!/usr/bin/env python3
"""How much memory will this Megatron run need per GPU, and where does it go?

Thin entry point: the work is done by memtune.commands.estimate_memory. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.estimate_memory", prog="estimate_memory.py", requires=('yaml',))
