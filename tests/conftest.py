"""Test set-up: import the helpers' library straight from scripts/, as an installed skill does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "scripts"))

DATA_DIR = Path(__file__).resolve().parent / "data"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def data_dir() -> Path:
    return DATA_DIR


@pytest.fixture
def invoke():
    """Run a helper in-process: ``invoke("diagnose", "--symptom", "oom") -> Result``.

    The one place that knows how a command is called without a subprocess (the body
    lives in helper_cli.invoke, which module-level helpers import directly).
    """
    from helper_cli import invoke as run_in_process

    return run_in_process
