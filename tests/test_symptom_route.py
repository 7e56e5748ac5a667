"""--symptom questions about a change between two runs go to the regression workflow (issue 26).

"Memory went up after I changed X" names no single failure, so ranking Failure Diagnosis
rows by shared words answered it with an unrelated row.  Each wording below is a way people
ask it; the look-alikes are single-run symptoms (a leak within one run, one failure) that must
keep their table rows.
"""

from __future__ import annotations

import json

import pytest

from helper_cli import invoke
from memtune.diagnose.symptom_route import load_routes, route_for

REGRESSION = [
    "memory went up after I changed the sequence length",
    "used to fit, now OOM after upgrading",
    "Used to train fine on 8 GPUs, now out of memory",
    "it worked before the container update, now CUDA OOM",
    "peak memory is higher than before with the new Megatron release",
    "OOM since we bumped megatron-core to 0.14",
    "memory regression between two runs",
    "after switching to the distributed optimizer the peak jumped",
    "we use 10 GiB more memory than the previous version",
    "old config vs new config: the new one OOMs",
]
SINGLE_RUN = [
    "OOM on one rank only",
    "memory grows after each iteration until OOM",
    "allocated memory increased after 300 iterations",
    "expandable segments already set but still OOM",
    "NCCL_GRAPH_REGISTER assertion with cuda graphs",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "killed by the OOM killer while loading the checkpoint",
]


def run(*args: str):
    return invoke("diagnose", *args)


@pytest.mark.parametrize("query", REGRESSION)
def test_a_change_between_two_runs_is_the_regression_workflow(query: str) -> None:
    res = run("--symptom", query, "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["workflow"]["name"] == "memory-regression"
    assert doc["workflow"]["because"].lower() in query.lower()
    steps = " ".join(doc["workflow"]["steps"])
    assert "trace_regression.py A B" in steps and "runtime_memory.py" in steps
    text = run("--symptom", query).stdout
    # the workflow comes before any table row
    assert "[1]" not in text or text.index("trace_regression.py") < text.index("[1]")


@pytest.mark.parametrize("query", SINGLE_RUN)
def test_single_run_symptoms_keep_their_rows(query: str) -> None:
    doc = json.loads(run("--symptom", query, "--json").stdout)
    assert doc["workflow"] is None
    assert doc["matches"]
    assert "trace_regression.py" not in run("--symptom", query).stdout


def test_every_route_regex_is_bounded() -> None:
    # a long query without a match is answered at once (bounded repetition, a cut at 2000 chars)
    query = "higher " * 5000
    assert route_for(query) is None
    assert all(rx.pattern.count("*") == 0 for r in load_routes() for rx in r.regexes)
