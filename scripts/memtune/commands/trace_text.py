"""The text trace_regression.py prints for people (and agents): the measured comparison, the
configuration change priced knob by knob, and how much of the measured change the estimate
explains. The JSON documents are built in commands/trace_regression.py; this module only words
them, so the command stays one job per module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtune.units import GIB, MIB

if TYPE_CHECKING:
    from memtune.commands.trace_documents import ConfigDocument, Explanation, MeasurementDocument


def _g(value: int | None, signed: bool = False) -> str:
    """GiB with two decimals; a signed value is a change, worded by ``_change``."""
    if value is None:
        return "n/a"
    return _change(value) if signed else f"{value / GIB:.2f} GiB"


def _value(v: object) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


def render_config(doc: ConfigDocument) -> str:
    a, b = doc["a"], doc["b"]
    lines = [
        f"Estimated peak per GPU: A {_g(a['peak_bytes'])} (stage {a['peak_stage']}) -> "
        f"B {_g(b['peak_bytes'])} (stage {b['peak_stage']}): {_g(doc['delta_bytes'], signed=True)}",
        f"  A = {a['source']} ({a['kind']}); B = {b['source']} ({b['kind']})",
        "",
    ]
    if not doc["changes"]:
        lines.append("No knob the readers see differs between A and B.")
    else:
        lines.append("Each change applied alone on top of A:")
        width = max(len(c["knob"]) for c in doc["changes"])
        for c in doc["changes"]:
            what = f"{_value(c['before'])} -> {_value(c['after'])}"
            if c["status"] == "modelled":
                lines.append(f"  {c['knob']:<{width}}  {what:<28} {_g(c['delta_bytes'], signed=True):>12}")
            else:
                lines.append(f"  {c['knob']:<{width}}  {what:<28} {c['status']:>12}: {c['note']}")
        lines.append(
            f"  {'interaction':<{width}}  {'(the changes together)':<28} {_g(doc['interaction_bytes'], True):>12}"
        )
    flag_lines = {
        "mapped": "knob {knobs}",
        "no-memory-effect": "does not change memory (listed in data/)",
        "not-modelled": "NOT MODELLED: the estimator reads nothing it sets; effect unknown",
        "unreadable-alone": "cannot be read alone on top of A",
    }
    if doc.get("flags"):
        lines.append("Flags / config keys that differ in the files:")
        for f in doc["flags"]:
            before = "(absent)" if f["before"] is None else _value(f["before"])
            after = "(absent)" if f["after"] is None else _value(f["after"])
            what = flag_lines[f["status"]].format(knobs=", ".join(f["knobs"]))
            lines.append(f"  {f['flag']} {before} -> {after}: {what}")
    lines.append("")
    if doc["main_cause"]:
        top = next(c for c in doc["changes"] if c["knob"] == doc["main_cause"])
        lines.append(
            f"Largest modelled cause: {top['knob']} {_value(top['before'])} -> {_value(top['after'])} "
            f"({_g(top['delta_bytes'], signed=True)} of {_g(doc['delta_bytes'], signed=True)})."
        )
    if doc["unmodelled"]:
        lines.append(
            "Not modelled by the estimator (their effect is unknown, not zero): "
            + ", ".join(doc["unmodelled"])
            + ". A measured change beyond the estimate may come from them."
        )
    limit = doc["gpu_memory_bytes"]
    if limit:
        lines.append(
            f"GPU limit {_g(limit)}: A {'fits' if doc['fits_a'] else 'DOES NOT FIT'}, "
            f"B {'fits' if doc['fits_b'] else 'DOES NOT FIT'}."
        )
    git = doc.get("git")
    if git:
        lines.append("")
        lines.append(f"Commits in {git['range']} that changed {git['path']} (oldest first):")
        for step in git["commits"]:
            mark = "" if step["fits"] is None else ("  fits" if step["fits"] else "  OVER THE LIMIT")
            peak = _g(step["peak_bytes"]) if step["peak_bytes"] is not None else f"not estimable: {step['problem']}"
            lines.append(f"  {step['commit'][:12]} {peak}{mark}  {step['subject']}")
        crossing = git["first_over_limit"]
        if crossing:
            lines.append(f"First commit over the limit: {crossing['commit'][:12]} {crossing['subject']}")
        elif git["over_limit_at_start"]:
            lines.append("A was already over the limit at the start of the range.")
        elif limit:
            lines.append("No commit in the range goes over the limit.")
    for note in doc["notes"]:
        lines.append(note)
    return "\n".join(lines)


_FIGURE_NAMES = {
    "peak_reserved_bytes": "peak reserved",
    "peak_allocated_bytes": "peak allocated",
    "last_reserved_bytes": "last reserved",
    "last_allocated_bytes": "last allocated",
    "inactive_split_bytes": "inactive split",
    "device_used_bytes": "device used",
}


def _change(delta: int | None, base: int | None = None) -> str:
    """ "+2.89 GiB (+61.7%)", "+0.02 GiB (+16 MiB, +0.01%)": the change, in MiB too when under
    1 GiB, and as a share of A, which a percentage threshold is read against."""
    if delta is None:
        return "n/a"
    parts = [f"{delta / MIB:+.0f} MiB"] if 0 < abs(delta) < GIB else []
    if base:
        parts.append(f"{delta / base:+.2%}" if abs(delta / base) < 0.001 else f"{delta / base:+.1%}")
    return f"{delta / GIB:+.2f} GiB" + (f" ({', '.join(parts)})" if parts else "")


def render_measurement(doc: MeasurementDocument) -> str:
    a, b = doc["a"], doc["b"]
    name = _FIGURE_NAMES.get(doc["figure"], doc["figure"])
    verdict = "REGRESSED" if doc["regressed"] else "no regression"
    lines = [
        f"Measured {name}, worst rank: A {_g(a['peak_bytes'])} -> B {_g(b['peak_bytes'])}: "
        f"{_change(doc['delta_bytes'], a['peak_bytes'])} "
        f"({verdict}; threshold {_g(doc['threshold_bytes'])})",
        f"  A = {a['source']} ({', '.join(a['formats'])}); B = {b['source']} ({', '.join(b['formats'])})",
    ]
    summary = _measured_verdict(doc)
    if summary:
        lines.append(f"  verdict: {summary}")
    if doc["ranks"]:
        lines.append("")
        lines.append("Per rank (GiB, A -> B, change):")
        for r in doc["ranks"]:
            mark = "  REGRESSED" if r["regressed"] else ""
            if r["trend_b"] == "leak" and r["trend_a"] != "leak":
                mark += " - and B leaks here: allocated keeps growing after warm-up (runtime_memory.py on B)"
            cells = [
                f"{_FIGURE_NAMES[f['figure']]} {_g(f['a_bytes'])} -> {_g(f['b_bytes'])} "
                f"({_g(f['delta_bytes'], signed=True)})"
                for f in r["figures"]
                if f["figure"] in ("peak_reserved_bytes", "peak_allocated_bytes", "device_used_bytes")
            ]
            lines.append(f"  rank {r['rank']}: " + "; ".join(cells) + mark)
    for note in doc["notes"]:
        lines.append(note)
    return "\n".join(lines)


def _measured_verdict(doc: MeasurementDocument) -> str | None:
    """The comparison in one sentence: on how many ranks, whether B leaks or holds a larger
    steady working set, and the exit status a CI gate sees.

    Why: the per-rank table says all of it, but a reader (a small agent above all) answers from
    the first lines; this one names the conclusions the table supports."""
    ranks = doc["ranks"]
    status = "exit status 1 (a regression past the threshold)" if doc["regressed"] else "exit status 0 (no regression)"
    if not ranks:
        return status
    worse = [r["rank"] for r in ranks if r["regressed"]]
    leaks = [r["rank"] for r in ranks if r["trend_b"] == "leak" and r["trend_a"] != "leak"]
    if not worse:
        where = f"no rank regressed ({len(ranks)} compared)"
    elif len(worse) == len(ranks):
        where = f"regressed on every rank ({len(ranks)} of {len(ranks)})"
    else:
        where = f"regressed on rank {', '.join(str(r) for r in worse)} only ({len(worse)} of {len(ranks)} ranks)"
    if leaks:
        on = ", ".join(str(r) for r in leaks)
        trend = (
            f"B leaks on rank {on} (allocated keeps growing after warm-up): a memory snapshot of rank {on} "
            "(torch.cuda.memory._record_memory_history, then _dump_snapshot) shows what stays alive"
        )
    elif worse and all(r["trend_b"] == "stable" for r in ranks if r["regressed"]):
        trend = "B is stable over its iterations: a larger working set per step, not a leak"
    else:
        trend = ""
    return "; ".join(part for part in (where, trend, status) if part)


def render_explanation(ex: Explanation) -> str:
    measured, estimated = ex["measured_delta_bytes"], ex["estimated_delta_bytes"]
    name = _FIGURE_NAMES.get(ex["figure"], ex["figure"])
    lines = [
        f"Measured change of {name} {_g(measured, signed=True)}; the configuration change, estimated, "
        f"{_g(estimated, signed=True)}; left unexplained {_g(ex['unexplained_bytes'], signed=True)}.",
    ]
    if ex["allocator_reserve_delta_bytes"] is not None:
        lines.append(
            f"The allocator's reserve above that (peak reserved minus peak allocated) changed by "
            f"{_g(ex['allocator_reserve_delta_bytes'], signed=True)}: no knob of the estimate moves it "
            "(expandable_segments shrinks it)."
        )
    moving = [k for k in ex["knobs"] if abs(k["delta_bytes"]) >= 2**20]
    for k in moving[:8]:
        share = "" if k["share_of_measured"] is None else f" ({k['share_of_measured']:.0%} of the measured change)"
        lines.append(f"  {k['knob']}: {_g(k['delta_bytes'], signed=True)}{share}")
    if len(moving) > 8:
        lines.append(f"  ... and {len(moving) - 8} smaller")
    if ex["verdict"] == "explained":
        cause = f"; most of it from {ex['main_cause']}" if ex["main_cause"] else ""
        lines.append(f"The modelled changes account for the measured change{cause}.")
    elif ex["verdict"] == "unmodelled-candidates":
        lines.append(
            f"{_g(ex['unexplained_bytes'], signed=True)} is beyond what the modelled changes explain; changed knobs the "
            f"estimator does not model: {', '.join(ex['candidates'])} - the likely source. Confirm by measuring "
            "with only that change reverted."
        )
    elif ex["unexplained_bytes"] < 0:
        lines.append(
            "The estimate predicts more growth than was measured: the estimator overstates these knobs for this "
            "run (see estimate_memory.py on each side); the measurement is the fact."
        )
    else:
        lines.append(
            "No changed knob explains the rest: the estimator's own gap for this model (see "
            "estimate_memory.py on each side), memory outside PyTorch (nvidia-smi minus reserved), or a change "
            "the configs do not show (software versions, data)."
        )
    return "\n".join(lines)
