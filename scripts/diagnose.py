#!/usr/bin/env python3
"""Read an OOM error or a training log: fragmentation or real capacity, and what to do.

Thin entry point: the work is done by memtune.commands.diagnose. Run with --help.
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

if __name__ == "__main__":
    # A big log's grep prefilter starts first and reads while the interpreter loads the rest;
    # --help reads no log, so it loads none of the pipeline.
    if not {"-h", "--help"} & set(sys.argv[1:]):
        from memtune.diagnose import early_grep

        early_grep.start(sys.argv[1:])

    from memtune.bootstrap import launch

    launch("memtune.commands.diagnose", prog="diagnose.py", requires=("markdown_it", "yaml"))
