"""Sign and verify ``skill.oms.sig`` with the model-signing library (certificate method).

The signature is an OMS / Sigstore bundle whose DSSE payload is an in-toto statement with
predicate ``https://model_signing/signature/v1.0``: one ``{name, algorithm, digest}`` per
signed file plus the serialization settings (hash, ignored paths). Users check it with the
plain ``model_signing verify certificate`` command, so everything here goes through the
library's public API (``model_signing.signing`` / ``verifying`` / ``hashing``) configured
exactly as that command configures it; this module only adds what the command lacks:
refusing bad key material *before* anything is written, and a drift report that names
files instead of printing a wall of digests.

Third-party imports (cryptography, model_signing, OpenSSL) happen inside functions so that
importing this module — and so ``sign_skill.py --help`` — needs only the standard library.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtune.errors import InputError

if TYPE_CHECKING:  # cryptography comes with the optional signing extra: imported only where it is used
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes

PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# SHA-256 of this project's release root ("Skill Signing Root CA"). A copy of the code can be
# edited along with the anchor it checks, so this pin only helps when the code itself comes
# from a trusted place; the independent check is --expect-fingerprint (README).
RELEASE_ROOT_SHA256 = "F0:35:40:EA:DE:99:C4:17:DE:25:60:86:EA:16:A8:DF:C9:5E:9A:34:43:10:E4:60:A8:F1:6E:22:FA:66:59:43"
SUPPORTED_CURVES = ("secp256r1", "secp384r1", "secp521r1")


@dataclass(frozen=True)
class KeyMaterial:
    """Where the release key, its certificate and the CA chain are (never inside the repo)."""

    private_key: Path
    signing_cert: Path
    chain: tuple[Path, ...]


@dataclass(frozen=True)
class CertInfo:
    """Who a certificate names, when it is valid, and its SHA-256 fingerprint."""

    subject: str
    issuer: str
    not_before: str
    not_after: str
    sha256: str
    code_signing: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "not_before": self.not_before,
            "not_after": self.not_after,
            "sha256": self.sha256,
            "code_signing": self.code_signing,
        }


@dataclass(frozen=True)
class SignedStatement:
    """What a bundle claims, read without trusting it (trust comes from verify_tree)."""

    subject_name: str
    method: str
    hash_type: str
    ignore_paths: tuple[str, ...]
    digests: Mapping[str, str]
    signer: CertInfo | None


@dataclass(frozen=True)
class Drift:
    """How a tree differs from the signed manifest (paths relative to the tree)."""

    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.missing)

    def as_dict(self) -> dict[str, list[str]]:
        return {"changed": list(self.changed), "added": list(self.added), "missing": list(self.missing)}


@dataclass(frozen=True)
class Failure:
    """Why the library rejected a tree: ``kind`` is stable, ``message`` is for people."""

    kind: str  # untrusted-certificate | bad-signature | certificate-usage | drift | invalid
    message: str


@dataclass(frozen=True)
class VerifyOutcome:
    failure: Failure | None
    drift: Drift = field(default_factory=Drift)

    @property
    def ok(self) -> bool:
        return self.failure is None


# --------------------------------------------------------------------------- certificates


def _fingerprint(cert: Any) -> str:
    from cryptography.hazmat.primitives import hashes

    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


def _has_code_signing(cert: Any) -> bool:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    try:
        return ExtendedKeyUsageOID.CODE_SIGNING in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False


def cert_info(cert: Any) -> CertInfo:
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        not_before=cert.not_valid_before_utc.isoformat(),
        not_after=cert.not_valid_after_utc.isoformat(),
        sha256=_fingerprint(cert),
        code_signing=_has_code_signing(cert),
    )


def _read(path: Path, what: str) -> bytes:
    from memtune.files.textfile import read_bounded

    try:
        return read_bounded(path, what)
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        kind = "a Sigstore bundle (JSON)" if what == "signature" else "a PEM file"
        raise InputError(f"{what} {path} is a directory, expected {kind}") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror}") from None


def load_certificates(path: Path, what: str) -> list[Any]:
    """Every PEM certificate in ``path``; one clear line when there is none."""
    from cryptography import x509

    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise InputError(f"{what} {path} holds no PEM certificate (expected PEM blocks of type CERTIFICATE)")
    return certs


def normalize_fingerprint(text: str, what: str = "fingerprint") -> str:
    """A SHA-256 fingerprint as ``AA:BB:...`` (64 hex digits), from the forms people paste:
    colon-separated or not, any case, with openssl's ``sha256 Fingerprint=`` prefix."""
    value = text.strip()
    if "=" in value:
        value = value.split("=", 1)[1]
    if value.lower().startswith("sha256:"):
        value = value[len("sha256:") :]
    digits = value.replace(":", "").replace(" ", "").upper()
    if len(digits) != 64 or any(c not in "0123456789ABCDEF" for c in digits):
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise InputError(
            f"{what} {shown!r} is not a SHA-256 fingerprint (64 hex digits, colons optional), "
            "as printed by: openssl x509 -in root-cert.pem -noout -fingerprint -sha256"
        )
    return ":".join(digits[i : i + 2] for i in range(0, 64, 2))


