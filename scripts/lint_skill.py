#!/usr/bin/env python3
"""Tier-1 static validation of this skill package.

Thin entry point: the work is done by memtune.commands.lint_skill. Run with --help.
"""

import sys
from pathlib import Path

# An installed skill copy is signed: bytecode caches would appear inside the verified tree.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.lint_skill", prog="lint_skill.py", requires=('yaml', 'markdown_it', 'jsonschema'))
