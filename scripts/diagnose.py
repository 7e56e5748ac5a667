#!/usr/bin/env python3
"""Read an OOM error or a training log: fragmentation or real capacity, and what to do.

Thin entry point: the work is done by memtune.commands.diagnose. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.diagnose", prog="diagnose.py", requires=('markdown_it', 'yaml'))
