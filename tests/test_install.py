"""Install through the REAL skills CLI, then use and verify the installed copies.

`npx --yes skills@1.5.16 add <dir> --agent claude-code --agent codex --yes` runs in a temp
project with a temp HOME, from an export of the git-tracked files (what installing the
pushed repository copies). The export is signed with a throwaway PKI first, so this test
does not depend on the committed skill.oms.sig being fresh (test_committed_signature.py
checks that one). Never skipped: without npx it fails and says what to install.

The npm cache may be kept across runs (MEMTUNE_NPM_CACHE, default: the invoking user's
~/.npm) so only the first run downloads the CLI; a fresh cache works too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from signing_pki import SKILL_NAME, export_tracked, git_commit_all, make_pki

REPO_ROOT = Path(__file__).resolve().parent.parent
SKILLS_CLI = "skills@1.5.16"
HELPERS = sorted(p.name for p in (REPO_ROOT / "scripts").glob("*.py"))
pytestmark = pytest.mark.slow  # a real `npx skills add` (npm registry) and real signing


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)


def expecting(pki) -> dict[str, str]:
    """The environment that names the throwaway root as the expected trust anchor."""
    from memtune.release import signing

    return {**os.environ, "MEMTUNE_EXPECT_ROOT_SHA256": signing.trust_anchor_info(pki.root_cert).sha256}


@pytest.fixture(scope="module")
def signed_source(tmp_path_factory):
    """(signed export of the tracked files, test PKI)."""
    base = tmp_path_factory.mktemp("install")
    pki = make_pki(base / "pki")
    source = export_tracked(REPO_ROOT, base / "src")
    signed = run(
        [
            sys.executable,
            str(source / "scripts" / "sign_skill.py"),
            "sign",
            str(source),
            "--private-key",
            str(pki.leaf_key),
            "--signing-cert",
            str(pki.leaf_cert),
            "--cert-chain",
            str(pki.chain),
            "--root-cert",
            str(pki.root_cert),
        ]
    )
    assert signed.returncode == 0, signed.stderr
    return source, pki


def skills_add(source: Path, base: Path) -> Path:
    """Install ``source`` with the real skills CLI into a new project under ``base``."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.fail("npx not found on PATH: the install test needs Node.js >= 18 (npx) to run the real skills CLI")
    project, home = base / "project", base / "home"
    project.mkdir()
    home.mkdir()
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        npm_config_cache=os.environ.get("MEMTUNE_NPM_CACHE", str(Path.home() / ".npm")),
        npm_config_update_notifier="false",
        npm_config_fund="false",
        DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
    )
    result = run(
        [npx, "--yes", SKILLS_CLI, "add", str(source), "--agent", "claude-code", "--agent", "codex", "--yes"],
        cwd=project,
        env=env,
    )
    assert result.returncode == 0, f"skills CLI failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return project


@pytest.fixture(scope="module")
def installed(signed_source, tmp_path_factory):
    """(project dir, test PKI) after a signed export was installed for both agents."""
    source, pki = signed_source
    return skills_add(source, tmp_path_factory.mktemp("clean")), pki


def locations(project: Path) -> dict[str, Path]:
    return {
        "claude-code": project / ".claude" / "skills" / SKILL_NAME,
        "codex": project / ".agents" / "skills" / SKILL_NAME,
    }


def test_both_agent_locations_hold_the_skill(installed):
    project, _ = installed
    where = locations(project)
    assert where["claude-code"].is_symlink(), "the Claude Code location is expected to be a symlink"
    assert where["claude-code"].resolve() == where["codex"].resolve()
    for place in where.values():
        assert (place / "SKILL.md").is_file()
        assert (place / "scripts" / "memtune" / "cli.py").is_file()
        assert (place / "skill.oms.sig").is_file()
        assert not (place / ".git").exists()


