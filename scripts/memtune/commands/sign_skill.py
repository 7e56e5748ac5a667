"""sign_skill.py: sign or verify skill.oms.sig over every file the skill ships."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memtune.cli import FC, Group, argument, invoke, option, print_json
from memtune.commands.options import json_option
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError
from memtune.files import paths
from memtune.release.names import SIGNATURE_NAME

if TYPE_CHECKING:  # model_signing and cryptography load only when a subcommand runs
    from memtune.release import checkout_leftovers
    from memtune.release.signing import CertInfo, Failure, KeyMaterial, VerifyOutcome

DEFAULT_ROOT_CERT = paths.SKILL_ROOT / "signing" / "root-cert.pem"
ENV_KEY = "MEMTUNE_SIGNING_KEY"
ENV_CERT = "MEMTUNE_SIGNING_CERT"
ENV_CHAIN = "MEMTUNE_SIGNING_CHAIN"
ENV_EXPECT = "MEMTUNE_EXPECT_ROOT_SHA256"
# What model_signing's default never hashes, besides the git metadata files themselves.
NOT_COVERED_ALWAYS = "file modes (the executable bit) and empty folders"
MAX_LISTED = 20

DESCRIPTION = f"""\
Sign or verify skill.oms.sig, the OMS (Sigstore bundle) signature over every file the
skill ships. `npx skills add` copies the whole package minus .git, __pycache__ and
metadata.json, so the signature covers all of it and the strict form of
`model_signing verify certificate` (no --ignore_unsigned_files) passes.

  sign    sign the git-tracked files of a clean work tree (or every file of a plain
          folder) with the release key; key material comes from options or environment
          variables, never from inside the repository; the new signature must verify
          against the trust anchor before it replaces the old one.
  verify  strict verification against the trust anchor (default: this package's
          signing/root-cert.pem); on failure, which files changed, were added or are
          missing. Prints the anchor's SHA-256 fingerprint on every run and fails when it
          differs from the expected one (--expect-fingerprint, ${ENV_EXPECT}, else
          the release root pinned in the code): an anchor inside the tree it verifies
          proves nothing by itself. Any bytecode (*.pyc, __pycache__) in the tree fails.
          Exit 0 verified, 1 verification failed, 2 bad input.
"""

EPILOG = f"""\
examples:
  # verify this package (a git checkout checks its tracked files)
  python3 scripts/sign_skill.py verify
  # ... requiring the root fingerprint you obtained outside the package
  python3 scripts/sign_skill.py verify --expect-fingerprint F0:35:40:EA:...:59:43
  # verify an installed copy; the Claude Code path is a symlink and is resolved
  python3 scripts/sign_skill.py verify .claude/skills/nemo-mbridge-perf-memory-tuning --json
  # the same check with the plain model_signing CLI (strict)
  model_signing verify certificate .agents/skills/nemo-mbridge-perf-memory-tuning \\
    --signature .agents/skills/nemo-mbridge-perf-memory-tuning/skill.oms.sig \\
    --certificate_chain signing/root-cert.pem
  # sign (release key kept outside the repo)
  {ENV_KEY}=../shared/signing/signing-key.pem {ENV_CERT}=../shared/signing/signing-cert.pem \\
  {ENV_CHAIN}=../shared/signing/chain.pem python3 scripts/sign_skill.py sign
"""


PATH = click.Path(path_type=Path)


@dataclass(frozen=True)
class SignArgs:
    """``sign``'s options as parsed (the package directory is resolved apart)."""

    private_key: Path | None
    signing_cert: Path | None
    cert_chain: tuple[Path, ...]
    signature: Path | None
    root_cert: Path
    allow_dirty: bool
    as_json: bool


@dataclass(frozen=True)
class VerifyReport:
    """What the text report of ``verify`` prints besides the outcome (the JSON has it all)."""

    root: Path
    signature: Path
    mode: str
    files_signed: int
    signer_subject: str | None
    anchor_path: Path
    notes: list[str]


@dataclass(frozen=True)
class VerifyArgs:
    """``verify``'s options as parsed (the package directory is resolved apart)."""

    signature: Path | None
    root_cert: Path
    expect_fingerprint: str | None
    all_files: bool
    as_json: bool


