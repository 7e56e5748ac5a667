"""Re-joining wrapped allocator messages (issue 11 item 3), tested as families of wrapping.

Families: a terminal or viewer wrapping at a fixed column (breaks inside words and
numbers), with the launcher label on the first physical line only (the label is part of
the printed line the terminal wrapped) or on every line (a tool that wraps, then labels),
for each launcher's label ([rankN]:, Slurm srun -l "N: ", torchrun [defaultN]:, mpirun
[1,N]<stderr>:, timestamps), with other ranks' lines interleaved between the pieces.
"""

from __future__ import annotations

import pytest

from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.rejoin import glue, join
from memtune.diagnose.scan import numbered, scan_lines
from memtune.units import GIB

PATTERNS = load_patterns()


def gib(x: str) -> int:
    from memtune.diagnose.parse import size_to_bytes

    return size_to_bytes(x, "GiB")


# Rank 5's message: 1.96 GiB requested with 5.84 GiB idle in the reserve -> fragmentation.
RANK5 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has a total capacity of 79.11 GiB "
    "of which 0 bytes is free. Including non-PyTorch memory, this process has 79.10 GiB memory in use. Of the allocated "
    "memory 71.53 GiB is allocated by PyTorch, and 5.84 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
RANK5_NUMBERS = {
    "requested_bytes": gib("1.96"),
    "total_bytes": gib("79.11"),
    "free_bytes": 0,
    "allocated_bytes": gib("71.53"),
    "reserved_unallocated_bytes": gib("5.84"),
}


def other_rank_line(i: int) -> str:
    r = [0, 1, 2, 3, 4, 6, 7][i % 7]
    return f"[rank{r}]: iteration {100 + i} | lm loss: 2.{i:03d} | grad norm: 0.{i}"


def wrap(text: str, width: int) -> list[str]:
    """A terminal's hard wrap: every ``width`` characters, wherever that falls."""
    return [text[i : i + width] for i in range(0, len(text), width)]


def build(prefix: str, width: int, every_line: bool, gap: int) -> str:
    """Rank 5's message wrapped at ``width`` with ``gap`` other-rank lines between pieces."""
    if every_line:
        pieces = [prefix + p for p in wrap(RANK5, width)]
    else:
        pieces = wrap(prefix + RANK5, width)
    lines = [other_rank_line(i) for i in range(5)]
    for k, piece in enumerate(pieces):
        lines.append(piece)
        lines += [other_rank_line(10 * k + j) for j in range(gap)]
    lines += [other_rank_line(90 + i) for i in range(3)]
    return "\n".join(lines) + "\n"


def scan(text: str):
    return scan_lines(numbered(text), PATTERNS, file="t.log")


