"""memtune.release.signing with the real model-signing library and a throwaway PKI.

Tamper tests change one byte / add / delete a shipped file or swap the trust anchor and
require both a failed verification and a drift report naming the file. Cross-compat tests
check that signatures from the `model_signing` CLI and from us are interchangeable, in the
strict form (no --ignore_unsigned_files).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memtune.errors import InputError
from memtune.release import shipped_files, signing
from signing_pki import export_tracked, make_pki

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_SIGNING = [sys.executable, "-m", "model_signing"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def material(pki):
    return signing.KeyMaterial(pki.leaf_key, pki.leaf_cert, (pki.chain,))


@pytest.fixture
def package(tmp_path):
    """A fresh copy of the files this repository ships."""
    return export_tracked(REPO_ROOT, tmp_path)


def sign_package(package: Path, material: signing.KeyMaterial) -> Path:
    shipped = shipped_files.shipped_set(package, use_git=False)
    assert shipped.files
    ignore = ["skill.oms.sig"]
    signature = package / "skill.oms.sig"
    signing.sign_tree(package, signature, material, ignore)
    return signature


def verify(package: Path, anchor: Path) -> signing.VerifyOutcome:
    signature = package / "skill.oms.sig"
    return signing.verify_with_report(package, signature, [anchor], signing.read_statement(signature))


def cli_verify(package: Path, anchor: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *MODEL_SIGNING,
            "verify",
            "certificate",
            str(package),
            "--signature",
            str(package / "skill.oms.sig"),
            "--certificate_chain",
            str(anchor),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- round trip


@pytest.mark.slow
def test_signed_package_verifies_and_covers_every_shipped_file(package, material, pki):
    signature = sign_package(package, material)
    outcome = verify(package, pki.root_cert)
    assert outcome.ok, outcome.failure
    statement = signing.read_statement(signature)
    shipped = {p.relative_to(package).as_posix() for p in package.rglob("*") if p.is_file()}
    assert set(statement.digests) == shipped - {"skill.oms.sig", ".gitignore"}
    assert {"SKILL.md", ".ci/run", "signing/root-cert.pem", "scripts/sign_skill.py"} <= set(statement.digests)
    assert statement.signer is not None and "Test Release Signing" in statement.signer.subject


@pytest.mark.slow
def test_statement_is_in_toto_with_model_signing_predicate(package, material):
    doc = json.loads(sign_package(package, material).read_text())
    payload = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    assert payload["_type"] == "https://in-toto.io/Statement/v1"
    assert payload["predicateType"] == "https://model_signing/signature/v1.0"
    ignored = payload["predicate"]["serialization"]["ignore_paths"]
    assert "skill.oms.sig" in ignored
    assert not any("__pycache__" in p for p in ignored)  # a planted cache must not pass unseen


# --------------------------------------------------------------------------- tampering


@pytest.mark.slow
@pytest.mark.parametrize(
    "victim", ["SKILL.md", ".ci/run", "scripts/memtune/cli.py", "signing/root-cert.pem", "LICENSE"]
)
def test_one_changed_byte_fails_and_is_named(package, material, pki, victim):
    sign_package(package, material)
    path = package / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.failure.kind == "drift"
    assert outcome.drift.changed == (victim,)
    assert not outcome.drift.added and not outcome.drift.missing
    assert cli_verify(package, pki.root_cert).returncode == 1


@pytest.mark.slow
def test_added_file_fails_and_is_named(package, material, pki):
    sign_package(package, material)
    (package / "scripts" / "memtune" / "backdoor.py").write_text("print('hi')\n")
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.drift.added == ("scripts/memtune/backdoor.py",)
    assert cli_verify(package, pki.root_cert).returncode == 1


@pytest.mark.slow
def test_deleted_file_fails_and_is_named(package, material, pki):
    sign_package(package, material)
    (package / "references" / "memory-model.md").unlink()
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.drift.missing == ("references/memory-model.md",)


@pytest.mark.slow
def test_other_root_fails_as_untrusted(package, material, pki):
    sign_package(package, material)
    outcome = verify(package, pki.other_root_cert)
    assert not outcome.ok and outcome.failure.kind == "untrusted-certificate"
    assert str(pki.other_root_cert) in outcome.failure.message
    assert not outcome.drift  # the files themselves are intact
    assert cli_verify(package, pki.other_root_cert).returncode == 1


@pytest.mark.slow
def test_altered_statement_fails_signature_check(package, material, pki):
    """Rewriting a digest inside the bundle (to hide a change) breaks the DSSE signature."""
    signature = sign_package(package, material)
    doc = json.loads(signature.read_text())
    statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    statement["predicate"]["resources"][0]["digest"] = "0" * 64
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signature.write_text(json.dumps(doc))
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.failure.kind == "bad-signature"


@pytest.mark.slow
def test_planted_bytecode_cache_fails_the_plain_cli_and_ours(package, material, pki):
    """__pycache__ is not ignored by the signature: the strict plain CLI sees an unsigned file."""
    sign_package(package, material)
    assert cli_verify(package, pki.root_cert).returncode == 0
    cache = package / "scripts" / "memtune" / "__pycache__"
    cache.mkdir()
    (cache / f"cli.{sys.implementation.cache_tag}.pyc").write_bytes(b"\x00" * 16)
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.failure.kind == "drift"
    assert outcome.drift.added == (f"scripts/memtune/__pycache__/cli.{sys.implementation.cache_tag}.pyc",)
    assert cli_verify(package, pki.root_cert).returncode != 0


# --------------------------------------------------------------------------- cross-compat


def cli_sign(package: Path, key: Path, cert: Path, chain: Path) -> None:
    result = subprocess.run(
        [
            *MODEL_SIGNING,
            "sign",
            "certificate",
            str(package),
            "--signature",
            str(package / "skill.oms.sig"),
            "--private_key",
            str(key),
            "--signing_certificate",
            str(cert),
            "--certificate_chain",
            str(chain),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_cli_signature_verifies_with_ours(package, pki):
    cli_sign(package, pki.leaf_key, pki.leaf_cert, pki.chain)
    assert verify(package, pki.root_cert).ok


@pytest.mark.slow
def test_cli_signature_from_a_tls_certificate_is_rejected_by_ours(package, pki):
    """The plain CLI signs and accepts a serverAuth certificate; we refuse to trust it."""
    cli_sign(package, pki.tls_key, pki.tls_cert, pki.chain)
    outcome = verify(package, pki.root_cert)
    assert not outcome.ok and outcome.failure.kind == "certificate-usage"
    assert "Test TLS Server" in outcome.failure.message


@pytest.mark.slow
def test_our_signature_verifies_with_cli(package, material, pki):
    sign_package(package, material)
    result = cli_verify(package, pki.root_cert)
    assert result.returncode == 0, result.stderr
    assert "Verification succeeded" in result.stdout


# --------------------------------------------------------------------------- key material


def test_good_key_material_is_accepted(material):
    info = signing.check_key_material(material)
    assert "Test Release Signing" in info.subject and len(info.sha256.split(":")) == 32


@pytest.mark.parametrize(
    "field, expected",
    [
        ("mismatch", "does not match"),
        ("expired", "expired on"),
        ("tls", "not a code-signing certificate"),
        ("missing", "does not exist"),
        ("not_pem", "is not a PEM private key"),
    ],
)
def test_bad_key_material_is_refused(pki, tmp_path, field, expected):
    key, cert = pki.leaf_key, pki.leaf_cert
    if field == "mismatch":
        key = pki.stray_key
    elif field == "expired":
        key, cert = pki.expired_key, pki.expired_cert
    elif field == "tls":
        key, cert = pki.tls_key, pki.tls_cert
    elif field == "missing":
        key = tmp_path / "nope.pem"
    elif field == "not_pem":
        key = tmp_path / "junk.pem"
        key.write_text("not a key\n")
    with pytest.raises(InputError, match=expected):
        signing.check_key_material(signing.KeyMaterial(key, cert, (pki.chain,)))


def test_not_yet_valid_certificate_is_refused(material):
    with pytest.raises(InputError, match="not valid before"):
        signing.check_key_material(material, now=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))


# --------------------------------------------------------------------------- reading bundles


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "is not JSON"),
        (b"\xff\xfe garbage", "is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"mediaType": "x"}', "no dsseEnvelope.payload"),
        (b'{"dsseEnvelope": {"payload": "!!!"}}', "not base64-encoded JSON"),
    ],
)
def test_malformed_signature_is_bad_input(tmp_path, content, expected):
    path = tmp_path / "skill.oms.sig"
    path.write_bytes(content)
    with pytest.raises(InputError, match=expected):
        signing.read_statement(path)


def test_unreadable_signature_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        signing.read_statement(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        signing.read_statement(tmp_path / "absent.sig")


def test_compare_classifies_each_path():
    drift = signing.compare({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "X", "d": "4"})
    assert drift == signing.Drift(changed=("b",), added=("d",), missing=("c",))
    assert not signing.compare({"a": "1"}, {"a": "1"})


def test_write_atomically_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "skill.oms.sig"
    target.write_text("good")
    with pytest.raises(TypeError):
        signing.write_atomically("not bytes", target)  # type: ignore[arg-type]
    assert target.read_text() == "good"
    assert list(tmp_path.iterdir()) == [target]  # no temp file left behind
    signing.write_atomically(b"new", target)
    assert target.read_bytes() == b"new"
