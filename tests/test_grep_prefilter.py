"""The GNU grep prefilter and the pure-Python one give identical findings (issue 11 item 7).

diagnose.py picks GNU grep for big plain files and the Python pass otherwise (stdin,
.gz, UTF-16, no GNU grep); a user must get the same answer either way.  Compared on the
sample corpus (every real text, with filler between) and on generated multi-rank logs
with wrapped, interleaved and enormous lines, CRLF and a missing final newline.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from memtune.diagnose import grep_prefilter
from memtune.diagnose.log_reader import Source, TextStream
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.run import scan_source, source_lines
from memtune.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"
REPO = Path(__file__).resolve().parent.parent
PATTERNS = load_patterns()

needs_grep = pytest.mark.skipif(grep_prefilter.gnu_grep() is None, reason="needs GNU grep")


def _corpus() -> bytes:
    parts = []
    for i, path in enumerate(sorted(SAMPLES.glob("*.txt"))):
        parts += [f"[rank{i}]: iteration {j} loss 2.{j}" for j in range(30)]
        parts += path.read_text(encoding="utf-8").splitlines()[1:]
    return ("\n".join(parts) + "\n").encode("utf-8")


def _generated(seed: int) -> bytes:
    """A multi-rank log: benign lines, trigger lines, wrapped OOMs of interleaved ranks."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import diagnose_speed

    rng = random.Random(seed)
    lines: list[bytes] = []
    block = diagnose_speed.dense_block(rng, 0).splitlines()[:3000]
    for line in block:
        lines.append(line)
        if rng.random() < 0.003:
            lines += diagnose_speed.buried_failures()[rng.randrange(5)].splitlines()
        if rng.random() < 0.002:  # a wrapped message whose continuation sits a window away
            r = rng.randrange(8)
            lines.append(
                f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU {r} has a total capacity of 79.10 GiB".encode()
            )
            lines += [b"[rank9]: iteration 1"] * rng.randrange(30)
            lines.append(
                f"[rank{r}]: of which 10.00 MiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 8.00 GiB is reserved by PyTorch but unallocated.".encode()
            )
        if rng.random() < 0.002:  # labelled on its first line only, wrapped inside words
            msg = (
                f"[rank{rng.randrange(8)}]: RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 79.35 GiB total "
                "capacity; 70.00 GiB already allocated; 0 bytes free; 76.00 GiB reserved in total by PyTorch)"
            )
            width = rng.randrange(40, 120)
            for k in range(0, len(msg), width):
                lines.append(msg[k : k + width].encode())
                lines += [b"[rank9]: RuntimeError: CUDA error: out of memory"] * rng.randrange(2)
    data = b"\n".join(lines)
    if seed % 2:
        data = data.replace(b"\n", b"\r\n")
    return data if seed % 3 == 0 else data + b"\n"  # sometimes no final newline


def _view(findings):
    return [
        (
            f.kind,
            f.line,
            f.line_end,
            f.rank,
            f.host,
            f.pid,
            f.device,
            tuple(sorted(f.numbers.items())),
            f.occurrences,
            f.evidence,
        )
        for f in findings
    ]


def _both(path: Path):
    grep_found, grep_facts = scan_source(Source(str(path)), PATTERNS, prefilter="grep")
    py_found, py_facts = scan_source(Source(str(path)), PATTERNS, prefilter="python")
    return (_view(grep_found), grep_facts), (_view(py_found), py_facts)


@needs_grep
def test_same_findings_on_the_sample_corpus(tmp_path: Path) -> None:
    log = tmp_path / "corpus.log"
    log.write_bytes(_corpus())
    by_grep, by_python = _both(log)
    assert len(by_python[0]) > 20
    assert by_grep == by_python


@needs_grep
@pytest.mark.parametrize("seed", range(6))
def test_same_findings_on_generated_logs(tmp_path: Path, seed: int) -> None:
    log = tmp_path / "gen.log"
    log.write_bytes(_generated(seed))
    by_grep, by_python = _both(log)
    assert by_python[0]
    assert by_grep == by_python


@needs_grep
def test_same_candidate_lines_including_the_windows(tmp_path: Path) -> None:
    log = tmp_path / "gen.log"
    log.write_bytes(_generated(4))

    def lines(how: str):
        with TextStream(Source(str(log))) as stream:
            return [(n, raw) for n, raw, _hit in source_lines(stream, PATTERNS, how)]

    got = lines("grep")
    assert len(got) > 100
    assert got == lines("python")