def test_newcomer_case_eight_ranks_rank5_wrapped_over_three_unlabelled_lines() -> None:
    """The reported miss: called capacity (only the first line was read) before the fix."""
    first, second, third = wrap(RANK5, len(RANK5) // 3 + 1)
    log = (
        "\n".join(
            [
                "[rank0]: iteration 99 | lm loss: 2.100",
                "[rank5]: " + first,
                "[rank3]: iteration 100 | lm loss: 2.000",
                "[rank7]: iteration 100 | lm loss: 2.010",
                second,
                "[rank1]: iteration 100 | lm loss: 2.020",
                "[rank6]: iteration 100 | lm loss: 2.030",
                "[rank2]: iteration 100 | lm loss: 2.040",
                third,
                "[rank4]: iteration 100 | lm loss: 2.050",
            ]
        )
        + "\n"
    )
    (f,) = scan(log)
    assert (f.kind, f.rank, f.device, f.line, f.line_end) == ("fragmentation", 5, 5, 2, 9)
    assert f.numbers == RANK5_NUMBERS


LABELS = ["[rank5]: ", "5: ", "[default5]:", "5: [rank5]: ", "[2025-09-24 16:15:28] [rank5]: ", "[1,5]<stderr>: "]
WIDTHS = [61, 80, 97, 120, 137, 200]


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("every_line", [False, True], ids=["label-first-line", "label-every-line"])
@pytest.mark.parametrize("gap", [0, 2], ids=["contiguous", "interleaved"])
def test_fixed_column_wraps_of_every_launcher_rejoin_to_the_same_numbers(
    label: str, width: int, every_line: bool, gap: int
) -> None:
    # Some of these cut "CUDA out of memory" itself ("... [rank5]: torch.OutOfMemoryError: CUDA o" /
    # "ut of memory. Tried to allocate ..."): the second literal and the cut head re-join them.
    (f,) = scan(build(label, width, every_line, gap))
    assert (f.kind, f.rank, f.device) == ("fragmentation", 5, 5)
    assert f.numbers == RANK5_NUMBERS


@pytest.mark.parametrize("width", WIDTHS)
def test_single_process_log_without_labels(width: int) -> None:
    (f,) = scan("step 10 loss 2.0\n" + "\n".join(wrap(RANK5, width)) + "\nstep 11\n")
    assert (f.kind, f.numbers) == ("fragmentation", RANK5_NUMBERS)


def test_legacy_field_broken_inside_a_word_rejoins_without_a_space() -> None:
    text = (
        "[rank5]: RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 5; 79.35 GiB total capacity; 70.00 GiB already allocated; 0 bytes fre\n"
        "e; 76.00 GiB reserved in total by PyTorch)\n"
    )
    (f,) = scan(text)
    assert (f.kind, f.rank, f.numbers["free_bytes"], f.numbers["reserved_unallocated_bytes"]) == (
        "fragmentation",
        5,
        0,
        6 * GIB,
    )
    assert "0 bytes free; 76.00 GiB" in f.evidence


def test_other_ranks_complete_oom_between_the_pieces_stays_separate() -> None:
    pieces = wrap("[rank5]: " + RANK5, 120)
    cap = (
        "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total capacity of 79.11 GiB "
        "of which 2.10 GiB is free. Of the allocated memory 76.10 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated."
    )
    text = "\n".join([pieces[0], cap, *pieces[1:]]) + "\n"
    found = {f.rank: f for f in scan(text)}
    assert (found[5].kind, found[5].numbers) == ("fragmentation", RANK5_NUMBERS)
    assert (found[2].kind, found[2].numbers["requested_bytes"]) == ("capacity", gib("3.50"))


def test_an_unrelated_unlabelled_line_is_not_swallowed() -> None:
    pieces = wrap("[rank5]: " + RANK5, 150)
    text = "\n".join([pieces[0], "Epoch 1:  45%|####5     | 450/1000 [01:02<01:16,  7.20it/s]", *pieces[1:]]) + "\n"
    (f,) = scan(text)
    assert (f.kind, f.numbers) == ("fragmentation", RANK5_NUMBERS)
    assert "Epoch" not in f.evidence


@pytest.mark.parametrize(
    "left,right,glued",
    [
        ("0 bytes fre", "e; 76.00", True),
        ("capacity of 79.", "11 GiB", True),
        ("capacity of 7", "9.11 GiB", True),
        ("allocate 20.00 Mi", "B (GPU 0;", True),
        ("Including non-", "PyTorch memory", True),
        ("is allocat", "ed by PyTorch", True),
        ("79.11 GiB", ". Including", True),
        ("79.11 GiB", "of which", False),  # a space lost at the break: both halves are words
        ("total capacity;", "70.00 GiB", False),
        ("Of the allocated memory", "71.53 GiB", False),
        ("memory in", "use.", False),
        ("79.11 GiB ", "of which", False),
        ("some/path/to/train", ".py", True),
    ],
)
def test_glue_decisions(left: str, right: str, glued: bool) -> None:
    assert glue(left, right) is glued


def test_join_collapses_whitespace_and_skips_empty_pieces() -> None:
    assert join(["Tried to allocate 1.", "96 GiB.  ", "", " GPU 5 has"]) == "Tried to allocate 1.96 GiB. GPU 5 has"
