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


@pytest.mark.parametrize("name", HELPERS)
def test_help_runs_without_site_packages(name: str) -> None:
    """-S drops site-packages: --help must not need any third-party library."""
    result = run_helper(name, "--help", python=[sys.executable, "-S"])
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


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