_SIGN_HELP = """\
Sign the files the package ships (git-tracked files of a clean work tree, or every file of a
plain folder) with the release key. Nothing is written unless the key material is valid (matching
key, current code-signing certificate) and the new signature verifies against --root-cert.
Exit 0 signed, 2 bad input."""

_VERIFY_HELP = """\
Strictly verify a package tree (a git checkout: its tracked files; any other folder, such as an
installed copy: every file) against skill.oms.sig and the trust anchor. A symlinked DIRECTORY is
resolved. On failure, lists the changed, added and missing files.
Exit 0 verified, 1 verification failed, 2 bad input."""


@click.group(
    "sign-skill",
    cls=Group,
    short_help="sign / verify skill.oms.sig over every shipped file",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@click.pass_context
def command(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise InputError("choose a subcommand: sign or verify (see --help)")


def _directory() -> Callable[[FC], FC]:
    return argument(
        "directory",
        required=False,
        type=PATH,
        default=paths.SKILL_ROOT,
        help_text="package root (default: this package)",
    )


@command.command("sign", help=_SIGN_HELP, epilog=EPILOG, short_help="write skill.oms.sig for a package tree")
@_directory()
@option("--private-key", type=PATH, help=f"leaf private key, PEM (or ${ENV_KEY}); must be outside the package")
@option("--signing-cert", type=PATH, help=f"leaf code-signing certificate, PEM (or ${ENV_CERT})")
@option(
    "--cert-chain",
    type=PATH,
    multiple=True,
    help=f"intermediate + root certificates, PEM; repeatable (or ${ENV_CHAIN}, {os.pathsep}-separated)",
)
@option("--signature", type=PATH, help=f"where to write the signature (default: DIRECTORY/{SIGNATURE_NAME})")
@option(
    "--root-cert",
    type=PATH,
    default=DEFAULT_ROOT_CERT,
    help="trust anchor the new signature must verify against (default: signing/root-cert.pem)",
)
@option(
    "--allow-dirty",
    is_flag=True,
    help="sign a git work tree with uncommitted changes (the signature then matches no commit)",
)
@json_option()
def sign_command(
    directory: Path,
    private_key: Path | None,
    signing_cert: Path | None,
    cert_chain: tuple[Path, ...],
    signature: Path | None,
    root_cert: Path,
    allow_dirty: bool,
    as_json: bool,
) -> int:
    args = SignArgs(private_key, signing_cert, cert_chain, signature, root_cert, allow_dirty, as_json)
    root, notes = _resolve_root(directory)
    return _sign(args, root, notes)


@command.command(
    "verify", help=_VERIFY_HELP, epilog=EPILOG, short_help="strictly verify a package tree against skill.oms.sig"
)
@_directory()
@option("--signature", type=PATH, help=f"signature file (default: DIRECTORY/{SIGNATURE_NAME})")
@option(
    "--root-cert",
    type=PATH,
    default=DEFAULT_ROOT_CERT,
    help="trust anchor, PEM (default: signing/root-cert.pem of this package)",
)
@option(
    "--expect-fingerprint",
    metavar="SHA256",
    help=f"SHA-256 fingerprint the trust anchor must have, obtained outside this package (or ${ENV_EXPECT}; default: the release root pinned in the code)",
)
@option(
    "--all-files",
    is_flag=True,
    help="in a git work tree, check every file (as a local `npx skills add DIR` would ship) instead of the tracked ones",
)
@json_option()
def verify_command(
    directory: Path,
    signature: Path | None,
    root_cert: Path,
    expect_fingerprint: str | None,
    all_files: bool,
    as_json: bool,
) -> int:
    args = VerifyArgs(signature, root_cert, expect_fingerprint, all_files, as_json)
    root, notes = _resolve_root(directory)
    return _verify(args, root, notes)


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "sign_skill.py", argv)


# --------------------------------------------------------------------------- helpers


def _resolve_root(directory: Path) -> tuple[Path, list[str]]:
    """Resolve symlinks (the Claude Code install path is one; model_signing refuses a
    symlinked root) and say so, so the user knows which folder was actually checked."""
    if not directory.exists():
        raise InputError(f"package directory {directory} does not exist")
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory; pass the package root (the folder holding SKILL.md)")
    resolved = directory.resolve()
    notes = []
    if resolved != directory.absolute():
        notes.append(f"{directory} is a symlink (or lies under one); checked its target {resolved}")
    return resolved, notes


def _skill_name(root: Path) -> str:
    """The export folder is named after the skill, as an installed copy is."""
    try:
        text = (root / "SKILL.md").read_text(encoding="utf-8")
    except OSError:
        return root.name
    match = re.search(r"^name:\s*['\"]?([A-Za-z0-9][A-Za-z0-9-]*)", text, re.MULTILINE)
    return match.group(1) if match else root.name


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f", … ({len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else "")


def _key_material(args: SignArgs, root: Path) -> KeyMaterial:
    from memtune.release.signing import KeyMaterial

    def pick(option: Path | None, env: str, flag: str, what: str) -> Path:
        value = option or (Path(os.environ[env]) if os.environ.get(env) else None)
        if value is None:
            raise InputError(f"no {what}: pass {flag} PATH or set {env}")
        return value

    key = pick(args.private_key, ENV_KEY, "--private-key", "private key")
    cert = pick(args.signing_cert, ENV_CERT, "--signing-cert", "signing certificate")
    if args.cert_chain:
        chain = tuple(args.cert_chain)
    elif os.environ.get(ENV_CHAIN):
        chain = tuple(Path(p) for p in os.environ[ENV_CHAIN].split(os.pathsep) if p)
    else:
        raise InputError(f"no certificate chain: pass --cert-chain PATH or set {ENV_CHAIN}")
    if key.exists() and key.resolve().is_relative_to(root):
        raise InputError(
            f"private key {key} lies inside the package {root}: it would ship to every user; keep the release key outside the repository"
        )
    return KeyMaterial(private_key=key, signing_cert=cert, chain=chain)


# --------------------------------------------------------------------------- sign


def _sign(args: SignArgs, root: Path, notes: list[str]) -> int:
    from memtune.release import shipped_files, signing

    material = _key_material(args, root)
    signer = signing.check_key_material(material)
    anchor = signing.trust_anchor_info(args.root_cert)
    target = (args.signature or root / SIGNATURE_NAME).absolute()
    own = target.resolve().relative_to(root).as_posix() if target.resolve().is_relative_to(root) else None

    shipped = shipped_files.shipped_set(root, signature_rel=own)
    commit = None
    if shipped.mode == shipped_files.MODE_GIT:
        dirty = shipped_files.git_dirty_paths(root, ignore=(own,) if own else ())
        if dirty and not args.allow_dirty:
            raise InputError(
                f"{root} has uncommitted changes ({_listed(dirty)}); commit them so the signature matches a commit, "
                "or pass --allow-dirty"
            )
        commit = shipped_files.git_head(root) + ("-dirty" if dirty else "")
    if not shipped.files:
        raise InputError(f"{root} has no files to sign")
    bytecode = [f for f in shipped.files if shipped_files.is_bytecode(f)]
    if bytecode:
        raise InputError(
            f"{root} holds bytecode ({_listed(bytecode)}); a signature must not vouch for compiled "
            "files: delete them and sign again"
        )
    # __pycache__ is deliberately not ignored: a cache planted in an installed copy must make
    # even the plain `model_signing verify` fail (the helpers never write one there).
    ignore = sorted({SIGNATURE_NAME, *([own] if own else [])})

    with tempfile.TemporaryDirectory(prefix="sign_skill.") as tmp:
        tree = shipped_files.export(shipped, Path(tmp) / _skill_name(root))
        draft = Path(tmp) / SIGNATURE_NAME
        signing.sign_tree(tree, draft, material, ignore)
        # Never replace a signature with one the trust anchor rejects.
        failure = signing.verify_tree(tree, draft, [args.root_cert])
        if failure is not None:
            raise InputError(
                f"the new signature does not verify against {args.root_cert}: {failure.message}; nothing was written"
            )
        signing.write_atomically(draft.read_bytes(), target)

    notes.append(_not_covered_note(shipped.unsignable))
    result = {
        "signature": str(target),
        "root": str(root),
        "mode": shipped.mode,
        "commit": commit,
        "files_signed": len(shipped.files),
        "ignored": ignore,
        "signer": signer.as_dict(),
        "trust_anchor": {"path": str(args.root_cert), **anchor.as_dict()},
        "notes": notes,
    }
    if args.as_json:
        print_json(result)
    else:
        where = f" (commit {commit})" if commit else ""
        print(f"signed {len(shipped.files)} files of {root}{where} -> {target}")
        print(f"signer: {signer.subject} (valid until {signer.not_after[:10]})")
        print(f"verified against trust anchor {args.root_cert} (SHA-256 {anchor.sha256})")
        for note in notes:
            print(f"note: {note}")
    return EXIT_OK


# --------------------------------------------------------------------------- verify


def _expected_anchor(args: VerifyArgs) -> tuple[str, str]:
    """(fingerprint the anchor must have, where that expectation came from)."""
    from memtune.release import signing

    if args.expect_fingerprint:
        return signing.normalize_fingerprint(args.expect_fingerprint, "--expect-fingerprint"), "--expect-fingerprint"
    if os.environ.get(ENV_EXPECT):
        return signing.normalize_fingerprint(os.environ[ENV_EXPECT], f"${ENV_EXPECT}"), f"${ENV_EXPECT}"
    return signing.RELEASE_ROOT_SHA256, "the release root pinned in memtune/release/signing.py"


def _not_covered_note(unsignable: Sequence[str]) -> str:
    """Shipped content the signature cannot vouch for, named so a reviewer looks at it."""
    files = f"{_listed(unsignable)}; " if unsignable else ""
    return f"present, not covered by the signature: {files}{NOT_COVERED_ALWAYS} (model_signing never hashes git metadata or modes)"


def _bytecode_failure(
    root: Path, use_git: bool, leftovers: Collection[checkout_leftovers.LeftoverGroup] = ()
) -> tuple[Failure | None, list[str]]:
    """(Failure or None, notes) for compiled Python found under ``root``.

    A directory (an installed copy) must hold none outside working-checkout leftovers (a
    virtualenv is full of it; the leftover failure already rejects the copy). A git work tree keeps its
    developer caches (__pycache__, virtualenvs: never read by the helpers, never shipped),
    but tracked bytecode or a sourceless .pyc elsewhere fails.
    """
    from memtune.release import checkout_leftovers, shipped_files, signing

    notes: list[str] = []
    if use_git:
        bad = list(shipped_files.bytecode_files(root, in_caches=False, in_venvs=False))
        cached = shipped_files.bytecode_files(root, in_venvs=False)
        caches = sorted({str(Path(f).parent) for f in cached if shipped_files.BYTECODE_DIR in Path(f).parts})
        if caches:
            notes.append(
                f"bytecode caches in the work tree are not checked (they never ship and the helpers never read them): {_listed(caches)}"
            )
    else:
        bad = [f for f in shipped_files.bytecode_files(root) if not checkout_leftovers.belongs_to(f, leftovers)]
    if not bad:
        return None, notes
    failure = signing.Failure(
        "unsigned-executable",
        f"unsigned executable content: {len(bad)} bytecode file(s) ({_listed(bad)}); Python can run them in place of "
        "the signed sources: delete them (and find out who put them there), then verify again",
    )
    return failure, notes


def _verify(args: VerifyArgs, root: Path, notes: list[str]) -> int:
    from memtune.release import checkout_leftovers, shipped_files, signing

    signature = (args.signature or root / SIGNATURE_NAME).absolute()
    expected, expected_from = _expected_anchor(args)
    statement = signing.read_statement(signature)
    anchor = signing.trust_anchor_info(args.root_cert)
    anchor_matches = anchor.sha256 == expected
    if args.root_cert.resolve().is_relative_to(root):
        notes.append(
            f"the trust anchor {args.root_cert} lies inside the tree being verified, so this check alone is circular: "
            "compare its fingerprint with one obtained outside the package (README: Verify the signature)"
        )
    own = signature.resolve().relative_to(root).as_posix() if signature.resolve().is_relative_to(root) else None
    use_git = shipped_files.is_git_root(root) and not args.all_files
    shipped = shipped_files.shipped_set(
        root, signature_rel=own, use_git=use_git, symlink_ok=None if use_git else checkout_leftovers.in_named_leftover
    )
    # An installed copy (a plain folder) may carry a working checkout's venv and caches:
    # they are checked apart from the skill's own files, so each problem reads as itself.
    split = (
        checkout_leftovers.LeftoverSplit(other=shipped.files)
        if use_git
        else checkout_leftovers.split_leftovers(shipped.files, signed=statement.digests.keys())
    )
    for rel in split.other:  # symlinks pass shipped_set only inside a leftover location
        if not use_git and (root / rel).is_symlink():
            raise InputError(
                f"{root / rel} is a symlink: model_signing refuses symlinks inside a signed tree; "
                "replace it with the file it points to"
            )
    bytecode, bytecode_notes = _bytecode_failure(root, use_git, split.groups)
    notes.extend(bytecode_notes)

    if not anchor_matches:
        outcome = signing.VerifyOutcome(
            signing.Failure(
                "anchor-mismatch",
                f"the trust anchor {args.root_cert} has SHA-256 {anchor.sha256}, but {expected_from} expects {expected}: "
                "it may have been swapped; get the release root from a trusted source and pass it with --root-cert",
            )
        )
    else:
        with tempfile.TemporaryDirectory(prefix="sign_skill.") as tmp:
            # A git work tree holds a venv and caches that never ship: check an export of
            # what does ship. So does a copy with leftovers, minus the leftovers. Any other
            # folder is checked in place, as model_signing would.
            if use_git or split:
                tree = shipped_files.export(replace(shipped, files=split.other), Path(tmp) / root.name)
            else:
                tree = root
            outcome = signing.verify_with_report(tree, signature, [args.root_cert], statement)
        if bytecode is not None:
            outcome = signing.VerifyOutcome(bytecode, outcome.drift)
        elif split and outcome.ok:
            outcome = signing.VerifyOutcome(
                signing.Failure("working-checkout", checkout_leftovers.message(split.groups))
            )
    if split and (outcome.failure is None or outcome.failure.kind != "working-checkout"):
        notes.append(
            f"this copy was also installed from a working checkout: {checkout_leftovers.describe(split.groups)} "
            f"(not part of the skill); {checkout_leftovers.REINSTALL}"
        )

    notes.append(_not_covered_note(shipped.unsignable))
    if shipped.untracked:
        notes.append(
            f"{len(shipped.untracked)} untracked file(s) not checked (they do not ship from git): {_listed(shipped.untracked)}"
        )

    result = {
        "ok": outcome.ok,
        "root": str(root),
        "signature": str(signature),
        "mode": shipped.mode,
        "files_checked": len(shipped.files),
        "files_signed": len(statement.digests),
        "signer": statement.signer.as_dict() if statement.signer else None,
        "trust_anchor": {
            "path": str(args.root_cert),
            **anchor.as_dict(),
            "expected_sha256": expected,
            "expected_from": expected_from,
            "matches_expected": anchor_matches,
        },
        "failure": {"kind": outcome.failure.kind, "message": outcome.failure.message} if outcome.failure else None,
        "drift": outcome.drift.as_dict(),
        "leftovers": [group.as_dict() for group in split.groups],
        "not_covered": [*shipped.unsignable, NOT_COVERED_ALWAYS],
        "notes": notes,
    }
    if args.as_json:
        print_json(result)
    else:
        report = VerifyReport(
            root,
            signature,
            shipped.mode,
            len(statement.digests),
            statement.signer.subject if statement.signer else None,
            args.root_cert,
            notes,
        )
        _print_verify(report, outcome, anchor, expected_from, anchor_matches)
    return EXIT_OK if outcome.ok else EXIT_FINDINGS


def _print_verify(
    result: VerifyReport, outcome: VerifyOutcome, anchor: CertInfo, expected_from: str, anchor_matches: bool
) -> None:
    if outcome.ok:
        print(f"verified: {result.root} matches {result.signature} ({result.files_signed} signed files, {result.mode})")
        print(f"signer: {result.signer_subject or '?'}")
    elif outcome.failure is not None:
        print(f"FAILED: {result.root} does not verify against {result.signature}")
        print(f"reason: {outcome.failure.message}")
        drift = outcome.drift
        for label, items in (("changed", drift.changed), ("added", drift.added), ("missing", drift.missing)):
            for item in items[:MAX_LISTED]:
                print(f"  {label + ':':9}{item}")
            if len(items) > MAX_LISTED:
                print(f"  {label + ':':9}… {len(items) - MAX_LISTED} more")
        if outcome.failure.kind == "drift" and not drift:
            print("  (the file-level report is unavailable for this signature's serialization method)")
    verdict = "matches" if anchor_matches else "DOES NOT MATCH"
    print(f"trust anchor: {result.anchor_path} SHA-256 {anchor.sha256} ({verdict} {expected_from})")
    for note in result.notes:
        print(f"note: {note}")