@needs_grep
def test_enormous_line_is_cut_the_same_way(tmp_path: Path, monkeypatch) -> None:
    import memtune.diagnose.run as dr

    monkeypatch.setattr(dr, "MAX_CARRY", 4096)
    monkeypatch.setattr("memtune.diagnose.log_reader.MAX_CARRY", 4096)
    log = tmp_path / "big.log"
    # the second failure sits beyond cuda-runtime-oom's fold_lines, so it stays its own finding
    log.write_bytes(
        b"a\n"
        + b"x" * 10000
        + b" RuntimeError: CUDA error: out of memory\nb\nc\nd\ne\nRuntimeError: CUDA error: out of memory\n"
    )
    by_grep, _ = scan_source(Source(str(log)), PATTERNS, prefilter="grep")
    by_python, _ = scan_source(Source(str(log)), PATTERNS, prefilter="python")
    assert (
        [(f.kind, f.line) for f in by_grep]
        == [(f.kind, f.line) for f in by_python]
        == [("cuda-runtime-oom", 2), ("cuda-runtime-oom", 7)]
    )


@needs_grep
def test_a_file_named_like_an_option_is_read_as_a_file(tmp_path: Path) -> None:
    log = tmp_path / "-r"
    log.write_bytes(b"RuntimeError: CUDA error: out of memory\n")
    found, _ = scan_source(Source(str(log)), PATTERNS, prefilter="grep")
    assert [f.kind for f in found] == ["cuda-runtime-oom"]


def test_auto_choice_uses_python_for_small_files_and_when_forced(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "a.log"
    assert grep_prefilter.choose(log, 100) == "python"
    monkeypatch.setenv(grep_prefilter.ENV_SWITCH, "python")
    assert grep_prefilter.choose(log, 10 << 30) == "python"
    monkeypatch.setenv(grep_prefilter.ENV_SWITCH, "auto")
    expected = "grep" if grep_prefilter.gnu_grep() else "python"
    assert grep_prefilter.choose(log, 10 << 30) == expected


def test_stdin_and_gzip_never_use_grep(tmp_path: Path) -> None:
    import gzip

    log = tmp_path / "a.log.gz"
    log.write_bytes(gzip.compress(b"RuntimeError: CUDA error: out of memory\n"))
    with TextStream(Source(str(log))) as stream:
        assert not stream.plain_file
    found, _ = scan_source(Source(str(log)), PATTERNS, prefilter="grep")
    assert [f.kind for f in found] == ["cuda-runtime-oom"]


@needs_grep
def test_binary_file_is_refused_on_the_grep_path_too(tmp_path: Path) -> None:
    log = tmp_path / "model.bin"
    log.write_bytes(b"\x7fELF\x00\x00" * 100 + b"out of memory\n")
    with pytest.raises(InputError, match="binary"):
        scan_source(Source(str(log)), PATTERNS, prefilter="grep")


@needs_grep
def test_output_read_in_small_blocks_and_giant_lines_give_the_same_findings(tmp_path: Path, monkeypatch) -> None:
    """grep's output split across many read blocks, giant lines arriving in pieces.

    A line longer than the reader's limit is cut at different places by the two readers, so
    two identical giant lines may fold into one finding on one path and not the other; what
    must agree is every failure and how often it happened."""
    import memtune.diagnose.run as dr

    monkeypatch.setattr(grep_prefilter, "OUTPUT_CHUNK", 97)
    monkeypatch.setattr(dr, "MAX_CARRY", 4096)
    monkeypatch.setattr("memtune.diagnose.log_reader.MAX_CARRY", 4096)
    giant = b"y" * 9000 + b" [rank3]: RuntimeError: CUDA error: out of memory " + b"z" * 9000
    data = _generated(2)[:20000] + b"\n" + giant + b"\n" + _generated(3)[:20000] + b"\n" + giant + b"\n"
    log = tmp_path / "mixed.log"
    log.write_bytes(data)
    by_grep, by_python = _both(log)

    def occurrences(view):
        totals: dict[str, int] = {}
        for kind, *_rest, count, _evidence in view:
            totals[kind] = totals.get(kind, 0) + count
        return totals

    assert occurrences(by_grep[0]) == occurrences(by_python[0])
    assert occurrences(by_grep[0]).get("cuda-runtime-oom", 0) >= 2


# cudaMallocAsync's OOM as PyTorch prints it (c10/cuda/CUDAMallocAsyncAllocator.cpp, mallocAsync):
# the field list on the lines after the message, none of them a trigger, between other ranks' lines.
ASYNC_FIELDS = [
    "Allocation on device 0 would exceed allowed memory. (out of memory)",
    "Currently allocated     : 4.86 GiB",
    "Requested               : 10.12 GiB",
    "Device limit            : 24.00 GiB",
    "Free (according to CUDA): 0 bytes",
    "PyTorch limit (set by user-supplied memory fraction)",
    "                        : 17179869184.00 GiB",
]


@needs_grep
def test_async_field_list_on_following_lines_read_by_both_prefilters(tmp_path: Path) -> None:
    log = tmp_path / "async.log"
    filler = [f"step {i} loss 2.{i:03d}" for i in range(50)]
    lines = (
        filler[:20]
        + ["torch.OutOfMemoryError: " + ASYNC_FIELDS[0], *ASYNC_FIELDS[1:], "Requested               : 99.00 GiB"]
        + filler[20:]
    )
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for how in ("grep", "python"):
        (f,) = [x for x in scan_source(Source(str(log)), PATTERNS, prefilter=how)[0]]
        gib = 1 << 30
        assert (f.kind, f.line, f.line_end) == ("capacity", 21, 27), how
        assert f.numbers["requested_bytes"] == round(10.12 * gib)
        assert (f.numbers["total_bytes"], f.numbers["free_bytes"]) == (24 * gib, 0)
        assert f.numbers["allocated_bytes"] == round(4.86 * gib)
        assert f.details["pytorch_limit_bytes"] == 1 << 64  # "no fraction set": 2**64 bytes


RANK5_MSG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has a total capacity of 79.11 GiB "
    "of which 0 bytes is free. Including non-PyTorch memory, this process has 79.10 GiB memory in use. Of the allocated "
    "memory 71.53 GiB is allocated by PyTorch, and 5.84 GiB is reserved by PyTorch but unallocated."
)


