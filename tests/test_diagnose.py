"""diagnose.py end to end: inputs (files, -, .gz), JSON contract, order, summary, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from helper_cli import Result, invoke

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"
KEYS = {"requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes"}

FRAG = (
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}.00 MiB. GPU {r} has a total capacity of "
    "79.10 GiB of which 10.00 MiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and {idle}.00 MiB is "
    "reserved by PyTorch but unallocated.\n"
)


def run(*args: str, stdin: bytes | None = None) -> Result:
    return invoke("diagnose", *args, stdin=stdin)


def run_json(*args: str, stdin: bytes | None = None) -> dict:
    res = run(*args, "--json", stdin=stdin)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # exactly one document, or this raises


def multi_rank_log(tmp_path: Path) -> Path:
    lines = ["[rank0]: iteration 5 | loss 2.0\n"]
    lines.append(FRAG.format(r=0, req=100, idle=900))  # fragmentation, shortfall < 0
    lines.append(FRAG.format(r=1, req=800, idle=100))  # capacity, shortfall 700 MiB
    lines.append(FRAG.format(r=2, req=500, idle=100))  # capacity, shortfall 400 MiB
    lines.append(
        "[W AllocatorConfig.cpp:28] Warning: PYTORCH_CUDA_ALLOC_CONF is deprecated, use PYTORCH_ALLOC_CONF instead\n"
    )
    lines.append("3: [rank3]: ValueError: Currently there is no support for Pipeline parallelism with CPU offloading\n")
    p = tmp_path / "train.log"
    p.write_text("".join(lines), encoding="utf-8")
    return p


def test_json_contract_order_and_summary(tmp_path: Path) -> None:
    doc = run_json(str(multi_rank_log(tmp_path)))
    kinds = [f["kind"] for f in doc["findings"]]
    # config error first, then allocator OOMs in log order, deprecation warning last
    assert kinds == ["cpu-offload-pp", "fragmentation", "capacity", "capacity", "alloc-conf-deprecated"]
    assert [f["rank"] for f in doc["findings"]] == [3, 0, 1, 2, None]
    for f in doc["findings"]:
        assert set(f["numbers"]) >= KEYS
        assert all(v is None or isinstance(v, int) for v in f["numbers"].values())
        assert f["cause"] and f["confirm"] and f["fix"] and f["evidence"] and f["next_step"]
        assert isinstance(f["line"], int)
    assert doc["findings"][2]["numbers"]["requested_bytes"] == 800 << 20
    s = doc["summary"]
    # rank 1 was shortest of memory (700 MiB short), though not the first to fail
    assert (s["tightest"]["source"], s["tightest"]["shortfall_bytes"]) == ("rank 1", 700 << 20)
    assert (s["ranks_failed"], s["ranks"], s["same_kind"], s["warnings"]) == (4, [0, 1, 2, 3], False, 1)
    assert s["worst"]["source"] == "rank 3"
    assert doc["message"] is None


def test_all_same_kind_summary(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_text("".join(FRAG.format(r=r, req=100, idle=900) for r in range(4)), encoding="utf-8")
    s = run_json(str(p))["summary"]
    assert (s["ranks_failed"], s["same_kind"], s["kinds"]) == (4, True, {"fragmentation": 4})


def test_table_row_is_quoted_from_skill_md(tmp_path: Path) -> None:
    doc = run_json(str(SAMPLES / "12_lmcache_issue3430_newest_docs_url_private_pools.txt"))
    (f,) = doc["findings"]
    skill = (REPO_ROOT / "SKILL.md").read_text(encoding="utf-8")
    assert f["kind"] == "fragmentation"
    for cell in (f["cause"], f["confirm"], f["fix"]):
        assert f"| {cell} |" in skill or f"| {cell}" in skill


def test_human_output_names_kind_location_and_next_step(tmp_path: Path) -> None:
    res = run(str(multi_rank_log(tmp_path)))
    out = res.stdout
    assert res.returncode == 0
    assert "[1] cpu-offload-pp - rank 3" in out
    assert "train.log:2" in out and "next:" in out and "reserved-but-unallocated" in out


def test_stdin_and_gzip_and_several_files(tmp_path: Path) -> None:
    text = (SAMPLES / "29_gpt4llm_issue16_a100_legacy_max_split.txt").read_bytes()
    gz = tmp_path / "r.log.gz"
    gz.write_bytes(gzip.compress(text))
    from_stdin = run_json("-", stdin=text)
    from_gz = run_json(str(gz))
    assert from_stdin["findings"][0]["numbers"] == from_gz["findings"][0]["numbers"]
    assert from_stdin["findings"][0]["file"] == "<stdin>"
    gz_stdin = run_json("-", stdin=gzip.compress(text))
    assert gz_stdin["findings"][0]["kind"] == "fragmentation"
    both = run_json(str(gz), str(SAMPLES / "15_megatron_bridge_issue2992_cpu_offload_pp_valueerror.txt"))
    assert [f["kind"] for f in both["findings"]] == ["cpu-offload-pp", "fragmentation"]
    assert len(both["inputs"]) == 2


def test_invalid_utf8_is_still_diagnosed(tmp_path: Path) -> None:
    p = tmp_path / "latin1.log"
    p.write_bytes(b"caf\xe9 \xff\xfe log\nRuntimeError: CUDA error: out of memory \xe9\n")
    doc = run_json(str(p))
    assert [(f["kind"], f["line"]) for f in doc["findings"]] == [("cuda-runtime-oom", 2)]


def test_a_lone_empty_input_is_refused_with_how_to_pass_text(tmp_path: Path) -> None:
    """Nothing to read is a mistake, not a clean log: an agent that ran ``diagnose.py -`` without
    pasting the error was told "no memory-related failure found" and concluded there was none."""
    p = tmp_path / "empty.log"
    p.write_bytes(b"")
    res = run(str(p))
    assert res.returncode == 2 and res.stdout == ""
    assert "empty.log: the file is empty" in res.stderr and "<<'EOF'" in res.stderr
    for blank in (b"", b"\n  \n\t\n"):
        res = run("-", stdin=blank)
        assert res.returncode == 2 and "standard input is empty" in res.stderr


def test_an_empty_file_among_several_logs_is_read_as_clean(tmp_path: Path) -> None:
    """A rank that printed nothing is normal in a folder of per-rank logs."""
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "rank0.log").write_text("step 1 done\n")
    doc = run_json(str(tmp_path / "rank0.log"), str(tmp_path / "empty.log"))
    assert doc["findings"] == [] and doc["message"] == "no memory-related failure found"


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda d: d / "nope.log", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "x.bin").write_bytes(b"\x00\x01\x02ELF" * 50) and d / "x.bin", "binary"),
        (lambda d: (d / "x.gz").write_bytes(gzip.compress(b"hello\n" * 1000)[:30]) and d / "x.gz", "decompress"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, make, needle: str) -> None:
    target = make(tmp_path)
    res = run(str(target))
    err = res.stderr
    assert res.returncode == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert res.stdout == ""


@pytest.mark.parametrize(
    "args",
    [(), ("--symptom", "x", "a.log"), ("--symptom", "  "), ("-", "-"), ("--symptom", "oom", "--limit", "0")],
)
def test_usage_errors_exit_2(args) -> None:
    res = run(*args)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1


def test_symptom_lookup_text_and_json() -> None:
    res = run("--symptom", "OOM on one rank only")
    assert res.returncode == 0
    assert "[1] score" in res.stdout
    doc = run_json("--symptom", "CUBLAS_STATUS_ALLOC_FAILED")
    assert "CUBLAS_STATUS_ALLOC_FAILED" in doc["matches"][0]["symptom"]
    assert all({"score", "symptom", "cause", "confirm", "fix"} <= set(m) for m in doc["matches"])


def test_samples_through_the_cli_match_the_library() -> None:
    """The whole file, metadata line included, gives the library's findings plus only
    what the `# source:` line itself quotes (it names the error it is about)."""
    doc = run_json(str(SAMPLES / "38_nccl_issue1235_alloc_h_calloc_oom_multinode.txt"))
    (f,) = doc["findings"]
    assert (f["kind"], f["line"], f["line_end"], f["device"], f["numbers"]["requested_bytes"]) == (
        "nccl-oom",
        2,
        4,
        3,
        6291456,
    )
    assert f["source"] == "ng30903:3063028"


def test_next_step_uses_the_layout_and_gpu_size_the_log_printed(tmp_path: Path) -> None:
    p = tmp_path / "megatron.log"
    p.write_text(
        "using world size: 32, data-parallel size: 2, context-parallel size: 1, hierarchical context-parallel sizes: None, "
        "tensor-model-parallel size: 4, pipeline-model-parallel size: 4\n"
        "[rank9]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 1 has a total capacity of "
        "79.11 GiB of which 1.00 GiB is free. Of the allocated memory 77.00 GiB is allocated by PyTorch, and 100.00 MiB is "
        "reserved by PyTorch but unallocated.\n",
        encoding="utf-8",
    )
    doc = run_json(str(p))
    (f,) = doc["findings"]
    assert f["kind"] == "capacity"
    assert "--tp 4 --pp 4 --cp 1 --gpus 32 --gpu-memory 79.11GiB" in f["next_step"]
    assert doc["run"][str(p)] == {"gpus": 32, "dp": 2, "cp": 1, "tp": 4, "pp": 4}
    plain = run_json(str(SAMPLES / "03_transformers_issue3360_legacy.txt"))["findings"][0]["next_step"]
    assert "--tp TP --pp PP --gpus N --gpu-memory 14.73GiB" in plain


def test_torch_version_overrides_the_inferred_release() -> None:
    sample = str(SAMPLES / "12_lmcache_issue3430_newest_docs_url_private_pools.txt")  # 2.4+ wording
    (f,) = run_json(sample)["findings"]
    assert (f["torch"]["since"], f["torch"]["source"], f["torch"]["expandable_segments"]) == (
        "2.4",
        "message format",
        "accepted",
    )
    assert "expandable_segments:True" in f["advice"][0]
    (f,) = run_json(sample, "--torch-version", "2.0.1")["findings"]
    assert (f["torch"]["version"], f["torch"]["expandable_segments"]) == ("2.0.1", "rejected")
    assert not any("expandable_segments:True" in a for a in f["advice"])
    assert f["table_fix_applies"] is False and "--torch-version 2.0.1" in f["next_step"]


def test_bad_torch_version_is_one_line_exit_2() -> None:
    res = run(str(SAMPLES / "12_lmcache_issue3430_newest_docs_url_private_pools.txt"), "--torch-version", "newest")
    assert res.returncode == 2 and res.stdout == ""
    err = res.stderr
    assert err.count("\n") == 1 and "--torch-version" in err and "Traceback" not in err


def test_text_output_names_stack_release_and_confidence() -> None:
    res = run(str(SAMPLES / "61_verl_issue2828_fsdp_logprob_capacity.txt"))
    out = res.stdout
    assert res.returncode == 0
    assert "framework in" in out and "verl" in out and "outside Megatron" in out
    assert "do 1:" in out and "gpu_memory_utilization" in out
    assert "pytorch:  2.2 or newer (message format)" in out
    # capacity by the rule (idle 6.77 GiB < 13.91 GiB), but free 8.85 GiB + idle reach the request
    assert "confidence: medium" in out and "together exceed it" in out


def test_capacity_confidence_is_high_only_when_free_and_idle_memory_together_fall_short() -> None:
    """Expandable segments map memory in pages, so free memory plus the idle reserve can back
    one request that neither holds alone: capacity then stays the kind, at medium confidence."""
    head = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which {free} is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated.\n"
    for free, level in (("3.50 GiB", "medium"), ("1.00 GiB", "high")):
        (f,) = json.loads(run("-", "--json", stdin=head.format(free=free).encode()).stdout)["findings"]
        assert (f["kind"], f["confidence"]["level"]) == ("capacity", level), free


def test_unknown_gpu_memory_failure_is_reported_not_silent() -> None:
    res = run("-", "--json", stdin="CUDA显存不足\n".encode())
    doc = json.loads(res.stdout)
    assert [f["kind"] for f in doc["findings"]] == ["unrecognized-gpu-memory-error"]
    assert doc["message"] is None


def test_a_standard_input_that_cannot_be_read_is_one_line_exit_2(tmp_path: Path) -> None:
    """stdin opened for writing (a wrapper's mistake) is bad input, not a traceback."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "scripts" / "diagnose.py"
    with (tmp_path / "out").open("w") as write_only:
        proc = subprocess.run([sys.executable, str(script), "-"], stdin=write_only, capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "cannot read it" in proc.stderr


def test_a_reserved_total_cut_off_inside_its_figure_is_read_as_the_range_it_allows() -> None:
    """A 1.5-2.0 message cut after "27.8": only GiB puts that figure between the allocated
    memory and the card, so the idle reserve lies in a range; the kind is given only when
    the whole range falls on one side of the request."""
    from memtune.diagnose.parse import classify, parse_allocator_message

    head = "RuntimeError: CUDA out of memory. Tried to allocate {req} (GPU 0; 31.75 GiB total capacity; 23.68 GiB already allocated; 2.36 GiB free; {cut}"
    frag = parse_allocator_message(head.format(req="2.72 GiB", cut="27.8"))
    assert frag.truncated_reserved == "27.8" and frag.reserved_unallocated_bytes is not None
    assert frag.reserved_unallocated_max_bytes is not None
    assert 4.12 < frag.reserved_unallocated_bytes / 2**30 < frag.reserved_unallocated_max_bytes / 2**30 < 4.23
    assert classify(frag).kind == "fragmentation" and "cut off at '27.8'" in (classify(frag).note or "")
    # the whole range below the request: capacity, decided
    cap = classify(parse_allocator_message(head.format(req="6.00 GiB", cut="27.8")))
    assert cap.kind == "capacity" and "undecided" not in (cap.note or "")
    # a range on both sides of the request (27.8 could be 27.80 or 27.89): undecided
    both = classify(parse_allocator_message(head.format(req="4.15 GiB", cut="27.8")))
    assert both.kind == "capacity" and "undecided" in (both.note or "")
    # digits without their decimal point do not fix the magnitude (27 could be 270.xx MiB): unknown
    for cut in ("27", "2", ""):
        bare = parse_allocator_message(head.format(req="2.72 GiB", cut=cut))
        assert bare.reserved_unallocated_bytes is None and bare.truncated_reserved is None, cut
    # no unit fits between allocated and total: unknown (here 1.5 of any unit is too small or too big)
    assert parse_allocator_message(head.format(req="2.72 GiB", cut="1.5")).reserved_unallocated_bytes is None
    # a complete message is read as before
    full = parse_allocator_message(head.format(req="2.72 GiB", cut="27.85 GiB reserved in total by PyTorch)"))
    assert full.truncated_reserved is None and full.reserved_unallocated_max_bytes is None


def test_text_states_the_comparison_that_decided_the_kind(tmp_path: Path) -> None:
    """Each finding's verdict line names the two figures behind its kind, so a reader quotes the
    request and the idle reserve (or the GPU total), not whichever figure comes first."""
    log = tmp_path / "frag.log"
    log.write_text(FRAG.format(r=0, req=172, idle=2900))
    out = run(str(log)).stdout
    assert "verdict:  fragmentation: the 172.00 MiB request is smaller than the 2.83 GiB reserved" in out
    cap = tmp_path / "cap.log"
    cap.write_text(FRAG.format(r=0, req=4096, idle=12))
    out = run(str(cap)).stdout
    assert "verdict:  capacity: the 4.00 GiB request is more than the 10.00 MiB free plus the 12.00 MiB reserved" in out
