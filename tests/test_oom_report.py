"""Report assembly: order (most important first), cross-rank summary, text rendering."""

from __future__ import annotations

from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.report import NO_FINDING, build_report, order_findings, render_text, summarize
from memtune.diagnose.scan import Finding, empty_numbers
from memtune.diagnose.table import load_rows
from memtune.units import MIB

PATTERNS = load_patterns()


def alloc(kind: str, rank: int, req: int, idle: int, free: int = 0, line: int = 1) -> Finding:
    nums = dict(empty_numbers(), requested_bytes=req * MIB, reserved_unallocated_bytes=idle * MIB, free_bytes=free)
    return Finding(kind=kind, evidence="CUDA out of memory", line=line, file="t.log", rank=rank, numbers=nums)


def simple(kind: str, rank: int | None = None, line: int = 1) -> Finding:
    return Finding(kind=kind, evidence=kind, line=line, file="t.log", rank=rank, numbers=empty_numbers())


def test_order_tiers_then_log_order_within_a_tier() -> None:
    """Config errors, then allocator OOMs, then library OOMs, the warning last; within a
    tier the first failure in the log leads, whatever its kind or shortfall."""
    fs = [
        simple("alloc-conf-deprecated", line=1),
        alloc("fragmentation", 0, 100, 900, line=2),
        simple("nccl-oom", 5, line=3),
        alloc("capacity", 1, 300, 100, line=4),
        alloc("capacity", 2, 900, 100, line=5),
        simple("vpp-divisibility", 3, line=6),
        alloc("impossible-request", 4, 90000, 0, line=7),
    ]
    got = [(f.kind, f.rank) for f in order_findings(fs, PATTERNS)]
    assert got == [
        ("vpp-divisibility", 3),
        ("fragmentation", 0),
        ("capacity", 1),
        ("capacity", 2),
        ("impossible-request", 4),
        ("nccl-oom", 5),
        ("alloc-conf-deprecated", None),
    ]
    # the GPU that was shortest of memory is still named, apart from the order
    assert summarize(order_findings(fs, PATTERNS))["tightest"]["source"] == "rank 4"


def test_two_ranks_oom_the_first_in_the_log_leads_and_the_tightest_is_named() -> None:
    """Held-out class G: rank 1 fails first with more free memory than rank 0 later."""
    first = alloc("capacity", 1, 300, 10, free=600 * MIB, line=10)
    later = alloc("capacity", 0, 300, 10, free=590 * MIB, line=40)
    ordered = order_findings([later, first], PATTERNS)
    assert [f.rank for f in ordered] == [1, 0]
    s = summarize(ordered)
    assert (s["worst"]["source"], s["tightest"]["source"], s["tightest"]["free_bytes"]) == (
        "rank 1",
        "rank 0",
        590 * MIB,
    )


def test_inputs_keep_the_order_given_and_one_failure_has_no_tightest() -> None:
    from dataclasses import replace

    a = replace(alloc("capacity", 0, 300, 10, line=90), file="b.log")
    b = replace(alloc("capacity", 0, 300, 10, line=5), file="a.log")
    assert [f.file for f in order_findings([b, a], PATTERNS, inputs=["b.log", "a.log"])] == ["b.log", "a.log"]
    assert summarize([a])["tightest"] is None


def test_summary_counts_ranks_and_ignores_the_warning_for_same_kind() -> None:
    fs = order_findings(
        [alloc("fragmentation", r, 10, 20) for r in range(3)] + [simple("alloc-conf-deprecated")], PATTERNS
    )
    s = summarize(fs)
    assert (s["ranks_failed"], s["same_kind"], s["warnings"], s["failures"]) == (3, True, 1, 3)
    assert s["worst"]["kind"] == "fragmentation"


def test_occurrences_count_in_failures() -> None:
    from dataclasses import replace

    s = summarize([replace(simple("cuda-runtime-oom", 1), occurrences=4)])
    assert (s["failures"], s["kinds"]) == (4, {"cuda-runtime-oom": 4})


def test_empty_report_and_text() -> None:
    rep = build_report([], load_rows(), PATTERNS, ["a.log"])
    assert rep["findings"] == [] and rep["message"] == NO_FINDING and rep["summary"]["same_kind"] is None
    assert render_text(rep) == f"diagnose.py: {NO_FINDING} in a.log\n"


def test_text_shows_unknown_numbers_as_unknown() -> None:
    f = alloc("capacity", 0, 10, 0)
    f.numbers["reserved_unallocated_bytes"] = None
    out = render_text(build_report([f], load_rows(), PATTERNS, ["t.log"]))
    assert "reserved-but-unallocated unknown" in out and "requested 10.00 MiB" in out


def test_identical_findings_fold_into_one_line_in_text_not_in_json() -> None:
    """Six ranks with the same NCCL failure: the first in full, the rest on one fold line."""
    fs = [simple("nccl-oom", rank, line=n) for n, rank in enumerate((2, 4, 3, 7, 6, 1), 11)]
    rep = build_report(fs, load_rows(), PATTERNS, ["t.log"])
    out = render_text(rep)
    assert len(rep["findings"]) == 6  # JSON keeps every finding
    assert out.count("    cause:") == 1 and out.count("] nccl-oom - ") == 1
    assert "\n[2]-[6] same kind, cause and fix as [1]: rank 4, 3, 7, 6, 1 (lines 12, 13, 14, 15, 16;" in out


def test_fold_ids_skip_a_different_finding_in_between() -> None:
    fs = [simple("nccl-oom", 0, line=1), simple("cublas-oom", 1, line=2), simple("nccl-oom", 2, line=3)]
    rep = build_report(fs, load_rows(), PATTERNS, ["t.log"])
    assert [f["kind"] for f in rep["findings"]] == ["nccl-oom", "cublas-oom", "nccl-oom"]
    out = render_text(rep)
    assert out.count("    cause:") == 2
    assert "\n[3] same kind, cause and fix as [1]: rank 2 (line 3;" in out


def test_same_kind_with_different_fix_is_not_folded() -> None:
    """Folding is by what the reader acts on: a finding whose advice differs stays in full."""
    a, b = simple("nccl-oom", 0, line=1), simple("nccl-oom", 1, line=2)
    rep = build_report([a, b], load_rows(), PATTERNS, ["t.log"])
    rep["findings"][1]["advice"] = ["something else to do"]
    out = render_text(rep)
    assert out.count("    cause:") == 2 and "same kind, cause and fix" not in out
