"""Scanner: wrapped messages per rank, interleaved ranks, launcher prefixes, folding repeats."""

from __future__ import annotations

import pytest

from memtune.diagnose.log_reader import strip_prefixes
from memtune.diagnose.patterns import ALLOCATOR_KINDS, load_patterns
from memtune.diagnose.scan import numbered, scan_lines
from memtune.units import GIB, MIB

PATTERNS = load_patterns()


def scan(text: str):
    return scan_lines(numbered(text), PATTERNS, file="t.log")


# The 2.1+ message of two ranks, each wrapped over three lines and interleaved line by line
# (torchrun prints every line of a rank with its own "[rankN]:" prefix).
INTERLEAVED = """\
[rank0]: iteration 10 | loss 2.31
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.10 GiB
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB
[rank1]: of which 100.00 MiB is free. Including non-PyTorch memory, this process has 79.00 GiB memory in use. Of the allocated memory
[rank0]: of which 200.00 MiB is free. Including non-PyTorch memory, this process has 78.90 GiB memory in use. Of the allocated memory
[rank0]: 70.00 GiB is allocated by PyTorch, and 8.00 GiB is reserved by PyTorch but unallocated.
[rank1]: 77.00 GiB is allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.
[rank0]: If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
"""


def test_interleaved_wrapped_ranks_are_rejoined_per_rank() -> None:
    f0, f1 = sorted(scan(INTERLEAVED), key=lambda f: f.rank)
    assert (f0.kind, f0.rank, f0.device, f0.line, f0.line_end) == ("fragmentation", 0, 0, 2, 6)
    assert f0.numbers == {
        "requested_bytes": 1 * GIB,
        "total_bytes": int(79.10 * GIB + 0.5),
        "free_bytes": 200 * MIB,
        "allocated_bytes": 70 * GIB,
        "reserved_unallocated_bytes": 8 * GIB,
    }
    assert (f1.kind, f1.rank, f1.device, f1.line, f1.line_end) == ("capacity", 1, 1, 3, 7)
    assert f1.numbers["free_bytes"] == 100 * MIB
    assert f1.numbers["reserved_unallocated_bytes"] == int(1.5 * GIB)


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "> ",
        "> > ",
        "[2025-09-24 16:15:28] ",
        "2025-09-24T16:15:28.123456Z ",
        "12: [rank12]: ",
        "[1,12]<stderr>: ",
        "node-003: [rank12]: ",
    ],
)
def test_prefixes_on_every_line_of_a_wrapped_legacy_message(prefix: str) -> None:
    text = (
        f"{prefix}RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 4; 79.35 GiB total capacity;\n"
        f"{prefix}70.00 GiB already allocated; 12.19 MiB free; 76.00 GiB reserved in total by PyTorch)\n"
    )
    (f,) = scan(text)
    assert (f.kind, f.device, f.line, f.line_end) == ("fragmentation", 4, 1, 2)
    assert f.numbers["reserved_unallocated_bytes"] == 6 * GIB
    if "rank12" in prefix or "<stderr>" in prefix:
        assert f.rank == 12


def test_blank_line_ends_a_truncated_message_and_numbers_stay_unknown() -> None:
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.2\n\nFile x\n"
    (f,) = scan(text)
    assert f.numbers["requested_bytes"] == GIB
    assert f.numbers["free_bytes"] is None and f.numbers["reserved_unallocated_bytes"] is None
    assert f.kind == "capacity" and "undecided" in (f.note or "")


def test_repeated_identical_failure_of_one_rank_is_folded() -> None:
    line = "[rank2]: RuntimeError: CUDA error: out of memory\n"
    (f,) = scan(line * 5)
    assert (f.occurrences, f.line) == (5, 1)


def test_same_failure_on_different_ranks_stays_separate() -> None:
    text = "".join(f"[rank{r}]: RuntimeError: CUDA error: out of memory\n" for r in range(4))
    assert sorted(f.rank for f in scan(text)) == [0, 1, 2, 3]


def test_config_dump_mentioning_expandable_segments_is_not_a_failure() -> None:
    text = (
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
        "  nccl_ub ........................................ True\n"
        "  num_layers should be set; layers are divisible by 4\n"
        "except torch.cuda.OutOfMemoryError:\n"
    )
    assert scan(text) == []


def test_details_of_vpp_errors() -> None:
    (f,) = scan(
        "ValueError: The number of contiguous micro-batches in a virtual pipeline stageshould range in [PP=4 , M=2]\n"
    )
    assert (f.kind, f.details) == ("vpp-microbatches", {"pp": 4, "microbatches": 2})
    (g,) = scan(
        "RuntimeError: number of microbatches (6) is not divisible by pipeline-model-parallel-size (4) when using interleaved schedule\n"
    )
    assert (g.kind, g.details) == ("vpp-microbatches", {"microbatches": 6, "pp": 4})
    (h,) = scan(
        "ValueError: number of layers on each middle pipeline rank:8 must be divisible by virtualpipeline parallel degree 3\n"
    )
    assert (h.kind, h.details) == ("vpp-divisibility", {"layers_per_rank": 8, "vpp": 3})


def _examples():
    for kind, info in PATTERNS.kinds.items():
        for example in info.examples:
            yield kind, example


@pytest.mark.parametrize("kind,example", list(_examples()))
def test_every_pattern_example_is_found_as_its_kind(kind: str, example: str) -> None:
    # The streaming prefilter only sees lines with a trigger: every example must have one.
    assert PATTERNS.has_trigger(strip_prefixes(example).text), example
    (f,) = scan(example + "\n")
    assert f.kind == kind


def test_every_kind_has_an_example() -> None:
    assert all(info.examples for info in PATTERNS.kinds.values())
    assert set(ALLOCATOR_KINDS) <= set(PATTERNS.kinds)


def test_torch_side_nccl_oom_with_rank_prefix() -> None:
    text = (
        "[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error\n"
        "[rank7]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "[rank7]: Last error:\n"
        "[rank7]: Cuda failure 2 'out of memory'\n"
    )
    (f,) = scan(text)
    assert (f.kind, f.rank, f.line) == ("nccl-oom", 7, 4)


def test_many_distinct_findings_stay_separate() -> None:
    text = "".join(
        f"[rank{i % 512}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {i}.00 MiB (GPU 0; 79.00 GiB total capacity; "
        f"70.00 GiB already allocated; 1.00 GiB free; 71.00 GiB reserved in total by PyTorch)\n"
        for i in range(1, 4001)
    )
    found = scan(text)
    assert len(found) == 4000
    assert {f.rank for f in found} == set(range(512))
