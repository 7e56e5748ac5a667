"""Glue: inputs -> streamed candidate lines -> findings -> report (what diagnose.py runs)."""

from __future__ import annotations

from typing import Any

from memtune.diagnosis_table import Row
from memtune.frameworks import FrameworkHits
from memtune.log_reader import Source, TextStream, candidate_lines
from memtune.oom_patterns import PatternSet, load_patterns
from memtune.oom_report import build_report
from memtune.oom_scan import Finding, Scanner
from memtune.torch_era import TorchRange


def scan_source(source: Source, patterns: PatternSet) -> tuple[list[Finding], dict[str, int], Scanner]:
    """Findings of one input, streamed in constant memory, the run facts it printed, and the
    scanner (framework signals and evidence hints it saw)."""
    label = "<stdin>" if source.is_stdin else source.name
    scanner = Scanner(patterns, label)
    with TextStream(source) as stream:
        for line_no, raw, _hit in candidate_lines(stream, patterns.triggers, patterns.window_triggers):
            scanner.feed(line_no, raw)
    return scanner.finish(), scanner.run_facts, scanner


def diagnose_sources(
    names: list[str], rows: list[Row], patterns: PatternSet | None = None, torch_version: TorchRange | None = None
) -> dict[str, Any]:
    patterns = patterns or load_patterns()
    sources = [Source(n) for n in names]
    findings: list[Finding] = []
    facts: dict[str, dict[str, int]] = {}
    hits: dict[str, FrameworkHits] = {}
    hints: dict[str, list[str]] = {}
    for src in sources:
        found, run_facts, scanner = scan_source(src, patterns)
        label = "<stdin>" if src.is_stdin else src.name
        findings.extend(found)
        hits[label] = scanner.framework_hits
        hints[label] = sorted(scanner.hint_lines)
        if run_facts:
            facts[label] = run_facts
    labels = ["<stdin>" if s.is_stdin else s.name for s in sources]
    return build_report(
        findings, rows, patterns, labels, facts, framework_hits=hits, torch_version=torch_version, hints_seen=hints
    )
