"""Planted bytecode never runs: the helpers neither read nor write bytecode in the skill folder.

The attack: an unchecked-hash ``.pyc`` in ``scripts/memtune/__pycache__`` is executed by
Python instead of the verified source, and the signature cannot vouch for a cache. Each
test builds the planted file itself in a fresh copy of the package.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from memtune import bootstrap
from signing_pki import export_tracked

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = sorted(p.name for p in (REPO_ROOT / "scripts").glob("*.py"))


def plant_unchecked_pyc(package: Path, module: str, marker: Path) -> Path:
    """Compile a payload that writes ``marker`` as the cached bytecode of ``module``."""
    payload = package.parent / f"payload_{module}.py"
    payload.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    cache = package / "scripts" / "memtune" / "__pycache__"
    cache.mkdir(exist_ok=True)
    target = cache / f"{module}.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(
        str(payload), cfile=str(target), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    return target


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    return env


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return export_tracked(REPO_ROOT, tmp_path_factory.mktemp("bytecode"))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_planted_bytecode_does_not_run(package, entry, tmp_path):
    marker = tmp_path / "pwned"
    for module in ("__init__", "bootstrap", "cli"):
        plant_unchecked_pyc(package, module, marker)
    result = subprocess.run(
        [sys.executable, str(package / "scripts" / entry), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), f"{entry} executed planted bytecode"


def test_helpers_write_no_bytecode_into_the_skill_folder(tmp_path):
    package = export_tracked(REPO_ROOT, tmp_path)
    for entry in ("estimate_memory.py", "lint_skill.py", "sign_skill.py"):
        subprocess.run(
            [sys.executable, str(package / "scripts" / entry), "--help"],
            capture_output=True,
            timeout=120,
            env=clean_env(),
            check=True,
        )
    written = [p for p in package.rglob("*") if p.name == "__pycache__" or p.suffix in (".pyc", ".pyo")]
    assert written == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_sets_the_prefix_before_importing_the_package(entry):
    text = (REPO_ROOT / "scripts" / entry).read_text()
    assert "sys.pycache_prefix =" in text
    assert text.index("sys.pycache_prefix =") < text.index("from memtune")


def test_prefix_guard():
    root = REPO_ROOT
    assert not bootstrap.bytecode_outside(root, prefix="")
    assert not bootstrap.bytecode_outside(root, prefix="relative/cache")
    assert not bootstrap.bytecode_outside(root, prefix=str(root / "scripts" / "cache"))
    assert bootstrap.bytecode_outside(root, prefix=os.path.join(os.devnull, "memtune-no-bytecode"))