@pytest.mark.parametrize("helper", HELPERS)
def test_helpers_help_runs_from_installed_copy(installed, helper):
    project, _ = installed
    python3 = shutil.which("python3") or sys.executable
    for place in locations(project).values():
        result = run([python3, str(place / "scripts" / helper), "--help"], cwd=project)
        assert result.returncode == 0, result.stderr
        assert "usage:" in result.stdout


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_installed_copy_verifies_strictly_with_our_verify(installed, agent):
    """Runs after the helpers' --help (module order): bytecode they wrote must not matter."""
    project, pki = installed
    place = locations(project)[agent]
    result = run(
        [
            sys.executable,
            str(place / "scripts" / "sign_skill.py"),
            "verify",
            str(place),
            "--root-cert",
            str(pki.root_cert),
            "--json",
        ],
        env=expecting(pki),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["mode"] == "directory" and report["files_signed"] > 30
    if agent == "claude-code":
        assert any("symlink" in note for note in report["notes"])


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_installed_copy_verifies_strictly_with_model_signing_cli(installed, agent):
    project, pki = installed
    place = locations(project)[agent].resolve()  # model_signing refuses a symlinked root
    result = run(
        [
            sys.executable,
            "-m",
            "model_signing",
            "verify",
            "certificate",
            str(place),
            "--signature",
            str(place / "skill.oms.sig"),
            "--certificate_chain",
            str(pki.root_cert),
        ]
    )
    assert result.returncode == 0, result.stderr
    assert "Verification succeeded" in result.stdout


def test_tampered_installed_copy_fails_and_names_the_file(installed, tmp_path):
    project, pki = installed
    copy = tmp_path / SKILL_NAME
    shutil.copytree(locations(project)["codex"], copy)
    (copy / "SKILL.md").write_text((copy / "SKILL.md").read_text().replace("memory", "mem0ry", 1))
    result = run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "sign_skill.py"),
            "verify",
            str(copy),
            "--root-cert",
            str(pki.root_cert),
        ],
        env=expecting(pki),
    )
    assert result.returncode == 1
    assert "changed: SKILL.md" in result.stdout


@pytest.fixture(scope="module")
def installed_from_checkout(signed_source, tmp_path_factory):
    """(project dir, test PKI) after installing from a working checkout of the signed
    package: a git work tree holding a real virtualenv, test caches and egg-info."""
    source, pki = signed_source
    base = tmp_path_factory.mktemp("checkout")
    checkout = base / "src" / SKILL_NAME
    shutil.copytree(source, checkout)
    git_commit_all(checkout)
    venv = run([sys.executable, "-m", "venv", "--without-pip", str(checkout / ".venv")])
    assert venv.returncode == 0, venv.stderr
    for rel in (".hypothesis/examples/0a1b/2c3d", ".pytest_cache/v/cache/lastfailed", "x.egg-info/PKG-INFO"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("leftover\n")
    return skills_add(checkout, base), pki


def test_install_from_a_working_checkout_is_explained_by_verify(installed_from_checkout):
    project, pki = installed_from_checkout
    place = locations(project)["codex"]
    assert (place / ".venv" / "pyvenv.cfg").is_file(), "the skills CLI is expected to copy the checkout whole"
    command = [sys.executable, str(place / "scripts" / "sign_skill.py"), "verify", str(place), "--root-cert"]
    result = run([*command, str(pki.root_cert)], env=expecting(pki))
    assert result.returncode == 1, result.stdout + result.stderr
    reason = next(line for line in result.stdout.splitlines() if line.startswith("reason: "))
    assert reason.startswith("reason: installed from a working checkout: .venv (")
    for group in (".hypothesis (1 file)", ".pytest_cache (1 file)", "x.egg-info (1 file)", "reinstall"):
        assert group in reason
    assert "added:" not in result.stdout and max(map(len, result.stdout.splitlines())) < 800

    report = json.loads(run([*command, str(pki.root_cert), "--json"], env=expecting(pki)).stdout)
    assert report["failure"]["kind"] == "working-checkout"
    assert [g["path"] for g in report["leftovers"]][0] == ".venv"
    assert {g["path"] for g in report["leftovers"]} == {".venv", ".hypothesis", ".pytest_cache", "x.egg-info"}
