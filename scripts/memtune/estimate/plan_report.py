"""Turn a :class:`memtune.estimate.planner.Plan` into the JSON document and the text report.

Both outputs carry the same content (the JSON is what agents parse; the text is what a
person reads): the current run's estimate, the ranked changes that fit with their
throughput cost and its evidence, the first step spelled out as the exact change, the
closest candidates with what blocks them when nothing fits, and the rejections with the
constraint that rules each one out.

The JSON shape is defined, field by field with units, by
``data/schemas/output/plan_memory.schema.json`` (rendered in references/json-output.md);
tests validate real output against it, so a field added here must be documented there.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from memtune.estimate.planner import EXPANDABLE_ENV, Evaluated, Plan, exact_change, fragmentation_note
from memtune.estimate.throughput_cost import Cost
from memtune.units import GIB

if TYPE_CHECKING:  # the ladder module builds on the planner; only its result type is needed here
    from memtune.estimate.ladder import Ladder

#: Text output wraps long lines (evidence, reasons, notes) at this width for people;
#: the JSON keeps every string whole.
WRAP = 100


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f} GiB"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _change(cost: Cost | None) -> float | None:
    """The throughput change for the JSON row: None when the cost is unknown (no number
    from a measurement or an estimate), so no reader mistakes the placeholder for +0.0%."""
    if cost is None or not cost.known:
        return None
    return round(cost.change, 4)


def _throughput_text(row: dict[str, Any]) -> str:
    """'+0.8%'; 'unknown' when nothing is priced; '+7.3% + ?' when only part of it is."""
    if row.get("evidence_kind") != "unknown":
        return pct(row["throughput_change"])
    modelled = row.get("throughput_change_modelled") or 0.0
    return "unknown" if abs(modelled) < 0.0005 else f"{pct(modelled)} + ?"


def _row(plan: Plan, e: Evaluated, rank: int | None = None) -> dict[str, Any]:
    s = plan.settings
    row: dict[str, Any] = {
        "change": e.candidate.title,
        "category": e.candidate.category,
        "layout": layout(e),
        "peak_bytes": e.peak_bytes,
        "headroom_bytes": e.headroom(s),
        "fits": e.fits,
        "throughput_change": _change(e.cost),  # None = unknown (see evidence_kind)
        "throughput_change_modelled": None if e.cost is None else round(e.cost.change, 4),
        "evidence_kind": None if e.cost is None else e.cost.kind,
        "evidence": [] if e.cost is None else list(e.cost.evidence),
        "evidence_details": [] if e.cost is None else list(e.cost.details),
        "exact_change": exact_change(plan.base, e.candidate),
    }
    if rank is not None:
        row = {"rank": rank, **row}
    return row


def layout(e: Evaluated) -> str:
    r = e.candidate.run
    parts = [f"TP{r.tp}", f"PP{r.pp}"]
    if r.vpp_chunks > 1:
        parts.append(f"VPP{r.vpp_chunks}")
    if r.cp > 1:
        parts.append(f"CP{r.cp}")
    if r.ep > 1:
        parts.append(f"EP{r.ep}")
    if r.etp and r.etp != r.tp:
        parts.append(f"ETP{r.etp}")
    parts.append(f"DP{r.dp}")
    return " ".join(parts)


def blocked_by(plan: Plan, e: Evaluated) -> str:
    over = (e.peak_bytes or 0) - plan.settings.limit_bytes
    return f"{gib(over)} over the limit ({gib(plan.settings.limit_bytes)} = GPU memory minus headroom)"


def ladder_json(ladder: Ladder) -> dict[str, Any]:
    """The cumulative ladder (memtune.estimate.ladder.Ladder) as a JSON object."""
    rungs = []
    for i, r in enumerate(ladder.rungs):
        cost = r.step_cost
        rungs.append(
            {
                "step": i + 1,
                "change": r.title,
                "category": r.category,
                "why": r.why,
                "peak_bytes": r.peak_bytes,
                "saved_bytes": r.saved_bytes,
                "headroom_bytes": ladder.gpu_memory_bytes - r.peak_bytes,
                "fits": r.peak_bytes <= ladder.limit_bytes,
                "throughput_change": _change(cost),
                "throughput_change_modelled": round(cost.change, 4),
                "evidence_kind": cost.kind,
                "cumulative_throughput_change": None
                if r.cumulative_kind == "unknown"
                else round(r.cumulative_change, 4),
                "cumulative_throughput_change_modelled": round(r.cumulative_change, 4),
                "cumulative_evidence_kind": r.cumulative_kind,
                "evidence": list(cost.evidence),
                "evidence_details": list(cost.details),
                "exact_change": r.exact_change(),
            }
        )
    return {
        "fits": ladder.fits,
        "start_peak_bytes": ladder.base_peak_bytes,
        "final_peak_bytes": ladder.final_peak_bytes,
        "limit_bytes": ladder.limit_bytes,
        "throughput_change": None if ladder.total_kind == "unknown" else round(ladder.total_change, 4),
        "throughput_change_modelled": round(ladder.total_change, 4),
        "evidence_kind": ladder.total_kind,
        "rungs": rungs,
        "estimates": ladder.estimates,
        "notes": list(ladder.notes),
    }


def _verdict(plan: Plan) -> dict[str, Any] | None:
    """The current run's fit, by estimate_memory's policy with the planner's headroom as the band."""
    from memtune.estimate.verdict import fit_verdict

    s, peak = plan.settings, plan.baseline.peak_bytes
    if peak is None or s.gpu_memory_bytes <= 0:
        return None
    return fit_verdict(peak, s.gpu_memory_bytes, band_share=s.headroom_bytes / s.gpu_memory_bytes).to_json()


