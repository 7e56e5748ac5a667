"""A throwaway PKI for the signing tests, built with `cryptography` on the fly.

Root CA -> intermediate CA -> code-signing leaf, the same shape as the release chain in
../shared/signing (whose private key never enters the project), plus the bad variants the
tests need: an expired leaf, a leaf without codeSigning, a key matching no certificate and
an unrelated root. Nothing here is a fixture of pytest itself so the install test and the
unit tests can share it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SKILL_NAME = "nemo-mbridge-perf-memory-tuning"


@dataclass(frozen=True)
class ThrowawayPKI:
    root_cert: Path
    chain: Path  # intermediate + root, as passed to --cert-chain
    leaf_cert: Path
    leaf_key: Path
    expired_cert: Path
    expired_key: Path
    tls_cert: Path  # valid, chains to the root, but serverAuth only
    tls_key: Path
    stray_key: Path  # matches no certificate
    other_root_cert: Path  # a root that signed nothing here


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "memtune test PKI"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path


def _write_certs(path: Path, *certs: x509.Certificate) -> Path:
    path.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs))
    return path


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    eku: list | None = None,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer.subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
    builder = builder.add_extension(usage, critical=True)
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    if issuer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.public_key()), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA384())


def make_pki(dest: Path) -> ThrowawayPKI:
    dest.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    long_ago, far = now - dt.timedelta(days=400), now + dt.timedelta(days=3650)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP384R1())

    root_key, inter_key, other_root_key = key(), key(), key()
    root = _issue("Test Root CA", root_key, None, root_key, ca=True, not_before=long_ago, not_after=far)
    other_root = _issue(
        "Unrelated Root CA", other_root_key, None, other_root_key, ca=True, not_before=long_ago, not_after=far
    )
    inter = _issue("Test Intermediate CA", inter_key, root, root_key, ca=True, not_before=long_ago, not_after=far)

    leaf_key, expired_key, tls_key, stray_key = key(), key(), key(), key()
    code = [ExtendedKeyUsageOID.CODE_SIGNING]
    leaf = _issue(
        "Test Release Signing",
        leaf_key,
        inter,
        inter_key,
        ca=False,
        eku=code,
        not_before=now - dt.timedelta(days=1),
        not_after=far,
    )
    expired = _issue(
        "Test Expired Signing",
        expired_key,
        inter,
        inter_key,
        ca=False,
        eku=code,
        not_before=long_ago,
        not_after=now - dt.timedelta(days=2),
    )
    tls = _issue(
        "Test TLS Server",
        tls_key,
        inter,
        inter_key,
        ca=False,
        eku=[ExtendedKeyUsageOID.SERVER_AUTH],
        not_before=now - dt.timedelta(days=1),
        not_after=far,
    )

    return ThrowawayPKI(
        root_cert=_write_certs(dest / "root-cert.pem", root),
        chain=_write_certs(dest / "chain.pem", inter, root),
        leaf_cert=_write_certs(dest / "signing-cert.pem", leaf),
        leaf_key=_write_key(leaf_key, dest / "signing-key.pem"),
        expired_cert=_write_certs(dest / "expired-cert.pem", expired),
        expired_key=_write_key(expired_key, dest / "expired-key.pem"),
        tls_cert=_write_certs(dest / "tls-cert.pem", tls),
        tls_key=_write_key(tls_key, dest / "tls-key.pem"),
        stray_key=_write_key(stray_key, dest / "stray-key.pem"),
        other_root_cert=_write_certs(dest / "other-root-cert.pem", other_root),
    )


def export_tracked(repo: Path, dest_parent: Path) -> Path:
    """Copy the repository's git-tracked files (work-tree contents) into
    ``dest_parent/<skill name>``: what `npx skills add` of the pushed repo would copy.

    Independent of memtune.release.shipped_files on purpose, so the tests do not grade the code
    under test with itself. Outside a git checkout (tests run from an installed copy) the
    whole folder minus caches is copied instead.
    """
    dest = dest_parent / SKILL_NAME
    if (repo / ".git").exists():
        listing = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
        files = [f for f in listing.decode().split("\0") if f and (repo / f).is_file()]
        for rel in files:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repo / rel, dest / rel)
    else:
        shutil.copytree(
            repo, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".venv", "skill.oms.sig")
        )
    (dest / "skill.oms.sig").unlink(missing_ok=True)
    return dest


def git_commit_all(repo: Path) -> None:
    """Make ``repo`` a git work tree whose HEAD holds every file now in it."""
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "release"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
