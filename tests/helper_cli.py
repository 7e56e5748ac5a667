"""Run a helper script the way a user does (fresh interpreter), for CLI-contract tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_helper(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / f"{name}.py"), *args], capture_output=True, text=True, timeout=60
    )
