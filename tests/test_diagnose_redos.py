"""Every diagnose pattern stays linear on adversarial lines (issue 16: a 64 KB line took 44 s).

The adversarial lines are built from each pattern's own text (the kinds' examples, the
triggers, the window triggers), so a pattern added to data/oom_patterns.yaml later is
fuzzed without touching this file.  The shapes are the ones that make a backtracking
engine go quadratic: the same message repeated, a prefix of it repeated (the match
starts everywhere and fails late), long digit and whitespace runs next to it.

Each adversarial line is 64 KB (the size of the report).  A linear pattern scans it in milliseconds; the
quadratic look-ahead this replaced needed minutes.  The bound below is deliberately
generous (a shared, loaded machine must not fail it) yet far below what any quadratic
pattern needs on 64 KB.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from memtune.diagnose import parse as oom_parse
from memtune.diagnose.log_reader import strip_prefixes
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.scan import numbered, scan_lines

PATTERNS = load_patterns()
LINE_BYTES = 64 << 10
SECONDS_PER_LINE = 1.0  # quadratic on 64 KB takes 10 s to minutes; linear < 0.05 s


def seeds() -> list[str]:
    """The texts patterns are made to match: every example, trigger and window trigger."""
    out = [e for info in PATTERNS.kinds.values() for e in info.examples]
    out += [t.decode("utf-8") for t in PATTERNS.triggers + PATTERNS.window_triggers]
    return sorted(set(out))


def adversarial_lines(seed: str) -> Iterator[tuple[str, str]]:
    """(shape name, ~128 KB line) for the shapes that break backtracking regexes."""
    half = seed[: max(1, len(seed) // 2)]
    shapes = {
        "repeated": seed + " ",
        "repeated-no-space": seed,
        "prefix-repeated": half,
        "all-but-last-char": seed[:-1] + " ",
        "digits-inside": re.sub(r"\d+", "9" * 40, seed) + " ",
    }
    for name, unit in shapes.items():
        yield name, (unit * (LINE_BYTES // max(1, len(unit)) + 1))[:LINE_BYTES]
    yield "digit-run-then-seed", "1" * LINE_BYTES + " " + seed
    yield "space-run-then-seed", seed + " " * LINE_BYTES + "x"
    yield "dotted-run-then-seed", "a1." * (LINE_BYTES // 3) + ": " + seed


def all_regexes() -> list[tuple[str, re.Pattern[str]]]:
    """Every regex diagnose runs on a line: detectors, their number readers, run facts,
    the allocator-message parser."""
    out = []
    for i, det in enumerate(PATTERNS.detectors):
        out.append((f"detector {i} ({det.kind or 'allocator'})", det.regex))
        if det.numbers is not None:
            out.append((f"numbers of {det.kind}", det.numbers))
    out += [(f"context {i}", rx) for i, rx in enumerate(PATTERNS.context)]
    out += [(f"oom_parse {name}", rx) for name, rx in oom_parse.REGEXES.items()]
    return out


CASES = [(seed, shape, line) for seed in seeds() for shape, line in adversarial_lines(seed)]


@pytest.mark.slow
@pytest.mark.parametrize("name,rx", all_regexes(), ids=[n for n, _ in all_regexes()])
def test_each_regex_is_linear_on_every_adversarial_line(name: str, rx: re.Pattern[str]) -> None:
    for seed, shape, line in CASES:
        t0 = time.perf_counter()
        rx.search(line)
        took = time.perf_counter() - t0
        assert took < SECONDS_PER_LINE, f"{name} took {took:.1f} s on a {shape} line of {seed[:60]!r}"


@pytest.mark.slow
def test_whole_scanner_is_linear_on_every_adversarial_line() -> None:
    """Prefix stripping, detection, re-joining and number parsing together, per line."""
    for seed, shape, line in CASES:
        t0 = time.perf_counter()
        scan_lines(numbered(f"[rank5]: {line}\n{line}\n"), PATTERNS)
        strip_prefixes(line)
        took = time.perf_counter() - t0
        assert took < 2 * SECONDS_PER_LINE, f"scanner took {took:.1f} s on a {shape} line of {seed[:60]!r}"


def test_the_reported_line_is_still_diagnosed() -> None:
    """128 KB of one repeated OOM message: one finding, with the message's numbers."""
    msg = PATTERNS.kinds["capacity"].examples[0]
    (f,) = scan_lines(numbered(" ".join([msg] * (LINE_BYTES // len(msg))) + "\n"), PATTERNS)
    assert f.kind == "capacity" and f.numbers["requested_bytes"] == 786 << 20


def test_an_overlong_line_is_cut_around_its_trigger_not_at_its_start() -> None:
    from memtune.diagnose.scan import MAX_LINE_CHARS

    line = (
        "x" * (4 * MAX_LINE_CHARS)
        + " [torch_memory_saver.cpp] RuntimeError: CUDA error: out of memory "
        + "y" * (4 * MAX_LINE_CHARS)
    )
    (f,) = scan_lines(numbered(line + "\n"), PATTERNS)
    assert f.kind == "cuda-runtime-oom" and len(f.evidence) <= 600
