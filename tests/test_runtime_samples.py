"""runtime_memory.py on real texts: every published sample and H200 capture against hand-keyed values.

The expected figures in tests/data/runtime-samples/answers.yaml were read off each text by eye,
in the unit the text prints; this test converts them and compares with the helper's --json
output (in process), within the rounding the source applied. A reader that confused MB with
10^6 bytes, read "max cached" as allocated, lost a rank glued onto another's line or took a MIG
instance for a whole GPU fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from helper_cli import invoke

DATA = Path(__file__).resolve().parent / "data" / "runtime-samples"
ANSWERS: dict[str, dict[str, Any]] = yaml.safe_load((DATA / "answers.yaml").read_text())

UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "GB": 10**9}


def size(text: Any) -> float:
    """'12606.06201171875 MiB' -> bytes (as the sample's unit defines them)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(B|KiB|MiB|GiB|GB)\s*", str(text))
    assert m, f"answers.yaml: {text!r} is not a size with a unit"
    return float(m.group(1)) * UNITS[m.group(2)]


def run(name: str, *extra: str) -> tuple[int, str, str]:
    result = invoke("runtime_memory", str(DATA / name), *extra)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_sample_reads_as_keyed(name: str) -> None:
    answer = ANSWERS[name]
    extra = ("--gpu", answer["gpu"]) if "gpu" in answer else ()
    code, out, err = run(name, "--json", *extra)
    if "error" in answer:
        assert code == 2 and answer["error"] in err and out == ""
        return
    assert code == 0, err
    doc = json.loads(out)
    assert set(answer["formats"]) <= set(doc["formats"]), doc["formats"]
    tolerance = size(answer.get("tolerance", "1 B"))
    ranks = {r["rank"]: r for r in doc["ranks"]}
    for rank, expected in (answer.get("ranks") or {}).items():
        assert rank in ranks, f"rank {rank} missing; read {sorted(ranks)}"
        got = ranks[rank]
        for key, value in expected.items():
            if key == "alloc_retries":
                assert got["alloc_retries"] == value
                continue
            field = f"{key}_bytes"
            assert got[field] is not None, f"{field} not read"
            assert abs(got[field] - size(value)) <= tolerance, (field, got[field], size(value))
    gpus = {g["gpu"]: g for g in doc["gpus"]}
    if "gpu_count" in answer:
        assert len(gpus) == answer["gpu_count"], "a GPU row the text cuts off must not be invented"
    for index, expected in (answer.get("gpus") or {}).items():
        got = gpus[index]
        assert got["used_bytes"] == size(expected["used"])
        assert got["total_bytes"] == size(expected["total"])
        if "name" in expected:
            assert got["name"] == expected["name"]
        if "processes" in expected:
            assert got["processes_bytes"] == size(expected["processes"])
    if "snapshot" in answer:
        snap = doc["snapshots"][0]
        for key, value in answer["snapshot"].items():
            if key in ("segments", "rank"):
                assert snap[key] == value
            else:
                assert snap[f"{key}_bytes"] == size(value)
    kinds = {v["kind"] for v in doc["verdicts"]}
    assert set(answer.get("verdicts", [])) <= kinds, kinds
    assert not set(answer.get("absent", [])) & kinds, kinds
    if "leak_ranks" in answer:
        assert sorted(v["rank"] for v in doc["verdicts"] if v["kind"] == "leak") == answer["leak_ranks"]


def test_every_sample_file_is_keyed_and_sourced() -> None:
    files = {
        str(p.relative_to(DATA))
        for p in DATA.rglob("*")
        if p.is_file() and p.name not in ("SOURCE.md", "answers.yaml") and p.parent.name != "config"
    }
    assert files == set(ANSWERS), sorted(files ^ set(ANSWERS))
    source = (DATA / "SOURCE.md").read_text()
    for name in files:
        assert f"`{Path(name).name}`" in source or Path(name).name in source, f"{name} has no SOURCE.md row"
    public = [f for f in files if f.startswith("public/")]
    for name in public:
        row = next(line for line in source.splitlines() if Path(name).name in line)
        assert "https://github.com/" in row, f"{name}: no source URL"
    assert len(public) >= 20  # published texts, each with its URL; the H200 captures come on top


def test_outside_pytorch_from_summary_and_nvidia_smi_of_the_same_moment() -> None:
    # c07: nvidia-smi 61335 MiB used while PyTorch held 58470 MiB (memory_summary, current):
    # 2865 MiB were outside PyTorch (CUDA context, cuBLAS workspace).
    code, out, err = run(
        "h200-mcore/memory_summary_c07_h8192_l4_tied_distopt.txt",
        str(DATA / "h200-mcore" / "nvidia_smi_c07_h8192_l4_tied_distopt.txt"),
        "--json",
    )
    assert code == 0, err
    rank = json.loads(out)["ranks"][0]
    assert rank["outside_pytorch_bytes"] == (61335 - 58470) * 2**20
    assert rank["limit_bytes"] == 143771 * 2**20  # from nvidia-smi's total without --gpu


def test_shared_gpu_is_not_charged_to_one_rank() -> None:
    # Four ranks on one H200: nvidia-smi's 23758 MiB belong to four processes, not to rank 0.
    code, out, err = run("h200-runtime/torchrun_leak.log", str(DATA / "h200-runtime" / "nvidia_smi_leak.txt"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert all(r["outside_pytorch_bytes"] is None for r in doc["ranks"])
    assert any("4 processes" in n for n in doc["notes"])


def test_leaking_rank_and_its_snapshot_together() -> None:
    code, out, err = run(
        "h200-runtime/torchrun_leak.log",
        str(DATA / "h200-runtime" / "snapshot_leak_rank3.pickle"),
        "--gpu",
        "H200",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    leak = [v for v in doc["verdicts"] if v["kind"] == "leak"]
    assert [v["rank"] for v in leak] == [3]
    # rank 3 keeps 48 MiB per iteration from iteration 6 on: the growth rate says so
    assert 40 * 2**20 <= leak[0]["growth_bytes_per_iteration"] <= 50 * 2**20
    frames = [g["frame"] for g in doc["snapshots"][0]["top_allocations"]]
    assert any("capture_runtime.py" in f for f in frames)


def test_regression_between_two_real_runs_is_visible_in_the_peaks() -> None:
    peaks = {}
    for name in ("h200-runtime/torchrun_base.log", "h200-runtime/torchrun_longer.log"):
        code, out, err = run(name, "--json")
        assert code == 0, err
        peaks[name] = json.loads(out)["ranks"][0]["peak_allocated_bytes"]
    assert peaks["h200-runtime/torchrun_longer.log"] > 1.5 * peaks["h200-runtime/torchrun_base.log"]


def test_trace_text_states_ranks_leak_and_exit_status() -> None:
    """The measured comparison opens with its conclusions: how many ranks regressed, a leak apart
    from a larger steady working set, and the exit status a CI gate reads; a change under 1 GiB is
    also given in MiB."""
    runs = DATA / "h200-runtime"
    longer = invoke("trace_regression", str(runs / "torchrun_base.log"), str(runs / "torchrun_longer.log"))
    assert longer.returncode == 1
    assert "verdict: regressed on every rank (4 of 4); B is stable over its iterations" in longer.stdout
    assert "exit status 1 (a regression past the threshold)" in longer.stdout
    leak = invoke("trace_regression", str(runs / "torchrun_base.log"), str(runs / "torchrun_leak.log"))
    assert "verdict: regressed on rank 3 only (1 of 4 ranks); B leaks on rank 3" in leak.stdout
    same = invoke("trace_regression", str(runs / "torchrun_base.log"), str(runs / "torchrun_base.log"))
    assert same.returncode == 0 and "exit status 0 (no regression)" in same.stdout
    assert "+0.00 GiB" in same.stdout and "MiB" not in same.stdout.splitlines()[0]


def test_a_snapshot_and_its_summary_are_one_rank_in_the_verdicts() -> None:
    """A snapshot gives rank 0 two readings (its segments and its summary); the verdict names the
    rank once, not "rank(s) 0, 0"."""
    out = invoke("runtime_memory", str(DATA / "h200-mcore" / "snapshot_c01_h1024_l4_gpt2.pickle")).stdout
    assert "FRAGMENTATION: rank 0: PyTorch reserved 5.64 GiB" in out
    assert "rank(s) 0, 0" not in out
