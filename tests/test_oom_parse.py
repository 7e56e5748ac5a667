"""Allocator message parsing and the fragmentation / capacity / impossible-request rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtune.diagnose.parse import (
    AllocatorNumbers,
    classify,
    format_bytes,
    is_complete,
    parse_allocator_message,
    size_to_bytes,
)
from memtune.units import GIB

NEW = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
    "79.10 GiB of which 1.50 GiB is free. Process 77 has 77.58 GiB memory in use. Of the allocated memory "
    "70.00 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and "
    "{unalloc} is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


@pytest.mark.parametrize(
    "value,unit,expected",
    [
        ("0", "bytes", 0),
        ("512", "bytes", 512),
        ("1", "byte", 1),
        ("607.00", "KiB", 607 * 1024),
        ("1.50", "MiB", 1572864),
        ("13.38", "GiB", 14366665605),  # 14366665605.12 rounded half up
        ("2.00", "TiB", 2 << 40),
        ("1.00", "KB", 1024),  # old spelling, same binary multiple
    ],
)
def test_size_to_bytes(value: str, unit: str, expected: int) -> None:
    assert size_to_bytes(value, unit) == expected


def test_new_format_all_numbers_and_private_pools_do_not_confuse() -> None:
    n = parse_allocator_message(NEW.format(unalloc="3.00 GiB"))
    assert n.as_json() == {
        "requested_bytes": 2 * GIB,
        "total_bytes": size_to_bytes("79.10", "GiB"),
        "free_bytes": size_to_bytes("1.50", "GiB"),
        "allocated_bytes": 70 * GIB,
        "reserved_unallocated_bytes": 3 * GIB,
    }
    assert n.device == 1
    assert classify(n).kind == "fragmentation"


def test_boundary_equal_reserve_is_fragmentation_one_byte_less_is_capacity() -> None:
    assert (
        classify(AllocatorNumbers(requested_bytes=100, total_bytes=1000, reserved_unallocated_bytes=100)).kind
        == "fragmentation"
    )
    assert (
        classify(AllocatorNumbers(requested_bytes=100, total_bytes=1000, reserved_unallocated_bytes=99)).kind
        == "capacity"
    )


def test_request_larger_than_gpu_is_impossible_even_with_big_reserve() -> None:
    n = AllocatorNumbers(requested_bytes=2000, total_bytes=1000, reserved_unallocated_bytes=5000)
    assert classify(n).kind == "impossible-request"


def test_more_than_1eb() -> None:
    n = parse_allocator_message("CUDA out of memory. Tried to allocate more than 1EB memory.")
    assert n.requested_more_than_1eb and n.requested_bytes is None
    assert classify(n).kind == "impossible-request"


def test_legacy_reserved_total_minus_allocated() -> None:
    n = parse_allocator_message(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; 6.00 GiB already allocated; "
        "10.00 MiB free; 6.50 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
        "max_split_size_mb to avoid fragmentation."
    )
    assert n.reserved_unallocated_bytes == size_to_bytes("6.50", "GiB") - 6 * GIB
    assert n.legacy_form == "reserved-total"
    assert classify(n).kind == "fragmentation"


def test_legacy_cached_is_already_the_idle_part() -> None:
    n = parse_allocator_message(
        "CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 11.00 GiB total capacity; 9.00 GiB already allocated; "
        "100.00 MiB free; 1.50 GiB cached)"
    )
    assert n.reserved_unallocated_bytes == size_to_bytes("1.50", "GiB")
    assert classify(n).kind == "fragmentation"


@pytest.mark.parametrize(
    "cut_after,unknown",
    [
        (
            "Tried to allocate 2.0",
            {"requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes"},
        ),
        ("of which 1.5", {"free_bytes", "allocated_bytes", "reserved_unallocated_bytes"}),
        ("70.00 GiB is allocated by PyT", {"allocated_bytes", "reserved_unallocated_bytes"}),
        ("and 3.00 Gi", {"reserved_unallocated_bytes"}),
    ],
)
def test_truncated_message_reports_unknown_not_guessed(cut_after: str, unknown: set[str]) -> None:
    full = NEW.format(unalloc="3.00 GiB")
    cut = full[: full.index(cut_after) + len(cut_after)]
    n = parse_allocator_message(cut)
    got_unknown = {k for k, v in n.as_json().items() if v is None}
    assert got_unknown == unknown
    verdict = classify(n)
    if "reserved_unallocated_bytes" in unknown:
        assert verdict.kind == "capacity" and verdict.note and "undecided" in verdict.note
    assert not is_complete(cut)


def test_truncated_but_request_exceeds_total_is_still_impossible() -> None:
    n = parse_allocator_message(
        "CUDA out of memory. Tried to allocate 90.00 GiB. GPU 0 has a total capacity of 79.10 GiB of wh"
    )
    assert classify(n).kind == "impossible-request"


def test_format_bytes() -> None:
    assert format_bytes(None) == "unknown"
    assert format_bytes(512) == "512 bytes"
    assert format_bytes(3 * GIB) == "3.00 GiB"
    assert format_bytes(1536 * 1024) == "1.50 MiB"


@given(
    req=st.integers(min_value=1, max_value=10_000),
    total=st.integers(min_value=1, max_value=10_000),
    idle=st.integers(min_value=0, max_value=10_000),
)
def test_rule_is_total_and_consistent(req: int, total: int, idle: int) -> None:
    kind = classify(AllocatorNumbers(requested_bytes=req, total_bytes=total, reserved_unallocated_bytes=idle)).kind
    if req > total:
        assert kind == "impossible-request"
    elif idle >= req:
        assert kind == "fragmentation"
    else:
        assert kind == "capacity"


@given(st.text(max_size=300))
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    n = parse_allocator_message("CUDA out of memory. " + text)
    classify(n)