def to_json(
    plan: Plan, top: int, input_notes: list[str] | tuple[str, ...] = (), ladder: Ladder | None = None
) -> dict[str, Any]:
    s = plan.settings
    best = plan.best
    doc: dict[str, Any] = {
        "model": plan.model.name,
        "gpus": plan.base.world_size,
        "gpu_memory_bytes": s.gpu_memory_bytes,
        "headroom_bytes": s.headroom_bytes,
        "limit_bytes": s.limit_bytes,
        "current": {
            "layout": layout(plan.baseline),
            "recompute": plan.base.recompute,
            "peak_bytes": plan.baseline.peak_bytes,
            "headroom_bytes": plan.baseline.headroom(s),
            "fits": plan.baseline.fits,
            "verdict": _verdict(plan),
            "expandable_segments": s.expandable_segments,
        },
        "nothing_fits": best is None and not (ladder is not None and ladder.fits),
        "ladder": None if ladder is None else ladder_json(ladder),
        "ranked": [_row(plan, e, i + 1) for i, e in enumerate(plan.ranked[:top])],
        "ranked_total": len(plan.ranked),
        "recommendation": None,
        "combined": [_row(plan, e, i + 1) for i, e in enumerate(plan.combined[:top])],
        "closest": [{**_row(plan, e), "blocked_by": blocked_by(plan, e)} for e in plan.not_fitting[:top]],
        "rejected": [
            {"change": e.candidate.title, "category": e.candidate.category, "reasons": list(e.rejected)}
            for e in plan.rejected
        ],
        "no_saving": [e.candidate.title for e in plan.no_saving],
        "dominated": [{"change": d.title, "instead": d.instead} for d in plan.dominated],
        "notes": [*input_notes, *notes(plan)],
        "evaluated": plan.evaluated,
        "seconds": round(plan.seconds, 4),
    }
    first = ladder.rungs[0] if ladder is not None and ladder.fits and ladder.rungs else None
    if first is not None:  # the ladder is the answer: its first rung is the first step
        cost = first.step_cost
        doc["recommendation"] = {
            "change": first.title,
            "source": "ladder",
            "exact_change": first.exact_change(),
            "throughput_change": _change(cost),
            "throughput_change_modelled": round(cost.change, 4),
            "evidence_kind": cost.kind,
            "peak_bytes": first.peak_bytes,
            "headroom_bytes": s.gpu_memory_bytes - first.peak_bytes,
        }
    elif best is not None:
        doc["recommendation"] = {
            "change": best.candidate.title,
            "source": "table",
            "exact_change": exact_change(plan.base, best.candidate),
            "throughput_change": _change(best.cost),
            "throughput_change_modelled": round(best.cost.change, 4) if best.cost else None,
            "evidence_kind": best.cost.kind if best.cost else None,
            "peak_bytes": best.peak_bytes,
            "headroom_bytes": best.headroom(s),
        }
    return doc