def trust_anchor_info(path: Path) -> CertInfo:
    """The first certificate of a trust-anchor file (what users compare with the README)."""
    return cert_info(load_certificates(path, "trust anchor")[0])


def _load_private_key(path: Path) -> EllipticCurvePrivateKey:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(
            f"private key {path} is encrypted; model_signing's certificate signer needs an unencrypted PEM key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise InputError(
            f"private key {path} is not a PEM private key (expected a PEM block of type PRIVATE KEY, PKCS#8)"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InputError(
            f"private key {path} is not an elliptic-curve key; model_signing signs with EC keys ({', '.join(SUPPORTED_CURVES)})"
        )
    if key.curve.name not in SUPPORTED_CURVES:
        raise InputError(
            f"private key {path} uses curve {key.curve.name}; model_signing supports {', '.join(SUPPORTED_CURVES)}"
        )
    return key


def check_key_material(material: KeyMaterial, now: _dt.datetime | None = None) -> CertInfo:
    """Refuse key material that would produce a signature nobody can or should trust.

    model_signing checks only that key and certificate match; it signs happily with an
    expired or a TLS-server certificate, and its verifier accepts the first because it
    judges validity at the certificate's start date. So this is the place to refuse them.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = _load_private_key(material.private_key)
    cert = load_certificates(material.signing_cert, "signing certificate")[0]
    for chain_file in material.chain:
        load_certificates(chain_file, "certificate chain")

    def _spki(public_key: CertificatePublicKeyTypes) -> bytes:
        return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise InputError(
            f"private key {material.private_key} does not match signing certificate {material.signing_cert} "
            "(their public keys differ); pass the key the certificate was issued for"
        )
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if now > cert.not_valid_after_utc:
        raise InputError(
            f"signing certificate {material.signing_cert} expired on {cert.not_valid_after_utc:%Y-%m-%d}; sign with a current certificate"
        )
    if now < cert.not_valid_before_utc:
        raise InputError(
            f"signing certificate {material.signing_cert} is not valid before {cert.not_valid_before_utc:%Y-%m-%d}"
        )
    if not _has_code_signing(cert):
        raise InputError(
            f"signing certificate {material.signing_cert} is not a code-signing certificate (extendedKeyUsage lacks codeSigning)"
        )
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        if not usage.digital_signature:
            raise InputError(f"signing certificate {material.signing_cert} does not allow digitalSignature (keyUsage)")
    except x509.ExtensionNotFound:
        pass
    return cert_info(cert)


# --------------------------------------------------------------------------- bundles


def read_statement(signature: Path) -> SignedStatement:
    """Parse a bundle's in-toto statement; any malformation is bad input (exit 2)."""
    raw = _read(signature, "signature")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"signature {signature} is not JSON ({exc}); expected a Sigstore bundle from `sign_skill.py sign` or `model_signing sign`"
        ) from None
    except RecursionError:
        raise InputError(
            f"signature {signature} is JSON nested too deeply to be a Sigstore bundle; pass the real skill.oms.sig"
        ) from None
    bad = f"signature {signature} is not a model_signing bundle"
    if not isinstance(doc, dict):
        raise InputError(f"{bad}: the top level is not a JSON object")
    envelope = doc.get("dsseEnvelope")
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        raise InputError(f"{bad}: no dsseEnvelope.payload")
    try:
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except RecursionError:
        raise InputError(f"{bad}: dsseEnvelope.payload is JSON nested too deeply") from None
    except (binascii.Error, ValueError):
        raise InputError(f"{bad}: dsseEnvelope.payload is not base64-encoded JSON") from None
    if not isinstance(statement, dict) or statement.get("predicateType") != PREDICATE_TYPE:
        raise InputError(f"{bad}: predicateType is not {PREDICATE_TYPE}")
    predicate = statement.get("predicate") or {}
    serialization = predicate.get("serialization") or {}
    resources = predicate.get("resources")
    if not isinstance(resources, list) or not isinstance(serialization, dict):
        raise InputError(f"{bad}: the predicate has no resources list")
    digests: dict[str, str] = {}
    for item in resources:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("digest"), str)
        ):
            raise InputError(f"{bad}: a resource lacks a name or digest")
        digests[item["name"]] = item["digest"]
    subjects = statement.get("subject") or [{}]
    return SignedStatement(
        subject_name=str(subjects[0].get("name", "")) if isinstance(subjects[0], dict) else "",
        method=str(serialization.get("method", "")),
        hash_type=str(serialization.get("hash_type", "")),
        ignore_paths=tuple(str(p) for p in serialization.get("ignore_paths") or ()),
        digests=digests,
        signer=_bundle_signer(doc, signature),
    )


