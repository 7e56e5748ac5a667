"""Glue: inputs -> streamed candidate lines -> findings -> report (what diagnose.py runs).

The report side (the Failure Diagnosis table parsed from SKILL.md, markdown-it) is only
imported once the first input's prefilter is running: on a big log GNU grep then reads
while this process starts up, instead of after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtune.diagnose import grep_prefilter
from memtune.diagnose.frameworks import FrameworkHits
from memtune.diagnose.log_reader import MAX_CARRY, WINDOW_LINES, Source, TextStream, candidate_lines
from memtune.diagnose.patterns import PatternSet, load_patterns
from memtune.diagnose.scan import Finding, Scanner
from memtune.diagnose.torch_era import TorchRange

if TYPE_CHECKING:
    from memtune.diagnose.table import Row


def source_lines(
    stream: TextStream, patterns: PatternSet, prefilter: str | None = None, scanner: Scanner | None = None
) -> Iterator[tuple[int, bytes, bool]]:
    """The candidate lines of one input: GNU grep for a big plain file, else the Python pass.

    ``prefilter`` ("grep" / "python") overrides the choice (tests compare the two).  The
    grep process starts here, not at the first ``next()``; given the ``scanner`` that
    consumes the lines, it stops reading a window once nothing is left to re-join.
    """
    if stream.plain_file:
        path = Path(stream.source.name)
        how = prefilter or grep_prefilter.choose(path, path.stat().st_size)
        if how == "grep":
            stream.readinto(memoryview(bytearray(64 << 10)))  # the binary-file check on the first 64 KiB
            return grep_prefilter.grep_candidate_lines(
                path,
                patterns.triggers,
                patterns.window_triggers,
                WINDOW_LINES,
                MAX_CARRY,
                wanted=scanner.wants_more if scanner is not None else None,
            )
    return candidate_lines(stream, patterns.triggers, patterns.window_triggers)


def _scan(
    stream: TextStream, lines: Iterator[tuple[int, bytes, bool]], scanner: Scanner
) -> tuple[list[Finding], dict[str, int], Scanner]:
    with stream:
        for line_no, raw, _hit in lines:
            scanner.feed(line_no, raw)
    return scanner.finish(), scanner.run_facts, scanner


def scan_source(
    source: Source, patterns: PatternSet, prefilter: str | None = None
) -> tuple[list[Finding], dict[str, int]]:
    """Findings of one input, streamed in constant memory, and the run facts it printed."""
    found, facts, _ = _scan(*_open(source, patterns, prefilter))
    return found, facts


def _open(
    source: Source, patterns: PatternSet, prefilter: str | None = None, require_text: bool = False
) -> tuple[TextStream, Iterator[tuple[int, bytes, bool]], Scanner]:
    """Start reading one input (a grep prefilter starts running here) and its scanner;
    ``require_text`` refuses an input that holds nothing but whitespace."""
    stream = TextStream(source, require_text=require_text)
    scanner = Scanner(patterns, source.label)
    try:
        return stream, source_lines(stream, patterns, prefilter, scanner), scanner
    except BaseException:
        stream.close()
        raise


def diagnose_sources(
    names: list[str],
    rows: list[Row] | None = None,
    patterns: PatternSet | None = None,
    torch_version: TorchRange | None = None,
) -> dict[str, Any]:
    """Scan every input and build the report; ``rows`` default to SKILL.md's table, and
    ``torch_version`` (--torch-version) overrides the release the message wording implies."""
    patterns = patterns or load_patterns()
    sources = [Source(n) for n in names]
    # one empty input is a mistake (a forgotten paste); an empty file among a rank's many logs is not
    first = _open(sources[0], patterns, require_text=len(sources) == 1)
    if rows is None:  # parsed while the first prefilter runs
        from memtune.diagnose import table as diagnosis_table

        rows = diagnosis_table.load_rows()
    from memtune.diagnose.report import build_report

    findings: list[Finding] = []
    facts: dict[str, dict[str, int]] = {}
    hits: dict[str, FrameworkHits] = {}
    hints: dict[str, list[str]] = {}
    for i, src in enumerate(sources):
        found, run_facts, scanner = _scan(*(first if i == 0 else _open(src, patterns)))
        label = src.label
        findings.extend(found)
        hits[label] = scanner.framework_hits
        hints[label] = sorted(scanner.hint_lines)
        if run_facts:
            facts[label] = run_facts
    labels = [s.label for s in sources]
    return build_report(
        findings, rows, patterns, labels, facts, framework_hits=hits, torch_version=torch_version, hints_seen=hints
    )
