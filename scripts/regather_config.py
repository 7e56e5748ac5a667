#!/usr/bin/env python3
"""Decide whether LoRA sequence_parallel_input_regather applies and write the change.

Thin entry point: the work is done by memtune.commands.regather_config. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.regather_config", prog="regather_config.py", requires=('yaml',))
