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


def test_planted_bytecode_of_a_lazily_imported_module_does_not_run(package, tmp_path):
    """The modules a helper imports while it works (after the bootstrap dropped the
    no-bytecode prefix so that the standard library uses its own caches) are still compiled
    from their source."""
    marker = tmp_path / "pwned"
    payload = tmp_path / "payload.py"
    payload.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    for folder, module in (("commands", "estimate_memory"), ("estimate", "estimator"), ("spec", "presets")):
        cache = package / "scripts" / "memtune" / folder / "__pycache__"
        cache.mkdir(exist_ok=True)
        py_compile.compile(
            str(payload),
            cfile=str(cache / f"{module}.{sys.implementation.cache_tag}.pyc"),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    result = subprocess.run(
        [sys.executable, str(package / "scripts" / "estimate_memory.py"), "--example"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    assert "parameters" in result.stdout
    assert not marker.exists(), "estimate_memory.py executed planted bytecode"


def test_an_extension_module_planted_next_to_a_source_is_ignored(package):
    """Python's default finder prefers ``units.<tag>.so`` over ``units.py``; inside the skill
    only ``.py`` files are importable, so a planted (here: broken) extension is never loaded."""
    import importlib.machinery

    planted = package / "scripts" / "memtune" / f"units{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    planted.write_bytes(b"not an ELF file\n")
    try:
        result = subprocess.run(
            [sys.executable, str(package / "scripts" / "estimate_memory.py"), "--example"],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
    finally:
        planted.unlink()
    assert result.returncode == 0, result.stderr


def test_after_the_bootstrap_only_the_skill_is_compiled_from_source(package):
    """The skill's modules get the source-only loader; everything else gets its usual bytecode
    again (the no-bytecode prefix made every start recompile the standard library and click)."""
    probe = (
        "import os, sys\n"
        "sys.pycache_prefix = os.path.join(os.devnull, 'memtune-no-bytecode')\n"
        "sys.dont_write_bytecode = True\n"
        f"sys.path.insert(0, {str(package / 'scripts')!r})\n"
        "from memtune import bootstrap\n"
        f"bootstrap.load_sources_only(bootstrap.Path({str(package)!r}))\n"
        "import memtune.units, json.decoder\n"
        "print(type(memtune.units.__spec__.loader).__name__, type(json.decoder.__spec__.loader).__name__, sys.pycache_prefix)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=clean_env())
    assert result.stdout.split() == ["SourceOnlyLoader", "SourceFileLoader", "None"], result.stderr


def test_a_virtual_environment_inside_the_checkout_keeps_its_extension_modules(package, tmp_path):
    """The README's set-up makes ``.venv/`` inside the checkout, so third-party packages and
    their compiled extension modules live under the skill folder too. Only ``scripts/`` is
    the skill's code: a source-only finder over the whole folder hid every ``.so`` there
    (jsonschema's ``rpds`` failed to import in lint_skill.py)."""
    rpds = pytest.importorskip("rpds")
    site = package / ".venv" / "site"
    site.mkdir(parents=True)
    import shutil

    shutil.copytree(Path(rpds.__file__).parent, site / "rpds")
    (site / "probe_entry.py").write_text(
        "def main(argv):\n    import rpds\n    print(type(rpds.HashTrieMap()).__name__)\n    return 0\n"
    )
    probe = (
        "import os, sys\n"
        "sys.pycache_prefix = os.path.join(os.devnull, 'memtune-no-bytecode')\n"
        "sys.dont_write_bytecode = True\n"
        f"sys.path.insert(0, {str(package / 'scripts')!r})\n"
        f"sys.path.insert(1, {str(site)!r})\n"
        "sys.argv = ['probe']\n"
        "from memtune import bootstrap\n"
        "bootstrap.launch('probe_entry', prog='probe')\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "HashTrieMap"
