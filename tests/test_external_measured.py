"""The "external measured" group of benchmarks/estimator_accuracy.py: public runs outside the
project's own data sets (tests/data/estimator/external-measured.json).

These tests check that every point is sound as data (a source, the exact figure as printed,
a metric, the settings assumed) and that the estimator covers it. They assert no accuracy
bar: the group is reported, not tuned to.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from memtune.estimate.estimator import estimate
from memtune.spec.run_spec import violations

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import estimator_accuracy  # noqa: E402

DATA = ROOT / "tests" / "data" / "estimator" / "external-measured.json"
CASES = json.loads(DATA.read_text())
MIB, GIB = 2**20, 2**30


def _figure_from_text(case: dict) -> float:
    """The measured bytes re-read from the line as it was printed: Megatron's report_memory
    'max allocated' (MiB), a Megatron Bridge study table's 'Peak allocated (GB)' column (the
    header, then the row after '...:'; Bridge divides by 1e9) or a Bridge study's sentence
    ('64.653 GB after iteration 2', '62.166 GiB.'), an 'N * X GiB' per-GPU note, or an
    nvidia-smi table row (MiB)."""
    text = case["measured_text"]
    if case["metric"] == "max_allocated" and text.startswith("Selective modules | Peak allocated (GB) |"):
        return float(text.split("...:", 1)[1].split("|")[2]) * 1e9
    prose = re.search(r"([0-9]+\.[0-9]+) (GiB|GB)(?: after iteration \d| peak max allocated memory|\.$)", text)
    if case["metric"] == "max_allocated" and prose:  # a Bridge study's sentence or table cell
        return float(prose.group(1)) * (GIB if prose.group(2) == "GiB" else 1e9)
    if case["metric"] == "max_allocated":
        return float(re.search(r"max allocated: ([0-9.]+)", text).group(1)) * MIB
    table = re.search(r"\|\s+(\d+)MiB / \d+MiB \|", text)  # an nvidia-smi table row: used / total
    if table:
        return float(table.group(1)) * MIB
    return float(re.search(r"\d+ \* ([0-9.]+) ?Gi?B", text).group(1)) * GIB


def test_every_point_names_its_source_metric_and_assumptions() -> None:
    assert len(CASES) >= 5
    names = [c["case"] for c in CASES]
    assert len(set(names)) == len(names)
    for case in CASES:
        assert re.search(r"@[0-9a-f]{40} ", case["source"]), case["case"]
        assert case["url"].startswith("https://github.com/"), case["case"]
        assert case["metric"] in ("max_allocated", "nvidia_smi"), case["case"]
        assert case["assumptions"], case["case"]
        assert case["group"] == "external measured"
        assert case["measured_bytes"] == pytest.approx(_figure_from_text(case), abs=1), case["case"]


def test_source_md_lists_every_external_source() -> None:
    source_md = (ROOT / "tests" / "data" / "estimator" / "SOURCE.md").read_text()
    assert "external-measured.json" in source_md
    for case in CASES:
        repo_commit = case["source"].split(" ", 1)[0]
        assert repo_commit in source_md, repo_commit


def test_every_point_is_a_legal_run_and_estimable() -> None:
    rows = list(estimator_accuracy.external_cases())
    assert [r[0] for r in rows] == [c["case"] for c in CASES]
    for name, group, model, run, measured, compare in rows:
        assert group == "external measured"
        assert not isinstance(model, Exception), (name, model)
        assert violations(model, run) == [], name
        est = estimate(model, run)
        ours = estimator_accuracy.compared_bytes(est, compare)
        assert ours > 0 and measured > 0, name


def test_nvidia_smi_points_are_compared_with_the_overhead_line_included() -> None:
    """nvidia-smi sees the CUDA context and NCCL buffers; max allocated does not."""
    for name, _, model, run, _, compare in estimator_accuracy.external_cases():
        case = next(c for c in CASES if c["case"] == name)
        est = estimate(model, run)
        if case["metric"] == "nvidia_smi":
            assert compare == "peak-total"
            assert estimator_accuracy.compared_bytes(est, compare) == est.peak_bytes > est.peak_allocated_bytes
        else:
            assert estimator_accuracy.compared_bytes(est, compare) == est.peak_allocated_bytes


def test_bridge_llama_point_matches_the_logged_run() -> None:
    """The Bridge log prints the parameters per rank (1235814400) and 64 micro-batches of a
    global batch of 512 on 8 data-parallel ranks: the rebuilt run must agree with both."""
    name = "bridge-llama3.2-1b-pretrain-dp8-s1024"
    _, _, model, run, _, _ = next(r for r in estimator_accuracy.external_cases() if r[0] == name)
    assert estimate(model, run).parameters_per_gpu_max == 1235814400
    assert run.num_microbatches == 64 and run.dp == 8
