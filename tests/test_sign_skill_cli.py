"""sign_skill.py sign / verify as a user runs them: exit codes, one-line errors, reports.

Most cases run the command in-process through memtune.cli.run (the same path the entry
point takes); a few run the real entry point to check stderr is one line, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import helper_cli
from memtune.commands import sign_skill
from signing_pki import export_tracked, git_commit_all, make_pki

REPO_ROOT = Path(__file__).resolve().parent.parent
ENTRY = REPO_ROOT / "scripts" / "sign_skill.py"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def package(tmp_path):
    return export_tracked(REPO_ROOT, tmp_path / "src")


@pytest.fixture(autouse=True)
def no_key_env(monkeypatch, pki):
    for name in (sign_skill.ENV_KEY, sign_skill.ENV_CERT, sign_skill.ENV_CHAIN):
        monkeypatch.delenv(name, raising=False)
    # The throwaway root is the expected anchor here; the pinned release root is tested below.
    monkeypatch.setenv(sign_skill.ENV_EXPECT, fingerprint(pki.root_cert))


def fingerprint(cert: Path) -> str:
    from memtune.release import signing

    return signing.trust_anchor_info(cert).sha256


def invoke(capsys, *argv: str) -> tuple[int, str, str]:
    result = helper_cli.invoke("sign_skill", *argv)
    return result.exit_code, result.stdout, result.stderr


def key_args(pki, key=None, cert=None) -> list[str]:
    return [
        "--private-key",
        str(key or pki.leaf_key),
        "--signing-cert",
        str(cert or pki.leaf_cert),
        "--cert-chain",
        str(pki.chain),
        "--root-cert",
        str(pki.root_cert),
    ]


def sign(capsys, package, pki, *extra: str) -> tuple[int, str, str]:
    return invoke(capsys, "sign", str(package), *key_args(pki), *extra)


def verify(capsys, target, pki, *extra: str, root=None) -> tuple[int, str, str]:
    return invoke(capsys, "verify", str(target), "--root-cert", str(root or pki.root_cert), *extra)


# --------------------------------------------------------------------------- sign


@pytest.mark.slow
def test_sign_then_verify(capsys, package, pki):
    code, out, err = sign(capsys, package, pki, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["mode"] == "directory" and report["files_signed"] > 30
    assert "CN=Test Release Signing" in report["signer"]["subject"]
    assert (package / "skill.oms.sig").is_file()
    code, out, err = verify(capsys, package, pki)
    assert code == 0, out + err
    assert out.startswith("verified:")


@pytest.mark.slow
def test_signature_written_elsewhere_never_signs_an_old_one(capsys, package, pki, tmp_path):
    (package / "skill.oms.sig").write_text("stale")
    elsewhere = tmp_path / "out" / "release.sig"
    code, out, err = sign(capsys, package, pki, "--signature", str(elsewhere), "--json")
    assert code == 0, err
    assert (package / "skill.oms.sig").read_text() == "stale"
    code, out, _ = verify(capsys, package, pki, "--signature", str(elsewhere), "--json")
    assert code == 0, out


@pytest.mark.slow
def test_sign_reads_key_material_from_environment(capsys, package, pki, monkeypatch):
    monkeypatch.setenv(sign_skill.ENV_KEY, str(pki.leaf_key))
    monkeypatch.setenv(sign_skill.ENV_CERT, str(pki.leaf_cert))
    monkeypatch.setenv(sign_skill.ENV_CHAIN, str(pki.chain))
    code, _, err = invoke(capsys, "sign", str(package), "--root-cert", str(pki.root_cert))
    assert code == 0, err


@pytest.mark.slow
def test_missing_key_is_one_line_exit_2(package, pki):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTUNE_SIGNING")}
    result = subprocess.run(
        [
            sys.executable,
            str(ENTRY),
            "sign",
            str(package),
            "--signing-cert",
            str(pki.leaf_cert),
            "--cert-chain",
            str(pki.chain),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "--private-key" in result.stderr and sign_skill.ENV_KEY in result.stderr
    assert not (package / "skill.oms.sig").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant, expected",
    [
        ("mismatch", "does not match signing certificate"),
        ("expired", "expired on"),
        ("tls", "not a code-signing certificate"),
        ("other_root", "does not verify against"),
    ],
)
def test_bad_key_material_keeps_the_good_signature(capsys, package, pki, variant, expected):
    assert sign(capsys, package, pki)[0] == 0
    good = (package / "skill.oms.sig").read_bytes()
    args = key_args(pki)
    if variant == "mismatch":
        args = key_args(pki, key=pki.stray_key)
    elif variant == "expired":
        args = key_args(pki, key=pki.expired_key, cert=pki.expired_cert)
    elif variant == "tls":
        args = key_args(pki, key=pki.tls_key, cert=pki.tls_cert)
    elif variant == "other_root":
        args = [*key_args(pki)[:-1], str(pki.other_root_cert)]
    code, out, err = invoke(capsys, "sign", str(package), *args)
    assert code == 2 and expected in err
    assert err.count("\n") == 1 and out == ""
    assert (package / "skill.oms.sig").read_bytes() == good
    assert sorted(p.name for p in package.iterdir() if p.name.startswith(".skill.oms.sig")) == []


@pytest.mark.slow
def test_private_key_inside_the_package_is_refused(capsys, package, pki):
    inside = package / "release-key.pem"
    inside.write_bytes(pki.leaf_key.read_bytes())
    code, _, err = invoke(capsys, "sign", str(package), *key_args(pki, key=inside))
    assert code == 2 and "inside the package" in err


@pytest.mark.slow
def test_dirty_git_tree_is_refused_unless_allowed(capsys, package, pki):
    git_commit_all(package)
    (package / "SKILL.md").write_text("edited\n")
    code, _, err = sign(capsys, package, pki)
    assert code == 2 and "uncommitted changes (SKILL.md)" in err and "--allow-dirty" in err
    assert not (package / "skill.oms.sig").exists()
    code, out, err = sign(capsys, package, pki, "--allow-dirty", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["mode"] == "git-tracked" and report["commit"].endswith("-dirty")


@pytest.mark.slow
def test_git_checkout_verifies_its_tracked_files_despite_venv(capsys, package, pki):
    git_commit_all(package)
    assert sign(capsys, package, pki)[0] == 0
    (package / ".venv" / "bin").mkdir(parents=True)  # ignored by .gitignore, never ships
    (package / ".venv" / "bin" / "python").write_text("x")
    code, out, err = verify(capsys, package, pki, "--json")
    assert code == 0, out + err
    assert json.loads(out)["mode"] == "git-tracked"
    code, out, _ = verify(capsys, package, pki, "--all-files", "--json")
    report = json.loads(out)
    assert code == 1 and report["failure"]["kind"] == "working-checkout"
    assert report["leftovers"] == [{"path": ".venv", "kind": "virtualenv", "files": 1}]


# --------------------------------------------------------------------------- verify


@pytest.mark.slow
def test_drift_report_names_changed_added_and_missing_files(capsys, package, pki):
    assert sign(capsys, package, pki)[0] == 0
    (package / "SKILL.md").write_text((package / "SKILL.md").read_text() + " ")
    (package / "evil.sh").write_text("echo planted\n")
    (package / "LICENSE").unlink()
    code, out, _ = verify(capsys, package, pki)
    assert code == 1
    assert "changed: SKILL.md" in out and "added:   evil.sh" in out and "missing: LICENSE" in out
    code, out, _ = verify(capsys, package, pki, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["failure"]["kind"] == "drift"
    assert report["drift"] == {"changed": ["SKILL.md"], "added": ["evil.sh"], "missing": ["LICENSE"]}


@pytest.mark.slow
def test_verify_against_another_root_fails_with_exit_1(capsys, package, pki, monkeypatch):
    assert sign(capsys, package, pki)[0] == 0
    monkeypatch.setenv(sign_skill.ENV_EXPECT, fingerprint(pki.other_root_cert))  # the anchor is the one expected
    code, out, _ = verify(capsys, package, pki, root=pki.other_root_cert)
    assert code == 1 and "does not chain to the trust anchor" in out and str(pki.other_root_cert) in out


@pytest.mark.slow
def test_symlinked_root_is_resolved_and_said(capsys, package, pki, tmp_path):
    assert sign(capsys, package, pki)[0] == 0
    link = tmp_path / "claude-skill"
    link.symlink_to(package)
    code, out, _ = verify(capsys, link, pki, "--json")
    report = json.loads(out)
    assert code == 0 and report["root"] == str(package.resolve())
    assert any("symlink" in note for note in report["notes"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "content, expected, code_expected",
    [
        (b"this is not json", "is not JSON", 2),
        (b'{"dsseEnvelope": {}}', "not a model_signing bundle", 2),
    ],
)
def test_bad_signature_file_is_bad_input(capsys, package, pki, content, expected, code_expected):
    (package / "skill.oms.sig").write_bytes(content)
    code, out, err = verify(capsys, package, pki)
    assert code == code_expected and expected in err and out == ""
    assert err.count("\n") == 1


@pytest.mark.slow
def test_unreadable_or_missing_signature_is_bad_input(capsys, package, pki):
    code, _, err = verify(capsys, package, pki)
    assert code == 2 and "does not exist" in err
    code, _, err = verify(capsys, package, pki, "--signature", str(package / "scripts"))
    assert code == 2 and "is a directory" in err


@pytest.mark.slow
def test_missing_trust_anchor_is_bad_input(capsys, package, pki, tmp_path):
    assert sign(capsys, package, pki)[0] == 0
    code, _, err = verify(capsys, package, pki, root=tmp_path / "absent.pem")
    assert code == 2 and "trust anchor" in err and "does not exist" in err


@pytest.mark.slow
def test_entry_point_verify_failure_has_no_traceback(package, pki):
    result = subprocess.run(
        [sys.executable, str(ENTRY), "verify", str(package), "--root-cert", str(pki.root_cert)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1


# --------------------------------------------------------------------------- trust anchor


def swap_anchor(package: Path, pki) -> None:
    """The attack: replace the in-tree anchor with another root and re-sign with that CA."""
    (package / "signing" / "root-cert.pem").write_bytes(pki.root_cert.read_bytes())


@pytest.mark.slow
def test_fingerprint_is_printed_on_every_run(capsys, package, pki):
    assert sign(capsys, package, pki)[0] == 0
    code, out, _ = verify(capsys, package, pki)
    assert code == 0 and f"trust anchor: {pki.root_cert} SHA-256 {fingerprint(pki.root_cert)} (matches" in out
    (package / "SKILL.md").write_text("changed\n")
    code, out, _ = verify(capsys, package, pki)
    assert code == 1 and f"SHA-256 {fingerprint(pki.root_cert)}" in out


@pytest.mark.slow
def test_swapped_anchor_fails_against_the_pinned_release_root(capsys, package, pki, monkeypatch):
    """Anchor swapped and tree re-signed with the attacker's CA: without an explicit
    expectation the pinned release root decides, and the swap is named."""
    monkeypatch.delenv(sign_skill.ENV_EXPECT)
    swap_anchor(package, pki)
    assert sign(capsys, package, pki)[0] == 0
    code, out, _ = invoke(
        capsys, "verify", str(package), "--root-cert", str(package / "signing" / "root-cert.pem"), "--json"
    )
    report = json.loads(out)
    assert code == 1 and report["failure"]["kind"] == "anchor-mismatch"
    assert report["trust_anchor"]["expected_sha256"] == signing_module().RELEASE_ROOT_SHA256
    assert (
        report["trust_anchor"]["sha256"] == fingerprint(pki.root_cert)
        and not report["trust_anchor"]["matches_expected"]
    )
    code, out, _ = invoke(capsys, "verify", str(package), "--root-cert", str(package / "signing" / "root-cert.pem"))
    assert code == 1 and "may have been swapped" in out and "DOES NOT MATCH the release root pinned" in out


def signing_module():
    from memtune.release import signing

    return signing


@pytest.mark.slow
def test_expect_fingerprint_option_and_environment(capsys, package, pki, monkeypatch):
    assert sign(capsys, package, pki)[0] == 0
    monkeypatch.delenv(sign_skill.ENV_EXPECT)
    plain = fingerprint(pki.root_cert).replace(":", "").lower()
    code, out, _ = verify(capsys, package, pki, "--expect-fingerprint", plain)
    assert code == 0 and "matches --expect-fingerprint" in out
    code, out, _ = verify(capsys, package, pki, "--expect-fingerprint", fingerprint(pki.other_root_cert))
    assert code == 1 and "anchor" in out and "--expect-fingerprint expects" in out
    monkeypatch.setenv(sign_skill.ENV_EXPECT, fingerprint(pki.other_root_cert))
    code, out, _ = verify(capsys, package, pki)
    assert code == 1 and f"${sign_skill.ENV_EXPECT} expects" in out


@pytest.mark.slow
def test_malformed_expected_fingerprint_is_bad_input(capsys, package, pki):
    assert sign(capsys, package, pki)[0] == 0
    code, out, err = verify(capsys, package, pki, "--expect-fingerprint", "F0:35:zz")
    assert code == 2 and out == "" and "not a SHA-256 fingerprint" in err and err.count("\n") == 1


def test_pinned_fingerprint_is_the_committed_release_root():
    assert fingerprint(REPO_ROOT / "signing" / "root-cert.pem") == signing_module().RELEASE_ROOT_SHA256


# --------------------------------------------------------------------------- bytecode, unsigned content


@pytest.mark.slow
@pytest.mark.parametrize(
    "planted", ["scripts/memtune/__pycache__/cli.cpython-312.pyc", "scripts/argparse.pyc", "old.pyo"]
)
def test_bytecode_in_an_installed_copy_fails_verification(capsys, package, pki, planted):
    assert sign(capsys, package, pki)[0] == 0
    (package / planted).parent.mkdir(parents=True, exist_ok=True)
    (package / planted).write_bytes(b"\x00" * 16)
    code, out, _ = verify(capsys, package, pki)
    assert code == 1 and "unsigned executable content" in out and planted in out


@pytest.mark.slow
def test_git_checkout_fails_on_sourceless_bytecode_but_not_on_its_caches(capsys, package, pki):
    git_commit_all(package)
    assert sign(capsys, package, pki)[0] == 0
    (package / "scripts" / "memtune" / "__pycache__").mkdir()
    (package / "scripts" / "memtune" / "__pycache__" / "cli.cpython-312.pyc").write_bytes(b"\x00")
    code, out, _ = verify(capsys, package, pki)
    assert code == 0 and "bytecode caches in the work tree are not checked" in out
    (package / "scripts" / "json.pyc").write_bytes(b"\x00")  # ignored by .gitignore, yet importable
    code, out, _ = verify(capsys, package, pki)
    assert code == 1 and "unsigned executable content" in out and "scripts/json.pyc" in out


@pytest.mark.slow
def test_sign_refuses_a_tree_with_bytecode(capsys, package, pki):
    (package / "scripts" / "json.pyc").write_bytes(b"\x00")
    code, _, err = sign(capsys, package, pki)
    assert code == 2 and "holds bytecode (scripts/json.pyc)" in err
    assert not (package / "skill.oms.sig").exists()


@pytest.mark.slow
def test_verify_lists_content_the_signature_does_not_cover(capsys, package, pki):
    (package / ".github" / "workflows").mkdir(parents=True)
    (package / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    (package / ".gitattributes").write_text("* text=auto\n")
    assert sign(capsys, package, pki)[0] == 0
    code, out, _ = verify(capsys, package, pki)
    line = next(row for row in out.splitlines() if "present, not covered by the signature" in row)
    assert code == 0
    for item in (".github/workflows/ci.yml", ".gitattributes", ".gitignore", "file modes"):
        assert item in line


# --------------------------------------------------------------------------- working-checkout leftovers


def plant_leftovers(package: Path) -> None:
    """A small stand-in for what a developer's checkout holds: a virtualenv (with its
    bytecode), the Hypothesis database and egg-info, as `npx skills add DIR` copies them."""
    site = package / ".venv" / "lib" / "python3.11" / "site-packages" / "pkg"
    site.mkdir(parents=True)
    (package / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    for i in range(30):
        (site / f"m{i}.py").write_text(f"x = {i}\n")
    (site / "__init__.cpython-311.pyc").write_bytes(b"\x00" * 16)
    (package / ".hypothesis" / "examples" / "ab").mkdir(parents=True)
    (package / ".hypothesis" / "examples" / "ab" / "cd").write_bytes(b"\x01")
    (package / "x.egg-info").mkdir()
    (package / "x.egg-info" / "PKG-INFO").write_text("Name: x\n")


def test_leftovers_of_a_working_checkout_fail_with_one_clear_line(capsys, package, pki):
    assert sign(capsys, package, pki)[0] == 0
    plant_leftovers(package)
    code, out, _ = verify(capsys, package, pki)
    assert code == 1
    reason = next(line for line in out.splitlines() if line.startswith("reason: "))
    assert reason.startswith(
        "reason: installed from a working checkout: .venv (32 files), .hypothesis (1 file), x.egg-info (1 file)"
    )
    assert "the signed files themselves verify" in reason and "reinstall" in reason
    assert "added:" not in out and "unsigned executable content" not in out  # the .pyc is part of .venv
    assert max(len(line) for line in out.splitlines()) < 800

    code, out, _ = verify(capsys, package, pki, "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"] and report["failure"]["kind"] == "working-checkout"
    assert report["leftovers"] == [
        {"path": ".venv", "kind": "virtualenv", "files": 32},
        {"path": ".hypothesis", "kind": "Hypothesis example database", "files": 1},
        {"path": "x.egg-info", "kind": "package build metadata", "files": 1},
    ]
    assert report["drift"] == {"changed": [], "added": [], "missing": []}


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        ("add", "added:   scripts/memtune/evil.py"),
        # the default run keeps "add" (and test_checkout_leftovers' in-process split tests);
        # each case signs a package copy for real, so the other two run with -m slow
        pytest.param("change", "changed: SKILL.md", marks=pytest.mark.slow),
        pytest.param("delete", "missing: references/memory-model.md", marks=pytest.mark.slow),
    ],
)
def test_tampering_beside_leftovers_still_reads_as_tampering(capsys, package, pki, tamper, expected):
    assert sign(capsys, package, pki)[0] == 0
    plant_leftovers(package)
    if tamper == "add":
        (package / "scripts" / "memtune" / "evil.py").write_text("import os\n")
    elif tamper == "change":
        (package / "SKILL.md").write_text((package / "SKILL.md").read_text().replace("memory", "mem0ry", 1))
    else:
        (package / "references" / "memory-model.md").unlink()
    code, out, _ = verify(capsys, package, pki)
    assert code == 1
    assert "reason: the files differ from the signed manifest" in out and expected in out
    assert ".venv/" not in out  # the leftovers are summarised, never listed file by file
    assert "note: this copy was also installed from a working checkout: .venv (32 files)" in out


@pytest.mark.slow  # real signing; the split itself: tests/test_checkout_leftovers.py
def test_a_symlink_is_refused_unless_it_lies_in_a_leftover(capsys, package, pki):
    (package / "build").mkdir()
    (package / "build" / "recipe.py").write_text("X = 1\n")
    assert sign(capsys, package, pki)[0] == 0  # this package ships build/, so build/ is content
    plant_leftovers(package)
    (package / ".venv" / "bin").mkdir()
    (package / ".venv" / "bin" / "python").symlink_to(sys.executable)
    assert verify(capsys, package, pki)[0] == 1  # a leftover's symlink is listed, not refused
    (package / "build" / "copy.py").symlink_to(package / "build" / "recipe.py")
    code, _, err = verify(capsys, package, pki)
    assert code == 2 and "build/copy.py is a symlink" in err


@pytest.mark.slow  # real signing; the split itself: tests/test_checkout_leftovers.py
def test_bytecode_outside_the_leftovers_is_still_unsigned_executable_content(capsys, package, pki):
    assert sign(capsys, package, pki)[0] == 0
    plant_leftovers(package)
    (package / "scripts" / "json.pyc").write_bytes(b"\x00")
    code, out, _ = verify(capsys, package, pki)
    assert code == 1 and "reason: unsigned executable content: 1 bytecode file(s) (scripts/json.pyc)" in out


@pytest.mark.slow  # real signing; the split itself: tests/test_checkout_leftovers.py
def test_a_git_work_tree_ignores_its_own_leftovers_but_all_files_reports_them(capsys, package, pki):
    git_commit_all(package)
    assert sign(capsys, package, pki)[0] == 0
    plant_leftovers(package)  # .gitignore keeps them untracked
    (package / ".venv" / "bin").mkdir()
    (package / ".venv" / "bin" / "python").symlink_to(sys.executable)  # as `python -m venv` makes it
    assert verify(capsys, package, pki)[0] == 0
    code, out, _ = verify(capsys, package, pki, "--all-files", "--json")
    assert code == 1 and json.loads(out)["failure"]["kind"] == "working-checkout"


# --------------------------------------------------------------------------- full disk


@pytest.mark.slow
def test_full_disk_names_the_signature_and_keeps_the_old_one(capsys, package, pki, monkeypatch):
    import errno

    assert sign(capsys, package, pki)[0] == 0
    before = (package / "skill.oms.sig").read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")  # what write/fsync raise: no file name

    monkeypatch.setattr(os, "fsync", no_space)
    code, out, err = sign(capsys, package, pki)
    assert code == 2 and err.count("\n") == 1
    assert f"cannot write {package / 'skill.oms.sig'}: No space left on device" in err
    assert (package / "skill.oms.sig").read_bytes() == before
    assert not list(package.glob(".skill.oms.sig.*.tmp"))
