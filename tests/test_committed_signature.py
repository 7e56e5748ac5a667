"""The committed skill.oms.sig verifies for HEAD, strictly, against the committed root.

Checks `git archive HEAD` (exactly what a clone ships, no venv or caches) with our verify
and with the plain model_signing CLI. Only meaningful once skill.oms.sig is tracked in
HEAD; until then it is reported as skipped, with the reason.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from memtune.commands import sign_skill
from signing_pki import SKILL_NAME

REPO_ROOT = Path(__file__).resolve().parent.parent


def _signature_tracked_in_head() -> tuple[bool, str]:
    if not (REPO_ROOT / ".git").exists():
        return False, "not a git checkout: nothing to compare the committed signature with"
    result = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-tree", "--name-only", "HEAD", "skill.oms.sig"], capture_output=True, text=True
    )
    if result.returncode != 0 or not result.stdout.strip():
        return False, "skill.oms.sig is not tracked in HEAD yet (the release signing commit adds it)"
    return True, ""


TRACKED, WHY_NOT = _signature_tracked_in_head()
# real verification of the whole tree (the CI's signature step checks it too)
pytestmark = [pytest.mark.skipif(not TRACKED, reason=WHY_NOT), pytest.mark.slow]


@pytest.fixture(scope="module")
def head_tree(tmp_path_factory) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", "HEAD"], capture_output=True, check=True
    ).stdout
    dest = tmp_path_factory.mktemp("head") / SKILL_NAME
    dest.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python without the extraction filters (< 3.10.12): our own archive
            tar.extractall(dest)
    return dest


def test_committed_signature_verifies_with_plain_cli(head_tree):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "model_signing",
            "verify",
            "certificate",
            str(head_tree),
            "--signature",
            str(head_tree / "skill.oms.sig"),
            "--certificate_chain",
            str(head_tree / "signing" / "root-cert.pem"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_committed_signature_verifies_with_sign_skill(head_tree, capsys):
    code = sign_skill.main(["verify", str(head_tree), "--root-cert", str(head_tree / "signing" / "root-cert.pem")])
    out = capsys.readouterr().out
    assert code == 0, out
