#!/usr/bin/env python3
"""Sign or verify skill.oms.sig over every shipped file.

Thin entry point: the work is done by memtune.commands.sign_skill. Run with --help.
"""

import sys
from pathlib import Path

# Bytecode caches would appear inside the very tree this helper verifies.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memtune.bootstrap import launch  # noqa: E402

if __name__ == "__main__":
    launch("memtune.commands.sign_skill", prog="sign_skill.py", requires=('model_signing', 'OpenSSL'))