def notes(plan: Plan) -> list[str]:
    out = [
        "memory figures come from estimate_memory.py's model (tensors plus CUDA/NCCL overhead of the most-loaded "
        "GPU, allocator fragmentation excluded); throughput figures from data/throughput_costs.yaml, "
        "labelled measured / calibrated / first-principles / assumption, or unknown when no measurement or "
        "estimate prices (part of) a change - shown as 'unknown' or '+x% + ?', never as +0.0%, and ranked after "
        "priced changes of the same size; a speed-up resting on an assumption or unknown is shown but ranked as 0%"
    ]
    if plan.baseline.fits:
        out.append(
            f"the estimate says the current configuration fits ({gib(plan.baseline.peak_bytes)} of "
            f"{gib(plan.settings.limit_bytes)} allowed): if it still runs out of memory, the gap is allocator "
            "fragmentation, which expandable segments removes at no throughput cost"
        )
    if any(e.candidate.expandable for e in plan.ranked):
        out.append(fragmentation_note())
    elif not plan.baseline.fits and plan.settings.expandable_segments is not True:
        out.append(
            f"also set {EXPANDABLE_ENV} (free): it cannot fix a capacity shortfall, but it lowers the "
            "allocator's reserve (7.1% -> 3.1% of the allocated peak measured on an H200) and its fragmentation"
        )
    if plan.combined:
        out.append("no single change fits: the combined rows come from the full sweep of every combination")
    if not plan.ranked and not plan.combined:
        out.append(
            "nothing fits at this GPU count: the closest candidates and what blocks them are listed; "
            "more GPUs, a shorter sequence or a smaller global batch are the remaining levers"
        )
    return out


def _table(rows: list[dict[str, Any]], with_rank: bool = True) -> list[str]:
    header = ("#", "change", "layout", "est. peak/GPU", "headroom", "throughput", "evidence")
    body = []
    for r in rows:
        body.append(
            (
                str(r.get("rank", "")),
                r["change"],
                r["layout"],
                gib(r["peak_bytes"]),
                gib(r["headroom_bytes"]),
                _throughput_text(r),
                r["evidence_kind"] or "-",
            )
        )
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header)] + [fmt.format(*b) for b in body]


def wrap(text: str, indent: str, first: str | None = None) -> list[str]:
    """``text`` wrapped at :data:`WRAP` columns: ``first`` (default ``indent``) before the
    first line, ``indent`` before the rest, so long evidence stays readable in a terminal."""
    return textwrap.wrap(
        text,
        width=WRAP,
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]


def ladder_text(lad: dict[str, Any]) -> list[str]:
    """The ladder as a table, then each rung's exact change, reason and evidence."""
    total = _throughput_text(
        {
            "evidence_kind": lad["evidence_kind"],
            "throughput_change": lad["throughput_change"],
            "throughput_change_modelled": lad["throughput_change_modelled"],
        }
    )
    verdict = "fits" if lad["fits"] else "still does NOT fit"
    lines = [
        f"Ladder - apply in order (est. {gib(lad['start_peak_bytes'])} -> {gib(lad['final_peak_bytes'])}, "
        f"limit {gib(lad['limit_bytes'])}: {verdict}; throughput {total} in total, {lad['evidence_kind']}):"
    ]
    header = ("#", "change", "saves", "est. peak/GPU", "step", "cumulative", "evidence")
    body = []
    for r in lad["rungs"]:
        cumulative = {
            "evidence_kind": r["cumulative_evidence_kind"],
            "throughput_change": r["cumulative_throughput_change"],
            "throughput_change_modelled": r["cumulative_throughput_change_modelled"],
        }
        body.append(
            (
                str(r["step"]),
                r["change"],
                gib(r["saved_bytes"]) if r["saved_bytes"] else "-",
                gib(r["peak_bytes"]),
                _throughput_text(r),
                _throughput_text(cumulative),
                r["evidence_kind"],
            )
        )
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines += ["  " + fmt.format(*header).rstrip()] + ["  " + fmt.format(*b).rstrip() for b in body]
    for r in lad["rungs"]:
        lines.append(f"  [{r['step']}] {r['change']}")
        ex = r["exact_change"]
        for key, title in (("env", "env"), ("python", "Python")):  # one statement per line
            lines += [f"      {title}: {x}" for x in ex[key]]
        for key, title in (("bridge_overrides", "Bridge"), ("megatron_args", "Megatron-LM")):
            if ex[key]:  # space-separated, as they go on a command line
                lines += wrap(" ".join(ex[key]), " " * 8, f"      {title}: ")
        lines += wrap(r["why"], " " * 8, "      why: ")
        lines += wrap("; ".join(r["evidence"]), " " * 8, "      evidence: ")
    for note in lad["notes"]:
        lines += wrap(note, "    ", "  - ")
    return lines