@needs_grep
@pytest.mark.parametrize("lead", ["[2025-09-24 16:15:28] [rank5]: ", "[rank5]: RuntimeError: CUDA out of m"])
def test_wrap_that_cuts_the_trigger_itself_is_seen_by_both_prefilters(tmp_path: Path, lead: str) -> None:
    """A 61-column wrap of a long prefix cuts "CUDA out of memory" over two lines, with other
    ranks' lines between the pieces; the cut head (when a trigger shows it) and the second
    literal "Tried to allocate" bring the pieces to the scanner on both paths."""
    if lead.endswith("out of m"):  # the head line holds no trigger at all: only the rest is seen
        text = lead + RANK5_MSG[len("torch.OutOfMemoryError: CUDA out of m") :]
    else:
        text = lead + RANK5_MSG
    pieces = [text[i : i + 61] for i in range(0, len(text), 61)]
    lines = [f"[rank{r}]: iteration 10 | lm loss: 2.0" for r in (0, 1, 2)]
    for k, piece in enumerate(pieces):
        lines.append(piece)
        lines += [f"[rank{r}]: iteration {11 + k} | lm loss: 2.0" for r in (3, 4)]
    log = tmp_path / "cut.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    gib = 1 << 30
    views = []
    for how in ("grep", "python"):
        found = scan_source(Source(str(log)), PATTERNS, prefilter=how)[0]
        (f,) = found
        assert f.kind == "fragmentation", how
        assert (f.numbers["requested_bytes"], f.numbers["reserved_unallocated_bytes"]) == (
            round(1.96 * gib),
            round(5.84 * gib),
        )
        views.append(_view(found))
    assert views[0] == views[1]
    if not lead.endswith("out of m"):
        assert (f.rank, f.line) == (5, 4) and "CUDA out of memory. Tried" in f.evidence


@pytest.mark.parametrize(
    "line",
    [
        "Tried to allocate 256.00 MiB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit",
        "Tried to allocate a buffer for the dataset cache",
    ],
)
def test_a_line_starting_with_the_second_literal_alone_is_no_allocator_message(tmp_path: Path, line: str) -> None:
    log = tmp_path / "other.log"
    log.write_text("step 1\n" + line + "\nstep 2\n", encoding="utf-8")
    assert [
        f.kind
        for f in scan_source(Source(str(log)), PATTERNS, prefilter="python")[0]
        if f.kind in ("fragmentation", "capacity")
    ] == []


@needs_grep
@pytest.mark.parametrize("chunk", [5, 13, 97, 4099])
def test_giant_line_trigger_split_across_output_reads_keeps_its_lead(tmp_path: Path, monkeypatch, chunk: int) -> None:
    """A giant line's trigger and the exception name before it can straddle two reads of
    grep's output; the piece kept must still hold both (it was cut after the first read)."""
    import memtune.diagnose.run as dr

    monkeypatch.setattr(grep_prefilter, "OUTPUT_CHUNK", chunk)
    monkeypatch.setattr(dr, "MAX_CARRY", 4096)
    monkeypatch.setattr("memtune.diagnose.log_reader.MAX_CARRY", 4096)
    log = tmp_path / "giant.log"
    log.write_bytes(b"x" * 9000 + b" [rank3]: RuntimeError: CUDA error: out of memory " + b"z" * 9000 + b"\n")
    found, _ = scan_source(Source(str(log)), PATTERNS, prefilter="grep")
    assert [f.kind for f in found] == ["cuda-runtime-oom"]
