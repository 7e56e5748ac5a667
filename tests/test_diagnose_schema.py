"""diagnose.py --json against its published JSON Schema (data/schemas/output/diagnose.schema.json).

The schema is a contract for machines and the source of the generated reference page, so
it is checked against what the helper really prints: one run over every real sample (plus
an input without failures and a --torch-version run) and a --symptom lookup.  Every field
must say what it means (and its unit), or the reference page would have holes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from helper_cli import invoke

REPO = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO / "scripts" / "memtune" / "data" / "schemas" / "output" / "diagnose.schema.json"
SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def run_json(*args: str) -> dict:
    res = invoke("diagnose", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _errors(validator: Draft202012Validator, doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_every_sample_report_validates(validator: Draft202012Validator, tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("iteration 10 | loss 2.0\n", encoding="utf-8")
    samples = sorted(str(p) for p in SAMPLES.glob("*.txt"))
    doc = run_json(*samples, str(quiet))
    assert len(doc["findings"]) > len(samples)  # one run really covered them
    assert {f["kind"] for f in doc["findings"]} >= {"fragmentation", "capacity", "unrecognized-gpu-memory-error"}
    assert _errors(validator, doc) == []


def test_override_and_empty_reports_validate(validator: Draft202012Validator, tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("nothing to see\n", encoding="utf-8")
    empty = run_json(str(quiet))
    assert empty["findings"] == [] and empty["message"]
    pinned = run_json(
        str(SAMPLES / "12_lmcache_issue3430_newest_docs_url_private_pools.txt"), "--torch-version", "2.0.1"
    )
    assert pinned["findings"][0]["torch"]["source"] == "--torch-version"
    for doc in (empty, pinned):
        assert _errors(validator, doc) == []


def test_symptom_lookup_validates(validator: Draft202012Validator) -> None:
    doc = run_json("--symptom", "OOM on one rank only")
    assert doc["matches"]
    assert _errors(validator, doc) == []


def test_schema_rejects_a_wrong_document(validator: Draft202012Validator) -> None:
    doc = run_json(str(SAMPLES / "01_pytorch_pr99699_new_format_capacty.txt"))
    doc["findings"][0]["numbers"]["requested_bytes"] = "138.00 MiB"  # bytes are integers
    assert _errors(validator, doc)


def _walk(node: object, path: str, out: list[str]) -> None:
    if isinstance(node, dict):
        for key in ("properties", "$defs"):
            for name, sub in (node.get(key) or {}).items():
                if key == "properties" and isinstance(sub, dict) and "description" not in sub:
                    out.append(f"{path}/{name}")
                _walk(sub, f"{path}/{name}", out)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                _walk(node[key], f"{path}/{key}", out)


def test_every_field_is_described() -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    missing: list[str] = []
    _walk(schema, "", missing)
    assert missing == []
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
