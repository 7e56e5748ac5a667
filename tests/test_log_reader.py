"""Streaming reader: prefixes, the prefilter window, chunk boundaries, gzip and bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtune.diagnose.log_reader import Source, candidate_lines, find_hits, read_chunks, strip_prefixes
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.scan import numbered, scan_lines
from memtune.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"


@pytest.mark.parametrize(
    "line,text,rank,host",
    [
        ("[rank3]: torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", 3, None),
        ("15: [rank15]: AssertionError: y", "AssertionError: y", 15, None),
        ("7: RuntimeError: z", "RuntimeError: z", 7, None),
        ("[1,5]<stderr>: RuntimeError: z", "RuntimeError: z", 5, None),
        ("[default2]:RuntimeError: z", "RuntimeError: z", 2, None),
        ("> > [rank0]: RuntimeError: q", "RuntimeError: q", 0, None),
        ("[2025-09-24 16:15:28] [rank1]: msg", "msg", 1, None),
        ("2025-09-24T16:15:28.123Z [rank1]: msg", "msg", 1, None),
        ("2025-09-24 16:15:28,123 msg", "msg", None, None),
        ("node-12: [rank9]: msg", "msg", 9, "node-12"),
        # Stacked labels: all peeled; PyTorch's [rankN] (global) wins over wrapper labels.
        ("rank 13: [rank13]: torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x", 13, None),
        ("[2026-11-30 02:15:19] rank 13: [rank13]: msg", "msg", 13, None),
        ("rank13: [rank13]: msg", "msg", 13, None),
        ("Rank 4: RuntimeError: z", "RuntimeError: z", 4, None),
        ("rank 7: msg", "msg", 7, None),
        ("[default5]:[rank13]: msg", "msg", 13, None),
        ("5: [default5]:[rank5]: msg", "msg", 5, None),
        ("1: [default5]: msg", "msg", 1, None),
        ("node-3: rank 2: [rank10]: msg", "msg", 10, "node-3"),
        ("[1,6]<stderr>:[rank6]: msg", "msg", 6, None),
        # Megatron's own "[Rank 13] (after 1 iterations)" is message text, not a label.
        ("rank 13: [Rank 13] (after 1 iterations) memory", "[Rank 13] (after 1 iterations) memory", 13, None),
        # A word merely starting with "rank" is not a label.
        ("ranking: msg", "ranking: msg", None, None),
        (
            "gpu003.cluster: RuntimeError: CUDA error: out of memory",
            "RuntimeError: CUDA error: out of memory",
            None,
            "gpu003.cluster",
        ),
        # An exception name is not a host prefix.
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory.",
            "torch.cuda.OutOfMemoryError: CUDA out of memory.",
            None,
            None,
        ),
        ("RuntimeError: CUDA error: out of memory", "RuntimeError: CUDA error: out of memory", None, None),
    ],
)
def test_strip_prefixes(line: str, text: str, rank: int | None, host: str | None) -> None:
    p = strip_prefixes(line)
    assert (p.text, p.rank, p.host) == (text, rank, host)


def test_eval_log_with_stacked_rank_labels_reports_rank_13() -> None:
    """The Tier-3 eval log tags every line "rank N: [rankN]:"; the OOM must come out on rank
    13, not as an anonymous "GPU 0" (the device index every rank sees)."""
    log = Path(__file__).resolve().parents[1] / "evals" / "files" / "megatron_llama3_70b_sft_rank13_oom.log"
    (f,) = scan_lines(numbered(log.read_text(encoding="utf-8")), load_patterns(), file=log.name)
    assert (f.kind, f.rank, f.source) == ("fragmentation", 13, "rank 13")


def test_find_hits_returns_line_starts_once_per_line() -> None:
    block = b"a\nxx out of memory out of memory\nb\nCUBLAS_STATUS_ALLOC_FAILED\n"
    assert find_hits(block, (b"out of memory", b"CUBLAS_STATUS_ALLOC_FAILED")) == [2, 35]


class _chunks:
    """A readinto() stream that hands out at most ``size`` bytes per call (chunk edges)."""

    def __init__(self, data, size: int) -> None:
        self.data = data if isinstance(data, bytes) else b"".join(data)
        self.size = size
        self.pos = 0

    def readinto(self, view) -> int:
        k = min(self.size, len(view), len(self.data) - self.pos)
        view[:k] = self.data[self.pos : self.pos + k]
        self.pos += k
        return k


def _kinds_lines(findings):
    return [(f.kind, f.line, f.line_end, f.rank, tuple(sorted(f.numbers.items())), f.occurrences) for f in findings]


def _corpus() -> bytes:
    """All samples (minus their metadata line) with filler between them: a realistic log."""
    parts = []
    for i, path in enumerate(sorted(SAMPLES.glob("*.txt"))):
        body = path.read_text(encoding="utf-8").splitlines()[1:]
        parts += [f"[rank{i}]: iteration {j} loss 2.{j}" for j in range(30)]
        parts += body
    return ("\n".join(parts) + "\n").encode("utf-8")


CORPUS = _corpus()


def _stream(data: bytes, size: int):
    from memtune.diagnose.scan import Scanner

    pats = load_patterns()
    sc = Scanner(pats, "x")
    for line_no, raw, _hit in candidate_lines(_chunks(data, size), pats.triggers, pats.window_triggers):
        sc.feed(line_no, raw)
    return sc.finish()


@pytest.mark.slow
def test_streaming_equals_full_scan_on_realistic_corpus() -> None:
    full = scan_lines(numbered(CORPUS.decode("utf-8")), load_patterns(), file="x")
    assert len(full) > 20
    for size in (1, 7, 64, 1000, 1 << 20):
        assert _kinds_lines(_stream(CORPUS, size)) == _kinds_lines(full), size


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(st.integers(min_value=1, max_value=5000))
def test_streaming_is_independent_of_chunk_size(size: int) -> None:
    expected = _kinds_lines(_stream(CORPUS, 1 << 20))
    assert _kinds_lines(_stream(CORPUS, size)) == expected


def test_line_numbers_survive_chunking_and_no_trailing_newline() -> None:
    data = b"x\n" * 10 + b"RuntimeError: CUDA error: out of memory"
    got = [(n, raw) for n, raw, hit in candidate_lines(_chunks(data, 3), load_patterns().triggers) if hit]
    assert got == [(11, b"RuntimeError: CUDA error: out of memory")]


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    plain = tmp_path / "a.log"
    plain.write_bytes(CORPUS)
    packed = tmp_path / "a.log.gz"
    packed.write_bytes(gzip.compress(CORPUS))
    assert b"".join(read_chunks(Source(str(packed)))) == b"".join(read_chunks(Source(str(plain)))) == CORPUS


def test_bad_inputs_raise_one_line_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        list(read_chunks(Source(str(tmp_path / "missing.log"))))
    with pytest.raises(InputError, match="is a directory"):
        list(read_chunks(Source(str(tmp_path))))
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x7fELF\x00\x00\x01" * 100)
    with pytest.raises(InputError, match="binary"):
        list(read_chunks(Source(str(binary))))
    broken = tmp_path / "cut.log.gz"
    broken.write_bytes(gzip.compress(CORPUS)[:200])
    with pytest.raises(InputError, match="decompress"):
        list(read_chunks(Source(str(broken))))


@pytest.mark.slow
def test_streaming_memory_does_not_grow_with_input_size() -> None:
    """64 MiB streamed through the reader with 1 MiB reads: traced peak stays at a few MiB."""
    import tracemalloc

    pats = load_patterns()
    line = b"[rank3]: iteration 100 | lm loss: 2.0E+00 | grad norm: 0.5 | throughput 700\n"
    chunk = line * ((1 << 20) // len(line))
    oom = b"[rank5]: RuntimeError: CUDA error: out of memory\n"

    def gen():
        for i in range(64):
            yield chunk + (oom if i == 40 else b"")

    class Gen:
        def __init__(self):
            self.it = gen()
            self.left = b""

        def readinto(self, view):
            if not self.left:
                self.left = next(self.it, b"")
            k = min(len(view), len(self.left))
            view[:k] = self.left[:k]
            self.left = self.left[k:]
            return k

    tracemalloc.start()
    hits = [
        (n, raw)
        for n, raw, hit in candidate_lines(Gen(), pats.triggers, pats.window_triggers, chunk_size=1 << 20)
        if hit
    ]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert hits == [(41 * chunk.count(b"\n") + 1, oom.rstrip(b"\n"))]
    assert peak < 6 << 20, peak  # a couple of 1 MiB buffers, not the 64 MiB streamed


def test_enormous_line_without_newline_is_cut_not_buffered(monkeypatch) -> None:
    import memtune.diagnose.log_reader as lr

    monkeypatch.setattr(lr, "MAX_CARRY", 100)
    pats = load_patterns()
    data = b"x" * 500 + b" CUDA error: out of memory " + b"y" * 500 + b"\nnext\n"
    got = [(n, hit) for n, raw, hit in candidate_lines(_chunks(data, 64), pats.triggers, pats.window_triggers) if hit]
    assert got and all(n == 1 for n, _ in got)


def test_crlf_line_endings() -> None:
    text = "a\r\nRuntimeError: CUDA error: out of memory\r\n"
    (f,) = scan_lines(numbered(text), load_patterns())
    assert (f.kind, f.line, f.evidence) == ("cuda-runtime-oom", 2, "RuntimeError: CUDA error: out of memory")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_log_from_powershell_is_read_not_refused(tmp_path: Path, encoding: str) -> None:
    text = "caf\u00e9 start\r\n[rank2]: RuntimeError: CUDA error: out of memory\r\n"
    raw = text.encode(encoding)
    if encoding == "utf-16-be":
        raw = b"\xfe\xff" + raw
    p = tmp_path / "ps.log"
    p.write_bytes(raw)
    assert b"".join(read_chunks(Source(str(p)))).decode("utf-8") == text


def test_gzip_cut_inside_its_header_is_an_input_error(tmp_path: Path) -> None:
    p = tmp_path / "cut.gz"
    p.write_bytes(gzip.compress(b"hello\n" * 1000)[:30])
    with pytest.raises(InputError, match="decompress"):
        list(read_chunks(Source(str(p))))
