"""The Tier-3 dataset (evals/evals.json, evals/claims.yaml) and the harness's own data files.

The dataset is read as bytes once so that its sha256 digest — recorded in every run and
printed in BENCHMARK.md — is the digest of exactly what the cases were built from.

Claims a task names by id (``checks.claims`` / ``checks.wrong``) are looked up in
claims.yaml beside evals.json and replaced by their wordings here, so the grader gets
plain dictionaries and never reads a file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.bench.inventions import alloc_conf_values, env_names_in, options_in
from memtune.errors import InputError


@dataclass(frozen=True)
class Case:
    """One evaluation task. ``raw`` keeps the JSON object for fields the harness ignores."""

    id: str
    question: str
    expected_skill: str | None
    expected_script: str | None
    ground_truth: str
    expected_behavior: tuple[str, ...]
    files: tuple[str, ...]
    should_trigger: bool
    checks: Mapping[str, Any]
    category: str = ""
    files_sha256: str = ""  # digest of the fixture files' bytes, in order
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def question_sha256(self) -> str:
        """Digest of what the agent was asked (question + fixture names): results graded
        against a changed question would be graded against the wrong task."""
        text = self.question + "\0" + "\0".join(self.files)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Dataset:
    path: Path
    sha256: str
    cases: tuple[Case, ...]

    @property
    def tasks_sha256(self) -> str:
        """Digest of what the agent sees of every task, in order: id, question, fixture names and
        bytes, and which skill should answer. The checks are left out on purpose: a run is graded
        again with the current checks when it is reported (``regrade`` and the report's re-grading),
        so improving the grader must not orphan a long, resumable run; changing a task must."""
        digest = hashlib.sha256()
        for c in self.cases:
            for part in (c.id, c.question, c.files_sha256, "\0".join(c.files), str(c.should_trigger)):
                digest.update(part.encode("utf-8") + b"\0")
        return digest.hexdigest()

    @property
    def positives(self) -> int:
        return sum(1 for c in self.cases if c.should_trigger)

    @property
    def negatives(self) -> int:
        return len(self.cases) - self.positives

    def by_id(self) -> dict[str, Case]:
        return {c.id: c for c in self.cases}


def is_helper_number_task(case: Case) -> bool:
    """The answer needs a number a helper computes from the user's own input.

    Either a ``numbers`` entry names its ``source`` (the helper command the tests re-run),
    or the task's helper lands with another branch (``oracle.helper_from``) and the task
    checks a size that helper prints: its source is re-checked once the helper is here."""
    numbers = case.checks.get("numbers", ())
    if any("source" in n for n in numbers):
        return True
    oracle = case.raw.get("oracle") or {}
    return bool(oracle.get("helper_from")) and any("bytes" in n for n in numbers)


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}:{exc.colno}: {what} is not valid JSON ({exc.msg})") from None


def validate(document: Any, schema_path: Path, label: str) -> None:
    """Validate against the JSON Schema; the first error becomes a one-line InputError."""
    import jsonschema  # third-party: imported only when a dataset is actually loaded

    schema = read_json(schema_path, "JSON Schema")
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise InputError(f"{label}: {where}: {err.message} (schema {schema_path.name}; {len(errors)} error(s))")


CLAIMS_FILE = "claims.yaml"


def load_claims(path: Path) -> dict[str, dict[str, Any]]:
    """The shared claim library: id -> {says, patterns, negative_patterns}; every pattern compiles."""
    import re

    import yaml  # third-party: only when a dataset is loaded

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a mapping of claim id -> {{says, patterns}}")
    library: dict[str, dict[str, Any]] = {}
    for claim_id, body in doc.items():
        if not isinstance(body, dict) or not isinstance(body.get("patterns"), list) or not body["patterns"]:
            raise InputError(f"{path}: claim {claim_id!r} needs a non-empty list of patterns")
        for key in ("negative_patterns", "unless", "only_if"):
            if not isinstance(body.get(key, []), list):
                raise InputError(f"{path}: claim {claim_id!r}: {key} must be a list of patterns")
        for pattern in [
            *body["patterns"],
            *body.get("negative_patterns", []),
            *body.get("unless", []),
            *body.get("only_if", []),
        ]:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InputError(f"{path}: claim {claim_id!r}: pattern {pattern!r} does not compile ({exc})") from None
        if body.get("scope", "clause") not in ("clause", "sentence"):
            raise InputError(f"{path}: claim {claim_id!r}: scope must be 'clause' or 'sentence', not {body['scope']!r}")
        library[str(claim_id)] = {
            "says": str(body.get("says", "")),
            "patterns": [str(p) for p in body["patterns"]],
            "negative_patterns": [str(p) for p in body.get("negative_patterns", [])],
            "everywhere": bool(body.get("everywhere", False)),
            "scope": str(body.get("scope", "clause")),
            "unless": [str(p) for p in body.get("unless", [])],
            "only_if": [str(p) for p in body.get("only_if", [])],
        }
    return library


def with_myths(checks: dict[str, Any], library: Mapping[str, Mapping[str, Any]], where: str) -> dict[str, Any]:
    """``checks`` with every ``everywhere`` claim of the library added to its wrong claims.

    Why: a myth (nsys counts training steps; the distributed optimizer offloads to the CPU) is
    false in any task, and an answer to any task can slip one in beside the right verdict. Listed
    once in claims.yaml, it guards all tasks instead of only those someone thought to tag."""
    wrong = list(checks.get("wrong", ()))
    labels = {claim["label"] for claim in wrong}
    for name, body in library.items():
        if body.get("everywhere") and name not in labels:
            wrong.append(resolve_claim(name, library, where))
    return {**checks, "wrong": wrong}


def resolve_claim(item: Any, library: Mapping[str, Mapping[str, Any]], where: str) -> dict[str, Any]:
    """A claim as the grader reads it: {label, patterns, negative_patterns, key}, and for a
    library claim its ``scope`` and ``hedge`` (False for myths: a hedge does not spare them).

    ``item`` is a library id, ``{"claim": id, "key": bool}``, or an inline
    ``{"label", "patterns", ...}``."""
    if isinstance(item, str):
        item = {"claim": item}
    if "claim" in item:
        name = item["claim"]
        if name not in library:
            raise InputError(f"{where}: unknown claim {name!r} (define it in evals/{CLAIMS_FILE})")
        base = library[name]
        return {
            "label": str(item.get("label", name)),
            "patterns": list(base["patterns"]) + list(item.get("patterns", [])),
            "negative_patterns": list(base["negative_patterns"]) + list(item.get("negative_patterns", [])),
            "key": bool(item.get("key", False)),
            "scope": str(base.get("scope", "clause")),
            "unless": list(base.get("unless", [])),
            "only_if": list(base.get("only_if", [])),
            # a myth is false as a conditional step too ("if the peak is tight, drop the
            # distributed optimizer"): a hedge does not spare it (grading._find says what does)
            "hedge": not base.get("everywhere", False),
        }
    return {
        "label": str(item["label"]),
        "patterns": list(item.get("patterns", [])),
        "negative_patterns": list(item.get("negative_patterns", [])),
        "key": bool(item.get("key", False)),
        "scope": str(item.get("scope", "clause")),
        "unless": list(item.get("unless", [])),
        "only_if": list(item.get("only_if", [])),
    }


def resolve_checks(checks: Mapping[str, Any], library: Mapping[str, Mapping[str, Any]], where: str) -> dict[str, Any]:
    out = dict(checks)
    for field_name in ("claims", "wrong"):
        if field_name in checks:
            out[field_name] = [resolve_claim(item, library, where) for item in checks[field_name]]
    return out


def load_dataset(path: Path, schema_path: Path | None = None) -> Dataset:
    """Load and validate evals.json; ids must be unique and fixture files must exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: dataset not found (pass --evals PATH)") from None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if schema_path is not None:
        validate(document, schema_path, str(path))
    if not isinstance(document, list):
        raise InputError(f"{path}: expected a JSON list of cases (NVSkills-Eval list format)")
    cases = []
    seen: set[str] = set()
    files_dir = path.parent / "files"
    library = load_claims(path.parent / CLAIMS_FILE)
    for obj in document:
        if obj["id"] in seen:
            raise InputError(f"{path}: duplicate case id {obj['id']!r}; ids must be unique")
        seen.add(obj["id"])
        digest = hashlib.sha256()
        given = obj["question"]  # what the user wrote: an answer may quote its allocator strings
        for name in obj.get("files", ()):
            if not (files_dir / name).is_file():
                raise InputError(
                    f"{path}: case {obj['id']!r} names file {name!r} but {files_dir / name} does not exist"
                )
            raw_file = (files_dir / name).read_bytes()
            digest.update(name.encode() + b"\0" + raw_file + b"\0")
            given += "\n" + raw_file.decode("utf-8", errors="replace")
        where = f"{path}: case {obj['id']!r}"
        checks = with_myths(resolve_checks(obj.get("checks", {}), library, where), library, where)
        checks["alloc_conf_given"] = alloc_conf_values(given)
        checks["options_given"] = options_in(given)
        checks["env_given"] = env_names_in(given)
        case = Case(
            id=obj["id"],
            question=obj["question"],
            expected_skill=obj.get("expected_skill"),
            expected_script=obj.get("expected_script"),
            ground_truth=obj.get("ground_truth", ""),
            expected_behavior=tuple(obj.get("expected_behavior", ())),
            files=tuple(obj.get("files", ())),
            should_trigger=bool(obj.get("should_trigger", obj.get("expected_skill") is not None)),
            checks=checks,
            category=obj.get("category", ""),
            raw=obj,
        )
        cases.append(dataclasses.replace(case, files_sha256=digest.hexdigest()))
    return Dataset(path=path, sha256=hashlib.sha256(data).hexdigest(), cases=tuple(cases))


def fixture_path(dataset: Dataset, name: str) -> Path:
    return dataset.path.parent / "files" / name
