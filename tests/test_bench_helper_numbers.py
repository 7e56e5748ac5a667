"""Helper-number tasks: the ground truth is the helper's number for the user's own input.

Three guarantees, each a test:
- the recorded ground truth is what the helper prints today (re-run on the fixture);
- reasonable ways of writing that number pass (GiB/GB/MiB, rounding);
- copying SKILL.md, whole or section by section, fails every such check.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from helper_cli import invoke
from memtune.bench.dataset import load_dataset
from memtune.bench.grading import grade_answer
from memtune.bench.numbers import extract_sizes, size_matches
from memtune.bench.skill import split_frontmatter
from memtune.bench.tools import HELPERS

REPO = Path(__file__).resolve().parent.parent
DATASET = load_dataset(REPO / "evals" / "evals.json")
SOURCED = [(case, spec) for case in DATASET.cases for spec in case.checks.get("numbers", ()) if "source" in spec]
HELPER_CASES = sorted({case.id for case, _ in SOURCED})


def field_value(doc: Any, path: str) -> float:
    total = 0.0
    for one in path.split(" + "):
        value = doc
        for name, index in re.findall(r"([A-Za-z_]+)(?:\[(\d+)\])?", one):
            value = value[name]
            if index:
                value = value[int(index)]
        total += float(value)
    return total


def skill_md_answers() -> list[tuple[str, str]]:
    """SKILL.md whole, its body, and every ## / ### section on its own."""
    text = (REPO / "SKILL.md").read_text(encoding="utf-8")
    _, body = split_frontmatter(text)
    pieces = [("SKILL.md", text), ("body", body)]
    for level in ("## ", "### "):
        chunks = re.split(rf"(?m)^(?={re.escape(level)})", body)
        pieces += [(chunk.splitlines()[0][:60], chunk) for chunk in chunks if chunk.startswith(level)]
    return pieces


def test_the_helper_number_tasks_are_the_ones_that_need_a_helper() -> None:
    assert len(HELPER_CASES) >= 20
    for case, spec in SOURCED:
        assert "bytes" in spec, f"{case.id}: a helper number is a size checked with its unit"
        assert shlex.split(spec["source"]["command"])[1].split("/")[-1][:-3] in HELPERS
        assert spec.get("key", True), f"{case.id}: a helper number is the point of the task (key)"


@pytest.mark.parametrize("case, spec", SOURCED, ids=[f"{c.id}:{s['label']}" for c, s in SOURCED])
def test_ground_truth_is_what_the_helper_prints_for_the_fixture(case, spec, monkeypatch) -> None:
    source = spec["source"]
    argv = shlex.split(source["command"])
    assert argv[0] == "python3" and argv[1].startswith("scripts/") and argv[1].endswith(".py")
    stdin = case.question if source.get("stdin") == "question" else ""
    monkeypatch.chdir(REPO / "evals" / "files")  # the command names the fixture files relative to it
    proc = invoke(argv[1].removeprefix("scripts/").removesuffix(".py"), *argv[2:], stdin=stdin)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    assert field_value(doc, source["field"]) == pytest.approx(spec["bytes"], rel=1e-9)
    # an equally right figure the helper also prints (e.g. max allocated beside the device view)
    alternatives = source.get("alternative_fields", [])
    assert len(alternatives) == len(spec.get("alternatives_bytes", []))
    for path, expected in zip(alternatives, spec.get("alternatives_bytes", []), strict=True):
        assert field_value(doc, path) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "written, bytes_, ok",
    [
        ("172 MiB", 180355072, True),
        ("172.00 MiB", 180355072, True),
        ("0.17 GiB", 180355072, True),
        ("180 MB", 180355072, True),
        ("180,355,072 bytes", 180355072, True),
        ("2.84 GiB", 3049426780, True),
        ("2.84 GB", 3049426780, True),  # GiB written as GB: read both ways
        ("3.05 GB", 3049426780, True),
        ("2.8GiB", 3049426780, True),
        ("3 GiB", 3049426780, False),  # one significant digit: too coarse to be the helper's number
        ("3.0 GiB", 3049426780, True),  # read as GB: 3.0e9 is within 2% of 3.05e9
        ("2.9 GiB", 3049426780, False),  # not a rounding of 2.84 GiB (nor of 3.05 GB)
        ("2.84", 3049426780, False),  # no unit, no credit
        ("37631.79 GiB", 40406826834985, True),
        ("37,632 GiB", 40406826834985, True),
        ("40.4 TB", 40406826834985, True),
        ("79.21 GiB", 85051089879, True),
        ("79 GiB", 85051089879, True),
        ("80 GB", 85051089879, False),  # the nominal H100 size, not what the GPU reported
        ("0.05 GiB", 53687091, True),
        ("51.2 MiB", 53687091, True),
        ("about 50 MB", 53687091, True),
        ("60.2 GB", 53687091, False),
        ("147.4 GB", 147433236480, True),
        ("~147 GB", 147433236480, True),
        ("137.3 GiB", 147433236480, True),
        ("159.13 GiB", 147433236480, False),  # the whole stage with activations, not the model state
    ],
)
def test_sizes_in_reasonable_formats(written: str, bytes_: int, ok: bool) -> None:
    spec = {
        label: value
        for label, value in (
            ("bytes", bytes_),
            ("rel_tolerance", {53687091: 0.25, 85051089879: 0.005}.get(bytes_, 0.02)),
            ("min_digits", 1 if bytes_ == 53687091 else 2),
        )
    }
    assert (size_matches(spec, f"The answer: {written}.") is not None) is ok


def test_extract_sizes_needs_a_unit_and_reads_separators() -> None:
    assert [w for w, _, _ in extract_sizes("TP4 on 8 GPUs, 1,024 MiB and 3.5GB, 12 bytes")] == [
        "1,024 MiB",
        "3.5GB",
        "12 bytes",
    ]


@pytest.mark.parametrize("case_id", HELPER_CASES)
def test_copying_skill_md_fails_every_helper_number_task(case_id: str) -> None:
    case = DATASET.by_id()[case_id]
    labels = {s["label"] for s in case.checks["numbers"] if "source" in s}
    for name, answer in skill_md_answers():
        grade = grade_answer(case.checks, answer, [])
        passed = [c.label for c in grade.checks if c.kind == "number" and c.label in labels and c.passed]
        assert not passed, f"{case_id}: SKILL.md section {name!r} passes helper-number check(s) {passed}"
        assert not grade.solved


def test_the_ground_truth_answer_passes_its_own_helper_numbers() -> None:
    """The checks are passable: each task's written ground truth satisfies them."""
    for case, spec in SOURCED:
        assert size_matches(spec, case.ground_truth), f"{case.id}: ground_truth does not state {spec['label']}"


def test_either_view_of_a_peak_passes_and_a_figure_between_them_does_not() -> None:
    """The estimator prints the device view and max allocated; an answer may quote either,
    but not a number that is neither (tolerance is per target, not the span between them)."""
    spec = {"label": "peak", "bytes": 113272464279, "alternatives_bytes": [103340275712], "rel_tolerance": 0.01}
    assert size_matches(spec, "about 105.49 GiB as nvidia-smi would show")
    assert size_matches(spec, "max allocated 96.24 GiB")
    assert size_matches(spec, "roughly 103.3 GB allocated")
    assert size_matches(spec, "about 100.5 GiB") is None
    assert size_matches({k: v for k, v in spec.items() if k != "alternatives_bytes"}, "max allocated 96.24 GiB") is None