def _bundle_signer(doc: Mapping[str, Any], signature: Path) -> CertInfo | None:
    from cryptography import x509

    material = doc.get("verificationMaterial")
    if not isinstance(material, dict):
        raise InputError(f"signature {signature} is not a model_signing bundle: no verificationMaterial")
    chain = material.get("x509CertificateChain")
    if chain is None:
        if "publicKey" in material:
            raise InputError(
                f"signature {signature} was made with a bare key, not a certificate; verify it with `model_signing verify key`"
            )
        raise InputError(f"signature {signature} carries no certificate chain")
    try:
        der = base64.b64decode(chain["certificates"][0]["rawBytes"], validate=True)
        return cert_info(x509.load_der_x509_certificate(der))
    except (KeyError, IndexError, TypeError, binascii.Error, ValueError):
        raise InputError(f"signature {signature}: its signing certificate cannot be decoded") from None


# --------------------------------------------------------------------------- sign / verify


def _relative_inside(path: Path, tree: Path) -> str | None:
    try:
        return path.resolve().relative_to(tree.resolve()).as_posix()
    except ValueError:
        return None


def _hashing_config(ignore: Iterable[str]) -> Any:
    """The hashing settings of the plain CLI: git metadata skipped, symlinks refused."""
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=list(ignore), ignore_git_paths=True)


def sign_tree(tree: Path, signature_out: Path, material: KeyMaterial, ignore: Sequence[str]) -> None:
    """Sign every file under ``tree`` (minus ``ignore``, recorded in the bundle)."""
    from model_signing import signing

    signing.Config().use_certificate_signer(
        private_key=material.private_key,
        signing_certificate=material.signing_cert,
        certificate_chain=list(material.chain),
    ).set_hashing_config(_hashing_config(ignore)).sign(tree, signature_out)


