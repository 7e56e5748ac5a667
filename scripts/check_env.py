#!/usr/bin/env python3
"""Check a launch script, environment and config for memory misconfiguration before launch.

Thin entry point: the work is done by memtune.commands.check_env. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.check_env", prog="check_env.py", requires=('yaml',))