def to_text(plan: Plan, top: int, input_notes: list[str] | tuple[str, ...] = (), ladder: Ladder | None = None) -> str:
    doc = to_json(plan, top, input_notes, ladder)
    s = plan.settings
    cur = doc["current"]
    lines = [
        f"{doc['model']} on {doc['gpus']} GPUs: {cur['layout']}, MBS {plan.base.mbs}, GBS {plan.base.global_batch}, "
        f"seq {plan.base.seq_length}, recompute {cur['recompute']}",
        f"GPU memory {gib(s.gpu_memory_bytes)}, headroom {gib(s.headroom_bytes)} -> limit {gib(s.limit_bytes)} per GPU",
        f"current: est. peak {gib(cur['peak_bytes'])} per GPU -> "
        + (
            "fits by estimate"
            if cur["fits"]
            else f"does NOT fit ({gib(-(cur['headroom_bytes'] or 0) + s.headroom_bytes)} over the limit)"
        ),
        "",
    ]
    if doc["ladder"] is not None and doc["ladder"]["rungs"]:
        lines += ladder_text(doc["ladder"]) + [""]
    if doc["ranked"]:
        lines.append(f"Changes that fit, lowest throughput cost first ({len(doc['ranked'])} of {doc['ranked_total']}):")
        lines += ["  " + x for x in _table(doc["ranked"])]
    elif doc["combined"]:
        lines.append("No single change fits. Combinations that fit (full sweep), lowest throughput cost first:")
        lines += ["  " + x for x in _table(doc["combined"])]
    else:
        lines.append("Nothing fits at this GPU count. Closest candidates and what blocks them:")
        for r in doc["closest"]:
            lines += wrap(
                f"{r['change']} ({r['layout']}): est. {gib(r['peak_bytes'])}, {r['blocked_by']}", "    ", "  - "
            )
    rec = doc["recommendation"]
    if rec:
        lines += [
            "",
            f"Recommended first step: {rec['change']} "
            f"(est. {gib(rec['peak_bytes'])}, throughput {_throughput_text(rec)})",
        ]
        ex = rec["exact_change"]
        for key, title in (
            ("env", "environment"),
            ("bridge_overrides", "Megatron Bridge overrides"),
            ("megatron_args", "Megatron-LM flags"),
            ("python", "Python"),
        ):
            if ex[key]:
                lines.append(f"  {title}:")
                lines += [f"    {x}" for x in ex[key]]
    shown = doc["ranked"] or doc["combined"]
    if shown:
        lines += ["", "Where the throughput numbers come from:"]
        for r in shown:
            lines += wrap(f"[{r['rank']}] {r['change']}: " + "; ".join(r["evidence"]), "      ", "  ")
    if doc["rejected"]:
        lines += ["", "Rejected (Megatron would refuse to start, or the change has no effect):"]
        for r in doc["rejected"]:
            lines += wrap(f"{r['change']}: " + "; ".join(r["reasons"]), "    ", "  - ")
    if doc["no_saving"]:
        lines += [
            "",
            "Legal, but not memory fixes (they raise the peak or save too little; a VPP change alone must save 4%):",
        ]
        lines += wrap("; ".join(doc["no_saving"]), "    ", "  - ")
    if doc["dominated"]:
        lines += ["", "Left out (a cheaper recompute setting saves as much memory):"]
        for d in doc["dominated"]:
            lines += wrap(f"{d['change']}: take {d['instead']} instead", "    ", "  - ")
    if doc["notes"]:
        lines += ["", "Notes:"]
        for n in doc["notes"]:
            lines += wrap(n, "    ", "  - ")
    lines.append(f"\n({doc['evaluated']} configurations evaluated in {doc['seconds'] * 1000:.0f} ms)")
    return "\n".join(lines)
