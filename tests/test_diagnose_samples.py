"""Every real error text in tests/data/oom-samples: kind, location and every number, exactly.

The expected byte counts are written the way the message prints them ("13.38 GiB") and
converted here with exact fractions, independently of memtune.oom_parse.  The first line
of each sample is `# source: URL` metadata, not log text, so it is left out and the line
numbers below are those of the file.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from memtune.oom_patterns import load_patterns
from memtune.oom_scan import numbered, scan_lines

SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"
UNITS = {"bytes": 0, "KiB": 1, "MiB": 2, "GiB": 3}
NONE5 = (None, None, None, None, None)


def b(text: str) -> int:
    """ "13.38 GiB" -> bytes, rounded half up."""
    value, unit = text.split()
    exact = Fraction(value) * (1024 ** UNITS[unit])
    return int(exact + Fraction(1, 2))


def nums(req, total, free, alloc, unalloc) -> tuple:
    return tuple(None if v is None else (v if isinstance(v, int) else b(v)) for v in (req, total, free, alloc, unalloc))


# file -> list of (kind, line, device, rank, numbers(req,total,free,alloc,unalloc), occurrences)
EXPECTED = {
    "01_pytorch_pr99699_new_format_capacty.txt": [
        ("fragmentation", 2, 0, None, nums("138.00 MiB", "15.90 GiB", "8.44 MiB", "14.12 GiB", "410.41 MiB"), 1),
    ],
    "03_transformers_issue3360_legacy.txt": [
        # legacy total form: reserved-but-unallocated = reserved - allocated
        ("capacity", 2, 0, None, nums("786.00 MiB", "14.73 GiB", "575.88 MiB", "13.33 GiB", b("13.38 GiB") - b("13.33 GiB")), 1),
    ],
    "04_megatron_deepspeed_pr384_torch20_format_with_nccl_abort.txt": [
        ("impossible-request", 6, 3, None, nums("37631.79 GiB", "79.21 GiB", "24.67 GiB", "50.52 GiB", b("52.32 GiB") - b("50.52 GiB")), 1),
    ],
    "06_speechgpt_issue49_capacty_fsdp_a100_80g.txt": [
        ("fragmentation", 2, 0, None, nums("172.00 MiB", "79.15 GiB", "161.62 MiB", "75.25 GiB", "2.84 GiB"), 1),
    ],
    "07_framepack_issue369_huge_alloc_expandable.txt": [
        ("impossible-request", 2, 0, None, nums("30.29 GiB", "10.74 GiB", "3.69 GiB", "6.10 GiB", "396.58 MiB"), 1),
    ],
    "08_mmed_rag_issue38_zero_bytes_free_wsl_or_shared.txt": [
        ("capacity", 2, 0, None, nums("64.00 MiB", "8.00 GiB", 0, "22.44 GiB", "3.16 MiB"), 1),
    ],
    "09_megatron_bridge_issue771_nccl_warn_cuda_failure_oom.txt": [
        ("nccl-oom", 11, 0, None, NONE5, 1),
        ("nccl-oom", 13, 4, None, NONE5, 1),
        ("nccl-oom", 15, 3, None, NONE5, 1),
        ("nccl-oom", 17, 7, None, NONE5, 1),
        ("nccl-oom", 19, 6, None, NONE5, 1),
        ("nccl-oom", 21, 1, None, NONE5, 1),
    ],
    "11_tensorrt_llm_issue1670_nccl_enqueue_oom_no_errno.txt": [
        ("nccl-oom", 2, 2, None, NONE5, 2),  # the same warning twice from one process
    ],
    "12_lmcache_issue3430_newest_docs_url_private_pools.txt": [
        ("fragmentation", 2, 0, None, nums("192.00 MiB", "23.56 GiB", "83.25 MiB", "22.43 GiB", "343.54 MiB"), 1),
    ],
    "14_slime_issue274_torch_memory_saver_cumemcreate_oom.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "15_megatron_bridge_issue2992_cpu_offload_pp_valueerror.txt": [("cpu-offload-pp", 2, None, None, NONE5, 1)],
    "16_megatron_lm_issue5474_nccl_graph_register_guard.txt": [("cudagraph-nccl-register", 11, None, None, NONE5, 1)],
    "18_bionemo_issue784_num_layers_pp_divisible.txt": [("pp-divisibility", 7, None, 15, NONE5, 1)],
    "20_deepspeed_examples_issue323_cublas_alloc_failed.txt": [("cublas-oom", 8, None, None, NONE5, 1)],
    "21_dense_matching_issue20_cublas_alloc_failed_with_frames.txt": [("cublas-oom", 2, None, None, NONE5, 1)],
    "22_nemo_speech_issue4982_cuda_error_out_of_memory.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "24_moss_issue328_runtimeerror_cuda_error_oom_wsl.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "25_comfyui_issue12366_cudaErrorMemoryAllocation_search_hint.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "26_deepspeed_issue237_oldest_cached_format.txt": [
        # oldest form: "cached" already is the reserved-but-unallocated part, not a total
        ("capacity", 4, 0, None, nums("8.52 GiB", "31.72 GiB", "5.39 GiB", "25.59 GiB", "14.59 MiB"), 1),
    ],
    "29_gpt4llm_issue16_a100_legacy_max_split.txt": [
        ("fragmentation", 2, 0, None, nums("172.00 MiB", "79.35 GiB", "12.19 MiB", "73.95 GiB", b("76.80 GiB") - b("73.95 GiB")), 1),
    ],
    "31_pytorch_issue111363_wrapped_exception_capacty.txt": [
        ("fragmentation", 2, 0, None, nums("64.00 MiB", "79.15 GiB", "38.09 GiB", "39.10 GiB", "427.46 MiB"), 1),
    ],
    "32_taggui_issue188_no_proc_info_truncated_doc.txt": [
        ("fragmentation", 2, 0, None, nums("20.00 MiB", "4.00 GiB", "2.35 GiB", "825.15 MiB", "24.85 MiB"), 1),
    ],
    # interleaved traceback of several ranks whose OOM line was not captured: nothing to report
    "33_megatron_lm_issue818_interleaved_rank_traceback.txt": [],
    "34_pytorch_issue18853_cached_kib.txt": [
        ("capacity", 2, 0, None, nums("1024.00 MiB", "15.90 GiB", "991.56 MiB", "14.25 GiB", "607.00 KiB"), 1),
    ],
    # pre-1.0 THC text carries no numbers: all unknown, kind falls back to capacity with a note
    "35_pytorch_issue2187_pre10_thc_format.txt": [("capacity", 2, None, None, NONE5, 1)],
    "36_pytorch_pr13751_cached_format_origin.txt": [
        ("impossible-request", 2, 0, None, nums("16.00 GiB", "11.93 GiB", "7.33 GiB", "4.00 GiB", "179.00 KiB"), 1),
    ],
    "38_nccl_issue1235_alloc_h_calloc_oom_multinode.txt": [
        ("nccl-oom", 2, 3, None, (6291456, None, None, None, None), 1),  # calloc size folded in
    ],
    # NCCL "Cuda failure 1 'invalid argument'" is not a memory failure
    "40_nccl_nccl_unhandled_cuda_error_torch_side.txt": [],
    "43_alloc_conf_equals_instead_of_colon.txt": [("alloc-conf-invalid", 2, None, None, NONE5, 1)],
    "44_alloc_conf_deprecation_warning_29.txt": [("alloc-conf-deprecated", 2, None, None, NONE5, 1)],
}

KEYS = ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes")


def sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES.glob("*.txt"))


def scan_sample(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source:"), f"{path.name}: first line must name its source"
    body = "\n".join(lines[1:])
    return scan_lines(numbered(body, first_line=2), load_patterns(), file=path.name)


def test_every_sample_has_an_expectation() -> None:
    names = {p.name for p in sample_files()}
    assert names == set(EXPECTED), f"unlisted: {sorted(names - set(EXPECTED))}, missing: {sorted(set(EXPECTED) - names)}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_kind_location_and_numbers(name: str) -> None:
    findings = scan_sample(SAMPLES / name)
    got = [
        (f.kind, f.line, f.device, f.rank, tuple(f.numbers[k] for k in KEYS), f.occurrences)
        for f in findings
    ]
    assert got == EXPECTED[name]


def test_wrapped_new_format_spans_its_lines() -> None:
    (f,) = scan_sample(SAMPLES / "01_pytorch_pr99699_new_format_capacty.txt")
    assert (f.line, f.line_end) == (2, 7)  # message re-joined over six physical lines
    assert f.evidence.startswith("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB.")


def test_thc_form_reports_unknown_not_guessed() -> None:
    (f,) = scan_sample(SAMPLES / "35_pytorch_issue2187_pre10_thc_format.txt")
    assert f.note and "undecided" in f.note


def test_wrapped_exception_keeps_its_wrapper_in_evidence() -> None:
    (f,) = scan_sample(SAMPLES / "31_pytorch_issue111363_wrapped_exception_capacty.txt")
    assert "(OutOfMemoryError) CUDA out of memory" in f.evidence
