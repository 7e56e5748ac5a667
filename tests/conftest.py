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


_SCAN_CACHE: dict[tuple, list] = {}


@pytest.fixture
def cached_security_scan(monkeypatch):
    """Remember ``security.scan_file`` answers per (label, bytes, rules) across lint runs.

    The lint tests lint a fresh copy of the whole package, change one file and look for
    one rule; ~90% of each run re-scans ~400 unchanged files (AST walks, regexes) to the
    same answer. ``scan_file`` is a pure function of what it reads, so the key is exactly
    its inputs: a changed or added file has new bytes or a new label and is scanned for
    real. Opt in with ``pytestmark = pytest.mark.usefixtures("cached_security_scan")``.
    """
    from memtune.lint import security

    real = security.scan_file

    def scan_file(path, label, rules):
        with open(path, "rb") as handle:
            data = handle.read(rules.max_bytes + 1)
        key = (label, data, rules)
        if key not in _SCAN_CACHE:
            _SCAN_CACHE[key] = real(path, label, rules)
        return list(_SCAN_CACHE[key])

    monkeypatch.setattr(security, "scan_file", scan_file)
