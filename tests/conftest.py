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
