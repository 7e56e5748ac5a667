"""Every helper starts cleanly: --help teaches, bad options and missing packages exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune import bootstrap

REPO_ROOT = Path(__file__).resolve().parent.parent
HELPERS = [
    "estimate_memory",
    "plan_memory",
    "diagnose",
    "check_env",
    "regather_config",
    "trace_regression",
    "runtime_memory",
    "sign_skill",
    "run_benchmark",
    "lint_skill",
]


def run_helper(name: str, *args: str, python: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = (python or [sys.executable]) + [str(REPO_ROOT / "scripts" / f"{name}.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


# In-process: what the helper's own parser does. The entry point itself (a fresh bare
# interpreter, the bootstrap, the missing-package message) is what the -S runs below prove.
@pytest.mark.parametrize("name", HELPERS)
def test_help_runs(name: str) -> None:
    result = invoke(name, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def _only_click(folder: Path, version: str | None = None) -> Path:
    """A folder to put on PYTHONPATH under ``python -S`` holding click and nothing else
    (with its metadata, or with metadata claiming ``version``)."""
    import click

    folder.mkdir(exist_ok=True)
    (folder / "click").symlink_to(Path(click.__file__).parent)
    if version is None:
        real = next(Path(click.__file__).parent.parent.glob("click-*.dist-info"))
        (folder / real.name).symlink_to(real)
    else:
        info = folder / f"click-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: click\nVersion: {version}\n")
    return folder


@pytest.fixture(scope="module")
def click_only(tmp_path_factory) -> Path:
    return _only_click(tmp_path_factory.mktemp("click-only"))


#: What ``--help`` must not import: the pipelines, the spec dataclasses, the standard library's
#: metadata and JSON machinery. An agent calls --help often; each of these costs start-up time
#: (benchmarks/startup_speed.py measures it; this test only names what is imported).
HELP_MUST_NOT_IMPORT = (
    "memtune.readers",
    "memtune.estimate",
    "memtune.diagnose",
    "memtune.check",
    "memtune.lint",
    "memtune.bench",
    "memtune.spec.model_spec",
    "memtune.spec.run_spec",
    "importlib.metadata",
    "json",
    "hashlib",
    "memtune.release.shipped_files",
    "memtune.release.checkout_leftovers",
)


@pytest.mark.parametrize("name", HELPERS)
def test_help_runs_with_click_alone(name: str, click_only: Path, monkeypatch) -> None:
    """-S drops site-packages: --help must need click and no other third-party library, and
    it imports none of the library's pipelines (-X importtime lists every import)."""
    monkeypatch.setenv("PYTHONPATH", str(click_only))
    result = run_helper(name, "--help", python=[sys.executable, "-S", "-X", "importtime"])
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "examples:" in result.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    assert "memtune.cli" in imported  # the listing is real
    assert sorted(m for m in imported if m.startswith(HELP_MUST_NOT_IMPORT)) == []


def test_help_without_click_names_it() -> None:
    result = run_helper("diagnose", "--help", python=[sys.executable, "-S"])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "click (import click)" in lines[0] and "pip install 'click>=8.1'" in lines[0]


def test_too_old_click_is_one_line_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_only_click(tmp_path / "old", version="8.0.4")))
    result = run_helper("estimate_memory", "--help", python=[sys.executable, "-S"])
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "click 8.0.4 is too old" in lines[0] and "pip install 'click>=8.1'" in lines[0]
    assert result.stdout == ""


def test_version_tuple_reads_leading_numbers() -> None:
    assert bootstrap.version_tuple("8.1.7") == (8, 1, 7)
    assert bootstrap.version_tuple("8.2.0rc1") == (8, 2, 0)
    assert bootstrap.version_tuple("8.10") > bootstrap.version_tuple("8.9.9")
    assert bootstrap.version_tuple("8.0.4") < bootstrap.MIN_CLICK <= bootstrap.version_tuple("8.1")


@pytest.mark.parametrize("name", HELPERS)
def test_unknown_option_is_one_line_exit_2(name: str) -> None:
    result = invoke(name, "--no-such-option")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--no-such-option" in result.stderr


@pytest.mark.parametrize("name", HELPERS)
def test_missing_dependency_names_package_and_install_command(name: str) -> None:
    result = run_helper(name, "--json", python=[sys.executable, "-S"])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "missing Python package" in result.stderr
    assert "pip install" in result.stderr


def test_missing_modules_reports_only_absent() -> None:
    assert bootstrap.missing_modules(["json", "surely_not_a_module_xyz"]) == ["surely_not_a_module_xyz"]


def test_install_hint_uses_pypi_names() -> None:
    assert bootstrap.install_hint(["yaml", "markdown_it"]).endswith("pip install pyyaml markdown-it-py")


def test_install_hint_pins_what_the_helpers_need() -> None:
    # the signature format was made with model-signing 1.1.1; click's API needs 8.1 or newer
    hint = bootstrap.install_hint(["model_signing", "OpenSSL", "click"])
    assert hint.endswith("pip install model-signing==1.1.1 pyopenssl 'click>=8.1'")
