"""The runtime_memory answer: one JSON document for agents, and the same facts as text for people.

The document is built once (:func:`build_document`) and the text is rendered from it, so
the two never disagree. Sizes are bytes, with a GiB companion rounded to 0.01 for the
figures people quote; shares are fractions (``*_share``, 0.25 = 25%) with a ``*_percent``
companion, so neither reader has to guess the unit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from memtune.runtime.compare import StageComparison
from memtune.runtime.model import Measurements
from memtune.runtime.verdicts import VERDICT_KINDS, RankFigures, Verdict
from memtune.units import GIB, human_bytes


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / GIB, 2)


def _percent(share: float | None) -> float | None:
    return None if share is None else round(100 * share, 1)


def rank_document(fig: RankFigures, measurements: Measurements) -> dict[str, Any]:
    rank = measurements.rank(fig.rank)
    assert rank is not None
    return {
        "rank": fig.rank,
        "peak_allocated_bytes": fig.peak_allocated_bytes,
        "peak_allocated_gib": _gib(fig.peak_allocated_bytes),
        "peak_reserved_bytes": fig.peak_reserved_bytes,
        "peak_reserved_gib": _gib(fig.peak_reserved_bytes),
        "reserved_unallocated_bytes": fig.reserved_unallocated_bytes,
        "reserved_unallocated_gib": _gib(fig.reserved_unallocated_bytes),
        "reserved_unallocated_share": None
        if fig.reserved_unallocated_share is None
        else round(fig.reserved_unallocated_share, 4),
        "reserved_unallocated_percent": _percent(fig.reserved_unallocated_share),
        "outside_pytorch_bytes": fig.outside_pytorch_bytes,
        "outside_pytorch_gib": _gib(fig.outside_pytorch_bytes),
        "device_used_bytes": fig.device_used_bytes,
        "limit_bytes": fig.limit_bytes,
        "headroom_bytes": fig.headroom_bytes,
        "headroom_gib": _gib(fig.headroom_bytes),
        "headroom_share": None if fig.headroom_share is None else round(fig.headroom_share, 4),
        "headroom_percent": _percent(fig.headroom_share),
        "last_allocated_bytes": rank.last_allocated_bytes,
        "last_reserved_bytes": rank.last_reserved_bytes,
        "inactive_split_bytes": rank.inactive_split_bytes,
        "alloc_retries": rank.alloc_retries,
        "first_iteration": fig.first_iteration,
        "last_iteration": fig.last_iteration,
        "iterations_reported": fig.iterations_reported,
        "readings_parsed": rank.readings_parsed,
        "formats": list(rank.kinds),
        "sources": list(rank.sources),
    }


def verdict_document(v: Verdict) -> dict[str, Any]:
    return {"kind": v.kind, "rank": v.rank, "severity": v.severity, "message": v.message, **v.evidence}


def comparison_document(
    rows: list[StageComparison], notes: list[str], model: str, world_size: int, pp: int
) -> dict[str, Any]:
    return {
        "model": model,
        "world_size": world_size,
        "pipeline_stages": pp,
        "stages": [
            {
                "stage": r.stage,
                "ranks": list(r.ranks),
                "estimated_allocated_bytes": r.estimated_allocated_bytes,
                "measured_allocated_bytes": r.measured_allocated_bytes,
                "measured_reserved_bytes": r.measured_reserved_bytes,
                "estimated_outside_bytes": r.estimated_outside_bytes,
                "measured_outside_bytes": r.measured_outside_bytes,
                "estimated_total_bytes": r.estimated_total_bytes,
                "model_gap_bytes": r.model_gap_bytes,
                "allocator_reserve_bytes": r.allocator_reserve_bytes,
                "outside_gap_bytes": r.outside_gap_bytes,
                "gap_bytes": r.gap_bytes,
                "explains": r.explains,
                "model_error_share": None if r.model_error_share is None else round(r.model_error_share, 4),
            }
            for r in rows
        ],
        "notes": notes,
    }


def build_document(
    measurements: Measurements,
    figs: list[RankFigures],
    verdicts: list[Verdict],
    limit_bytes: int | None,
    limit_source: str | None,
    comparison: dict[str, Any] | None = None,
    plot: str | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "inputs": [
            {
                "source": s.source,
                "formats": list(s.kinds),
                "memory_lines": s.memory_lines,
                "readings": s.readings,
                "sampled": s.sampled,
                "bytes_read": s.bytes_read,
            }
            for s in measurements.sources
        ],
        "formats": list(measurements.kinds),
        "limit_bytes": limit_bytes,
        "limit_gib": _gib(limit_bytes),
        "limit_source": limit_source,
        "ranks": [rank_document(f, measurements) for f in figs],
        "verdicts": [verdict_document(v) for v in verdicts],
        "verdict_kinds": sorted({v.kind for v in verdicts}, key=VERDICT_KINDS.index),
        "gpus": [
            {
                "gpu": g.gpu,
                "name": g.name,
                "used_bytes": g.used_bytes,
                "total_bytes": g.total_bytes,
                "processes_bytes": g.processes_bytes,
                "processes": g.processes,
                "source": g.source,
                "line": g.line,
            }
            for g in measurements.gpus
        ],
        "snapshots": [
            {
                "source": s.source,
                "device": s.device,
                "rank": s.rank,
                "segments": s.segments,
                "reserved_bytes": s.reserved_bytes,
                "allocated_bytes": s.allocated_bytes,
                "free_bytes": s.free_bytes,
                "largest_free_block_bytes": s.largest_free_block_bytes,
                "free_blocks": s.free_blocks,
                "expandable_segments": s.expandable_segments,
                "trace_entries": s.trace_entries,
                "top_allocations": [
                    {"frame": g.frame, "bytes": g.bytes, "allocations": g.allocations, "largest_bytes": g.largest_bytes}
                    for g in s.top_allocations
                ],
            }
            for s in measurements.snapshots
        ],
        "notes": list(measurements.notes),
    }
    if comparison is not None:
        doc["comparison"] = comparison
    if plot is not None:
        doc["plot"] = plot
    return doc


# ------------------------------------------------------------------------------ text


def _size(value: int | None) -> str:
    return human_bytes(value, small_digits=0, missing="-")


def _ranks_text(ranks: list[int]) -> str:
    """0,1,2,3,8 -> '0-3, 8'."""
    out: list[str] = []
    start = prev = None
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif prev is not None and r == prev + 1:
            prev = r
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def render_text(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    inputs = doc["inputs"]
    described = []
    for i in inputs:
        what = ", ".join(i["formats"]) or "nothing recognised"
        extra = f"; {i['memory_lines']} memory lines" if i["memory_lines"] else ""
        extra += ", sampled (huge log)" if i["sampled"] else ""
        described.append(f"  {i['source']}: {what}{extra}")
    lines.append(f"Read {len(inputs)} input(s):")
    lines.extend(described)
    if doc["limit_bytes"]:
        lines.append(f"Card limit: {_size(doc['limit_bytes'])} ({doc['limit_source']})")
    else:
        lines.append("Card limit: unknown (give --gpu NAME, or include nvidia-smi output) - no headroom figures")
    ranks = doc["ranks"]
    if ranks:
        lines.append("")
        lines.append("Per rank (peaks over the run):")
        lines.append(
            f"  {'rank':>5} {'allocated':>11} {'reserved':>11} {'reserved unused':>20} {'outside PyTorch':>16} "
            f"{'headroom':>17} {'iterations':>16}"
        )
        shown = ranks if len(ranks) <= 32 else sorted(ranks, key=lambda r: -(r["peak_reserved_bytes"] or 0))[:32]
        for r in sorted(shown, key=lambda r: r["rank"]):
            unused = (
                f"{_size(r['reserved_unallocated_bytes'])} ({r['reserved_unallocated_percent']:.0f}%)"
                if r["reserved_unallocated_bytes"] is not None
                else "-"
            )
            head = (
                f"{_size(r['headroom_bytes'])} ({r['headroom_percent']:.0f}%)"
                if r["headroom_bytes"] is not None
                else "-"
            )
            iters = (
                f"{r['first_iteration']}-{r['last_iteration']} ({r['iterations_reported']})"
                if r["iterations_reported"]
                else "-"
            )
            lines.append(
                f"  {r['rank']:>5} {_size(r['peak_allocated_bytes']):>11} {_size(r['peak_reserved_bytes']):>11} "
                f"{unused:>20} {_size(r['outside_pytorch_bytes']):>16} {head:>17} {iters:>16}"
            )
        if len(shown) < len(ranks):
            lines.append(f"  ({len(ranks) - len(shown)} more ranks with lower peaks: --json lists them)")
    verdicts = doc["verdicts"]
    if verdicts:
        lines.append("")
        lines.append("Verdicts:")
        by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for v in verdicts:
            by_kind[v["kind"]].append(v)
        order = {"error": 0, "warning": 1, "info": 2}
        for kind in sorted(
            by_kind, key=lambda k: (min(order[v["severity"]] for v in by_kind[k]), VERDICT_KINDS.index(k))
        ):
            group = by_kind[kind]
            ranks_of = sorted({v["rank"] for v in group if v["rank"] is not None})
            label = kind.upper()
            worst = group[0]
            if len(ranks_of) > 1:  # two readings of one rank (a snapshot and its summary) are one rank
                lines.append(f"  {label} on rank(s) {_ranks_text(ranks_of)}; e.g. {worst['message']}")
            else:
                lines.append(f"  {label}: {worst['message']}")
    for g in doc["gpus"]:
        total = f" of {_size(g['total_bytes'])}" if g["total_bytes"] else ""
        lines.append(
            f"nvidia-smi GPU {g['gpu']}{' ' + g['name'] if g['name'] else ''}: {_size(g['used_bytes'])} used{total}"
        )
    for s in doc["snapshots"]:
        lines.append("")
        lines.append(
            f"Snapshot {s['source']} (device {s['device']}): {s['segments']} segments, {_size(s['reserved_bytes'])} reserved, "
            f"{_size(s['allocated_bytes'])} allocated, {_size(s['free_bytes'])} free in {s['free_blocks']} blocks "
            f"(largest {_size(s['largest_free_block_bytes'])}), expandable segments: "
            f"{'yes' if s['expandable_segments'] else 'no' if s['expandable_segments'] is False else 'unknown'}"
        )
        if s["top_allocations"]:
            lines.append("  largest live allocations, by the frame that made them:")
            for g in s["top_allocations"]:
                lines.append(
                    f"    {_size(g['bytes']):>10} in {g['allocations']:>5} allocation(s) (largest {_size(g['largest_bytes'])})  {g['frame']}"
                )
    comparison = doc.get("comparison")
    if comparison:
        lines.append("")
        lines.append(
            f"Measured vs estimated ({comparison['model']}, {comparison['world_size']} GPUs, PP {comparison['pipeline_stages']}):"
        )
        lines.append(
            f"  {'stage':>5} {'est. alloc':>11} {'measured':>11} {'model gap':>11} {'reserve':>11} {'outside gap':>12}  explains"
        )
        for st in comparison["stages"]:
            lines.append(
                f"  {st['stage']:>5} {_size(st['estimated_allocated_bytes']):>11} {_size(st['measured_allocated_bytes']):>11} "
                f"{_size(st['model_gap_bytes']):>11} {_size(st['allocator_reserve_bytes']):>11} "
                f"{_size(st['outside_gap_bytes']):>12}  {st['explains'] or '-'}"
            )
        for note in comparison["notes"]:
            lines.append(f"  note: {note}")
    if doc["notes"]:
        lines.append("")
        lines.append("Assumed:")
        lines.extend(f"  - {n}" for n in doc["notes"])
    if doc.get("plot"):
        lines.append("")
        lines.append(f"Chart written to {doc['plot']}")
    return "\n".join(lines) + "\n"