def verify_tree(tree: Path, signature: Path, anchors: Sequence[Path]) -> Failure | None:
    """Strict verification, configured as ``model_signing verify certificate`` does it.

    Returns None when the tree matches, else why not. Certificate chain, DSSE signature and
    manifest are all checked by the library; only its exceptions are translated here.
    """
    from cryptography.exceptions import InvalidSignature
    from model_signing import verifying
    from OpenSSL.crypto import X509StoreContextError

    own = _relative_inside(signature, tree)
    config = verifying.Config().use_certificate_verifier(certificate_chain=list(anchors))
    config.set_hashing_config(_hashing_config([own] if own else []))
    anchor_names = ", ".join(str(a) for a in anchors)
    try:
        config.verify(tree, signature)
    except X509StoreContextError as exc:
        return Failure(
            "untrusted-certificate",
            f"the signing certificate does not chain to the trust anchor {anchor_names} ({exc})",
        )
    except InvalidSignature:
        return Failure(
            "bad-signature",
            f"the signature in {signature} does not match its signed statement (the bundle was altered or signed with another key)",
        )
    except ValueError as exc:
        text = str(exc)
        if text.startswith("Signature mismatch"):
            return Failure("drift", "the files differ from the signed manifest")
        if "cannot be used for signing" in text:
            return Failure(
                "certificate-usage",
                f"the signing certificate in {signature} is not allowed to sign (keyUsage/extendedKeyUsage)",
            )
        return Failure("invalid", text.splitlines()[0] if text else type(exc).__name__)
    return None


def actual_digests(tree: Path, signature: Path, statement: SignedStatement) -> dict[str, str] | None:
    """Hash ``tree`` the way the verifier does, for the drift report (None if impossible)."""
    if statement.method != "files":
        return None
    own = _relative_inside(signature, tree)
    config = _hashing_config([*statement.ignore_paths, *([own] if own else [])])
    try:
        config.use_file_serialization(hashing_algorithm=statement.hash_type or "sha256")
        manifest = config.hash(tree)
    except ValueError:  # a symlink in the tree, an unknown hash: the failure message says it
        return None
    return {rd.identifier: rd.digest.digest_hex for rd in manifest.resource_descriptors()}


def compare(expected: Mapping[str, str], actual: Mapping[str, str]) -> Drift:
    return Drift(
        changed=tuple(sorted(p for p in expected.keys() & actual.keys() if expected[p] != actual[p])),
        added=tuple(sorted(actual.keys() - expected.keys())),
        missing=tuple(sorted(expected.keys() - actual.keys())),
    )


def verify_with_report(
    tree: Path, signature: Path, anchors: Sequence[Path], statement: SignedStatement
) -> VerifyOutcome:
    """verify_tree plus, on failure, which files changed, appeared or disappeared.

    Stricter than the plain CLI in one point: the signing certificate must carry the
    codeSigning extended key usage (model_signing also accepts any certificate whose
    keyUsage allows digitalSignature, such as a TLS server certificate).
    """
    failure = verify_tree(tree, signature, anchors)
    if failure is None and statement.signer is not None and not statement.signer.code_signing:
        failure = Failure(
            "certificate-usage",
            f"the signing certificate in {signature} ({statement.signer.subject}) is not a code-signing "
            "certificate (extendedKeyUsage lacks codeSigning)",
        )
    if failure is None:
        return VerifyOutcome(None)
    actual = actual_digests(tree, signature, statement)
    drift = compare(statement.digests, actual) if actual is not None else Drift()
    return VerifyOutcome(failure, drift)


def write_atomically(data: bytes, target: Path) -> None:
    """Replace ``target`` only once the new bytes are fully on disk (same-dir temp + rename),
    so an interrupted or failed run leaves the previous good signature untouched."""
    from memtune.files.writing import writing

    with writing(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
