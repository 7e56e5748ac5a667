"""The security scan: flags real problems, and only those.

Bad snippets are built at run time (joined pieces, generated keys) so this file never
contains a token, key or pipe-to-shell command itself — the repo scan must stay clean.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from memtune.lint import package, pysafety, security
from memtune.lint.package import LINT_DATA_DIR, Package

RULES = security.ScanRules.from_table(package.load_rules("security"))
PIPE = chr(124)


def py_rules(source: str) -> list[tuple[str, str, int | None]]:
    return [(f.rule, f.severity, f.line) for f in pysafety.scan(source, "x.py", RULES.python)]


@pytest.mark.parametrize("source, rule", [
    ("import subprocess\nsubprocess.run('ls', shell=True)\n", "security/shell-true"),
    ("from subprocess import Popen as P\nP(['ls'], shell=1)\n", "security/shell-true"),
    ("import os\nos.system('ls')\n", "security/shell-call"),
    ("x = eval('1+1')\n", "security/eval-exec"),
    ("exec('print(1)')\n", "security/eval-exec"),
    ("import yaml\nyaml.load(open('f'))\n", "security/yaml-load"),
    ("import yaml as y\ny.load(open('f'), Loader=y.Loader)\n", "security/yaml-load"),
    ("from yaml import load, FullLoader\nload('a: 1', FullLoader)\n", "security/yaml-load"),
    ("import yaml\nyaml.unsafe_load('a: 1')\n", "security/yaml-load"),
    ("import requests\n", "security/network"),
    ("import urllib.request\n", "security/network"),
    ("from urllib import request\n", "security/network"),
    ("from http.client import HTTPSConnection\n", "security/network"),
    ("import socket\n", "security/network"),
    ("import importlib\nimportlib.import_module('httpx')\n", "security/network"),
])
def test_unsafe_python_is_flagged_as_error(source: str, rule: str) -> None:
    found = py_rules(source)
    assert (rule, "error", 2 if "\n" in source.rstrip("\n") else 1) in found, found


@pytest.mark.parametrize("source", [
    "import subprocess\nsubprocess.run(['ls'], shell=False, check=True)\n",
    "import yaml\nyaml.safe_load('a: 1')\n",
    "import yaml\nyaml.load('a: 1', Loader=yaml.SafeLoader)\n",
    "from yaml import load, CSafeLoader\nload('a: 1', CSafeLoader)\n",
    "import urllib.parse\nurllib.parse.quote('a b')\n",
    "model.eval()\ndf.eval('a + b')\n",
    "text = 'subprocess.run(cmd, shell=True); eval(x); import requests'\n",
    "import ast\nast.literal_eval('[1, 2]')\n",
])
def test_safe_python_is_not_flagged(source: str) -> None:
    assert py_rules(source) == []


def test_non_literal_shell_is_a_warning() -> None:
    assert py_rules("import subprocess\nsubprocess.run(c, shell=flag)\n") == [("security/shell-true", "warning", 2)]


def test_unparseable_python_is_a_warning_not_a_crash() -> None:
    assert py_rules("def broken(:\n") == [("security/python-unparsed", "warning", 1)]


def fake_tokens() -> dict[str, str]:
    body = "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
    return {
        "security/aws-access-key": "AKIA" + "Q3EXAMPLE7ZZ2KEY",
        "security/github-token": "ghp" + "_" + body,
        "security/slack-token": "xoxb" + "-123456789012-abcdefABCDEF",
        "security/openai-key": "sk" + "-proj-" + body + "xyz",
        "security/hf-token": "hf" + "_" + body,
    }


@pytest.mark.parametrize("rule", sorted(fake_tokens()))
def test_tokens_are_flagged_with_their_line(rule: str) -> None:
    text = "line one\nconfig = '" + fake_tokens()[rule] + "'\n"
    found = [(f.rule, f.line) for f in security.scan_text(text, "conf.py", RULES)]
    assert found == [(rule, 2)]


def pem_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()


def test_private_key_inside_markdown_and_inside_gz(tmp_path: Path) -> None:
    key = pem_key()
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\n\n```\n" + key + "```\n", encoding="utf-8")
    assert [(f.rule, f.line) for f in security.scan_file(doc, "notes.md", RULES)] == [("security/private-key", 4)]
    packed = tmp_path / "log.txt.gz"
    packed.write_bytes(gzip.compress(("oom log\n" + key).encode()))
    assert [f.rule for f in security.scan_file(packed, "log.txt.gz", RULES)] == ["security/private-key"]


def test_text_that_only_names_a_key_header_is_not_a_key() -> None:
    header = "-----BEGIN " + "PRIVATE KEY-----"
    text = f"Never commit a file that starts with `{header}`.\n"
    assert security.scan_text(text, "README.md", RULES) == []


def test_public_certificate_is_not_flagged(repo_root: Path) -> None:
    cert = repo_root / "signing" / "root-cert.pem"
    assert security.scan_file(cert, "signing/root-cert.pem", RULES) == []


@pytest.mark.parametrize("command", [
    "curl -fsSL https://example.com/install.sh " + PIPE + " sh",
    "wget -qO- http://example.com/x " + PIPE + " sudo bash",
    "bash <(" + "curl -s https://example.com/x)",
    'sh -c "$(' + 'curl -fsSL https://example.com/x)"',
])
def test_download_piped_into_shell_is_flagged(command: str) -> None:
    found = security.scan_text("#!/bin/sh\n" + command + "\n", "install.sh", RULES)
    assert [(f.rule.startswith("security/"), f.line) for f in found] == [(True, 2)]


def test_describing_the_rule_is_not_flagged() -> None:
    text = "The scan rejects `curl " + PIPE + " sh`, `eval(`, `shell=True` and `yaml.load` without SafeLoader.\n"
    assert security.scan_text(text, "skill-card.md", RULES) == []


def test_scanner_rules_and_sources_do_not_flag_themselves() -> None:
    """No exemption list is needed: the pattern file and the scanner's code scan clean."""
    lint_dir = Path(security.__file__).parent
    targets = sorted(LINT_DATA_DIR.glob("*.yaml")) + sorted(lint_dir.glob("*.py")) + [Path(__file__)]
    pkg = Package(Path(security.__file__).resolve().parents[3])
    found = [f for path in targets for f in security.scan_file(path, pkg.rel(path), RULES)]
    assert found == []


def test_binary_file_is_still_searched_for_keys(tmp_path: Path) -> None:
    blob = tmp_path / "model.bin"
    blob.write_bytes(b"\0\1\2" + pem_key().encode() + b"\0")
    assert [f.rule for f in security.scan_file(blob, "model.bin", RULES)] == ["security/private-key"]
