"""The allocator-config parser agrees with PyTorch's own parser, release by release.

Each row: (string, PyTorch release, accepted?, substring of PyTorch's reason). The rows
follow PyTorch's source for that release (c10/cuda/CUDACachingAllocator.cpp 2.0-2.1,
CUDAAllocatorConfig.cpp 2.2-2.8, c10/core/AllocatorConfig.{h,cpp} 2.9+) and the documented
behaviour (notes/cuda.rst "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF") and public
error reports (oom-samples 43/44).
"""

from __future__ import annotations

import pytest

from memtune.errors import InputError
from memtune.readers import alloc_conf as ac

V20, V21, V25, V28, V29, V211 = (2, 0), (2, 1), (2, 5), (2, 8), (2, 9, 1), (2, 11)

TABLE = [
    # --- the documented forms ---------------------------------------------------------
    ("expandable_segments:True", V21, True, None),
    ("expandable_segments:True", V29, True, None),
    ("expandable_segments:False", V28, True, None),
    ("max_split_size_mb:128", V25, True, None),
    ("max_split_size_mb:512,garbage_collection_threshold:0.6", V25, True, None),
    ("garbage_collection_threshold:0.8,max_split_size_mb:128,expandable_segments:True", V29, True, None),
    ("roundup_power2_divisions:4", V25, True, None),
    ("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]", V25, True, None),
    ("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]", V29, True, None),
    ("roundup_power2_divisions:[>:2]", V28, True, None),
    ("backend:cudaMallocAsync", V25, True, None),
    ("backend:native,expandable_segments:True", V29, True, None),
    ("", V25, True, None),
    ("expandable_segments:True,", V28, True, None),  # trailing comma: nothing follows, accepted
    # --- booleans must be True / False -----------------------------------------------
    ("expandable_segments:true", V28, False, "Expected a single True/False argument for expandable_segments"),
    ("expandable_segments:true", V29, False, "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"),
    ("expandable_segments:1", V25, False, "True/False"),
    ("release_lock_on_cudamalloc:yes", V25, False, "release_lock_on_cudamalloc"),
    # --- key=value instead of key:value (oom-sample 43) ------------------------------
    ("max_split_size_mb=8000", V20, False, "Unrecognized CachingAllocator option: max_split_size_mb=8000"),
    ("expandable_segments=True", V28, False, "Unrecognized CachingAllocator option: expandable_segments=True"),
    ("expandable_segments=True", V29, False, "Index out of bounds in ConfigTokenizer"),
    # --- unknown keys and version gating ---------------------------------------------
    ("expandable_segment:True", V28, False, "Unrecognized CachingAllocator option: expandable_segment"),
    ("expandable_segment:True", V211, False, "Unrecognized key 'expandable_segment' in CUDA allocator config."),
    ("expandable_segments:True", V20, False, "Unrecognized CachingAllocator option: expandable_segments"),
    ("max_non_split_rounding_mb:40", V25, False, "Unrecognized CachingAllocator option: max_non_split_rounding_mb"),
    ("per_process_memory_fraction:0.5", V29, False, "Unrecognized key 'per_process_memory_fraction'"),
    ("per_process_memory_fraction:0.5", V211, True, None),
    # --- numeric limits ----------------------------------------------------------------
    ("max_split_size_mb:19", V28, False, "max_split_size_mb too small"),
    ("max_split_size_mb:19", V29, False, "must be >= 20"),
    ("max_split_size_mb:20", V28, False, "must be > 20"),  # releases before 2.9 check > 20
    ("max_split_size_mb:20", V29, True, None),
    ("max_split_size_mb:128MB", V25, True, None),  # std::stoi reads the leading digits
    ("max_split_size_mb:big", V25, False, "stoi"),
    ("garbage_collection_threshold:1.0", V25, False, "garbage_collect_threshold too big"),
    ("garbage_collection_threshold:0", V25, False, "garbage_collect_threshold too small"),
    ("garbage_collection_threshold:1.5", V29, False, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
    ("roundup_power2_divisions:3", V25, False, "has to be power of 2"),
    ("roundup_power2_divisions:[64:3]", V29, False, "power of 2 or 0 to disable roundup"),
    ("roundup_power2_divisions:[64:0,>:4]", V29, True, None),
    ("roundup_power2_divisions:[65:8]", V28, False, "the intervals have to be power of 2"),
    ("roundup_power2_divisions:[64:8", V29, False, "Index out of bounds"),
    ("roundup_power2_divisions:[64:8,", V29, False, "closing bracket"),
    ("pinned_num_register_threads:6", V25, False, "Number of register threads has to be power of 2"),
    ("pinned_num_register_threads:256", V29, False, "less than or equal to 128"),
    ("backend:cudaMalloc", V25, False, "Unknown allocator backend, options are native and cudaMallocAsync"),
    # --- separators and whitespace -------------------------------------------------------
    ("expandable_segments: True", V28, True, None),  # spaces are dropped by every lexer
    ("expandable_segments : True , max_split_size_mb : 128", V29, True, None),
    ("expandable_segments:\tTrue", V28, False, "True/False"),  # 2.0-2.8 drop only ' '
    ("expandable_segments:\tTrue", V29, True, None),  # 2.9+ drop every isspace()
    ("expandable_segments", V28, False, "Error parsing CachingAllocator settings, expected :"),
    ("expandable_segments:True;max_split_size_mb:128", V28, False, "True/False"),
    ("expandable_segments:True max_split_size_mb:128", V28, False, "True/False"),  # space is no separator
    ("expandable_segments,True", V28, False, "expected :"),
    ("expandable_segments,True", V29, True, None),  # 2.9 checkToken only checks bounds
]


@pytest.mark.parametrize("text,version,accepted,reason", TABLE, ids=[f"{r[0]!r}@{ac.version_str(r[1])}" for r in TABLE])
def test_agrees_with_pytorch(text: str, version: tuple[int, ...], accepted: bool, reason: str | None) -> None:
    verdict = ac.judge(text, version)
    assert verdict.accepted is accepted, verdict.reason
    if reason is not None:
        assert reason in (verdict.reason or "")


def test_table_is_large_and_mixed() -> None:
    assert len(TABLE) >= 30
    assert sum(1 for row in TABLE if row[2]) >= 10 and sum(1 for row in TABLE if not row[2]) >= 10


def test_last_value_wins_and_settings_are_typed() -> None:
    verdict = ac.judge("expandable_segments:True,max_split_size_mb:256,expandable_segments:False", V28)
    assert verdict.accepted
    assert verdict.settings == {"expandable_segments": False, "max_split_size_mb": 256}


def test_exception_type_follows_release() -> None:
    assert ac.judge("expandable_segments:true", V28).exception == "RuntimeError"
    assert ac.judge("expandable_segments:true", V29).exception == "ValueError"


def test_pre_2_0_split_parser_ignores_items_without_colon() -> None:
    verdict = ac.judge("expandable_segments", (1, 13))
    assert verdict.accepted and verdict.notes  # silently ignored by 1.x, reported as a note
    assert not ac.judge("max_split_size_mb:10", (1, 13)).accepted


def test_unknown_version_probes_several_releases() -> None:
    parsed = ac.parse("expandable_segments:\tTrue")
    assert parsed.torch_version is None
    assert {v.accepted for v in parsed.verdicts} == {True, False}
    assert not parsed.accepted and not parsed.expandable_segments


def test_megatron_guard_view_differs_from_pytorch_with_whitespace() -> None:
    parsed = ac.parse("expandable_segments: True", V28)
    assert parsed.expandable_segments  # PyTorch turns it on
    assert parsed.has_whitespace and not parsed.megatron_guard_sees_expandable  # Megatron's text test misses it


def test_cudamallocasync_notes_ignored_native_options() -> None:
    verdict = ac.judge("backend:cudaMallocAsync,max_split_size_mb:64", V25)
    assert verdict.accepted and any("ignores" in note for note in verdict.notes)


@pytest.mark.parametrize("text,expected", [("2.9.1+cu128", (2, 9, 1)), ("v2.5", (2, 5)), (" 2.10.0a0 ", (2, 10, 0))])
def test_parse_version(text: str, expected: tuple[int, ...]) -> None:
    assert ac.parse_version(text) == expected


def test_parse_version_rejects_garbage() -> None:
    with pytest.raises(InputError):
        ac.parse_version("latest")


@pytest.mark.parametrize(
    "bad,good",
    [
        ("max_split_size_mb=8000", "max_split_size_mb:8000"),
        ("expandable_segments:true", "expandable_segments:True"),
        ("expandable_segments: True", "expandable_segments:True"),
    ],
)
def test_suggested_fix_is_accepted(bad: str, good: str) -> None:
    verdict = ac.judge(bad, V28)
    fixed = ac.suggest_fix(bad, verdict)
    assert fixed == good
    assert ac.judge(fixed, V28).accepted


def test_rename_facts() -> None:
    assert ac.alloc_conf_primary((2, 8)) is False and ac.alloc_conf_primary((2, 9)) is True
    assert ac.alloc_conf_ignored_for_cuda((2, 9, 1)) is True
    assert ac.alloc_conf_ignored_for_cuda((2, 11)) is False
    assert ac.alloc_conf_primary(None) is None
