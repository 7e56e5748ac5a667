"""Findings + the Failure Diagnosis table -> the report (JSON document and human text).

Order matters because an agent (and a reader) acts on the first finding.  Findings come
in tiers, the tens digit of each kind's priority (data/oom_patterns.yaml): configuration
errors first (they stop the run before anything can run out of memory), then allocator
OOMs (they carry the numbers to act on), then driver/cuBLAS/NCCL OOMs (usually the echo of
the same shortage, without numbers), the last-resort kind and host (CPU RAM) OOM kills (a
kill in a log that also shows a GPU failure is most often that failure's teardown), the
deprecation warning last.
Within a tier the first failure in the log leads (inputs in the order given, then line):
when several ranks run out of memory, the first to fail is the one a reader takes as the
primary failure, and the later ones usually fail in the same step or as its consequence
(a collective waiting on the dead rank, the same batch on a sibling).  Which GPU was
tightest is a separate question, answered by the summary's ``tightest``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from memtune.diagnose import advice as oom_advice
from memtune.diagnose import torch_era
from memtune.diagnose.evidence import load_evidence
from memtune.diagnose.frameworks import Framework, FrameworkHits, load_frameworks
from memtune.diagnose.parse import format_bytes
from memtune.diagnose.patterns import ALLOCATOR_KINDS, PatternSet
from memtune.diagnose.scan import Finding
from memtune.diagnose.symptom_route import RouteMatch
from memtune.diagnose.table import Match, Row, row_for_kind
from memtune.diagnose.torch_era import TorchRange
from memtune.units import GIB

NO_FINDING = "no memory-related failure found"
WARNING_KINDS = frozenset({"alloc-conf-deprecated"})


def shortfall(f: Finding) -> int:
    """Bytes the allocator was short by (request - idle reserve); larger is worse."""
    req = f.numbers.get("requested_bytes")
    if req is None:
        return -1
    idle = f.numbers.get("reserved_unallocated_bytes") or 0
    return req - idle


def drop_last_resort(findings: list[Finding], patterns: PatternSet) -> list[Finding]:
    """Leave out last-resort findings (unrecognized wording) of an input that also holds a
    recognized GPU memory failure.

    Why: pasted threads carry the user's own words ("why does it go OOM on GPU 1?") and
    wrappers (Ray's ``RayTaskError(OutOfMemoryError)``) around the real message; once that
    message is understood, the unrecognized line only repeats it without numbers and asks
    for a log the user already gave.
    """
    known = {f.file for f in findings if patterns.kinds[f.kind].gpu_memory_failure}
    return [f for f in findings if not (patterns.kinds[f.kind].last_resort and f.file in known)]


def drop_consequent_kills(findings: list[Finding], patterns: PatternSet) -> list[Finding]:
    """Leave out bare SIGKILLs (``signal_only``: torchrun's exitcode -9, a "Killed" line) of
    an input that also holds a GPU memory failure.

    Why: when one rank runs out of GPU memory, the launcher tears the job down and the other
    ranks (or the failed one, if it hangs) end with SIGKILL; those exits are consequences,
    and read as a host OOM they would send the reader to the wrong memory.  A kill the OOM
    killer itself reports (kernel, Slurm cgroup, Ray, OOMKilled) is kept: it is evidence.
    """
    gpu = {f.file for f in findings if patterns.kinds[f.kind].gpu_memory_failure}
    return [f for f in findings if not (f.signal_only and f.file in gpu)]


def drop_numberless_echoes(findings: list[Finding]) -> list[Finding]:
    """Leave out an allocator message that states no number at all when the same input
    holds the full message from the same source.

    Why: an issue's title, a pytest summary line or a re-raise repeats "CUDA out of memory"
    without its numbers; on its own it is an undecided capacity call, and listed first (it
    sorts as capacity) it would hide the fragmentation verdict of the full message below.
    A numberless line with no rank echoes any full message of the input; one from rank N
    only a full message of rank N, so another rank's failure is never dropped.
    """

    def allocator(f: Finding) -> bool:
        return f.torch is not None  # only the allocator parser dates a message

    def numberless(f: Finding) -> bool:
        return all(v is None for v in f.numbers.values())

    full = {(f.file, f.rank, f.host) for f in findings if allocator(f) and not numberless(f)}
    files = {key[0] for key in full}

    def echo(f: Finding) -> bool:
        if not (allocator(f) and numberless(f)):
            return False
        if f.rank is None and f.host is None:
            return f.file in files
        return (f.file, f.rank, f.host) in full

    return [f for f in findings if not echo(f)]


def with_stated_device(f: Finding) -> Finding:
    """A GPU index a detector read from the wording (``numbers`` group ``device``, as in
    "Allocation on device 0 would exceed allowed memory") is the finding's device, not a detail.

    Why here: the scanner fills ``device`` from the allocator message and NCCL's prefix only;
    every other wording reports what it names through ``details``.
    """
    if f.device is not None or "device" not in f.details:
        return f
    details = {k: v for k, v in f.details.items() if k != "device"}
    return replace(f, device=f.details["device"], details=details)


def tier(f: Finding, patterns: PatternSet) -> int:
    """The finding's tier: the tens digit of its kind's priority (see the module doc)."""
    return patterns.kinds[f.kind].priority // 10


def order_findings(findings: list[Finding], patterns: PatternSet, inputs: list[str] | None = None) -> list[Finding]:
    """Tier first, then log order (input, line) within a tier; see the module doc for why."""
    position = {name: i for i, name in enumerate(inputs or ())}

    def key(f: Finding) -> tuple[int, int, str, int, int]:
        return (tier(f, patterns), position.get(f.file, len(position)), f.file, f.line, patterns.kinds[f.kind].priority)

    return sorted(findings, key=key)


def tightest(ordered: list[Finding]) -> Finding | None:
    """Of several allocator OOMs with numbers, the one on the tightest GPU: the largest
    shortfall (request minus idle reserve), then the least free memory; None with fewer
    than two (nothing to compare)."""
    stated = [f for f in ordered if f.kind in ALLOCATOR_KINDS and f.numbers.get("requested_bytes") is not None]
    if len(stated) < 2:
        return None

    def key(f: Finding) -> tuple[int, int, int]:
        free = f.numbers.get("free_bytes")
        return (-shortfall(f), free if free is not None else 1 << 62, f.line)

    return min(stated, key=key)


def layout_facts(facts: dict[str, int]) -> dict[str, int]:
    """The parallel layout among a log's run facts (the stated PyTorch release is not one)."""
    return {k: v for k, v in facts.items() if not k.startswith("torch_")}


def parallel_flags(facts: dict[str, int]) -> str:
    """``--tp 4 --pp 4 --cp 1 --gpus 32`` from what the log said, placeholders otherwise."""
    if not facts:
        return "--tp TP --pp PP --gpus N"
    names = (("tp", "--tp"), ("pp", "--pp"), ("cp", "--cp"), ("gpus", "--gpus"))
    return " ".join(f"{flag} {facts[key]}" for key, flag in names if key in facts)


def gpu_memory_flag(total_bytes: int | None) -> str:
    """The device size the OOM message printed, in the estimator's GiB syntax."""
    if total_bytes is None:
        return "GPU_GiB"
    return f"{total_bytes / GIB:.2f}GiB"


def next_step(f: Finding, patterns: PatternSet, facts: dict[str, int], total_bytes: int | None) -> str:
    template = patterns.kinds[f.kind].next_step
    return template.replace("{parallel}", parallel_flags(layout_facts(facts))).replace(
        "{gpu_memory}", gpu_memory_flag(total_bytes)
    )


def finding_json(
    f: Finding,
    row: Row,
    patterns: PatternSet,
    facts: dict[str, int] | None = None,
    total_bytes: int | None = None,
    framework: Framework | None = None,
    torch_version: TorchRange | None = None,
) -> dict[str, Any]:
    fw = framework or load_frameworks().default
    rng = torch_version or torch_era.with_stated(f.torch or TorchRange(), torch_era.stated_version(facts))
    step = next_step(f, patterns, facts or {}, total_bytes)
    verdict = oom_advice.judge(f, fw, load_evidence(), rng, step)
    applies = table_fix_applies(f, fw, verdict.torch["expandable_segments"])
    if applies is False and verdict.actions:
        # The table's generic fix (expandable segments, plan_memory.py) does not fit this
        # release or stack: the next step is the fitted action instead.
        step = verdict.actions[0]
        if f.kind == "fragmentation":
            version = verdict.torch["version"] or "X.Y"
            step = f"python3 scripts/check_env.py --env --torch-version {version} (judges the allocator setting for this release); then: {step}"
    doc: dict[str, Any] = {
        "kind": f.kind,
        "cause": row.cause_md,
        "confirm": row.confirm_md,
        "fix": row.fix_md,
        "symptom": row.symptom_md,
        "evidence": f.evidence,
        "line": f.line,
        "line_end": f.line_end,
        "file": f.file,
        "rank": f.rank,
        "device": f.device,
        "host": f.host,
        "pid": f.pid,
        "source": f.source,
        "numbers": dict(f.numbers),
        "occurrences": f.occurrences,
        "next_step": step,
        "table_fix_applies": applies,
        "framework": fw.name,
        "advice": list(verdict.actions),
        "evidence_notes": [{"code": n.code, "text": n.text} for n in verdict.notes],
        "confidence": {"level": verdict.confidence, "why": verdict.confidence_why},
        "torch": verdict.torch,
    }
    if f.details:
        doc["details"] = dict(f.details)
    if f.note:
        doc["note"] = f.note
    return doc


def summarize(ordered: list[Finding]) -> dict[str, Any]:
    """Across ranks: how many sources failed, the first (``worst``, the key kept for
    compatibility), the tightest GPU, and whether all agree."""
    failures = [f for f in ordered if f.kind not in WARNING_KINDS]
    sources = sorted({f.source for f in failures})
    kinds: dict[str, int] = {}
    for f in failures:
        kinds[f.kind] = kinds.get(f.kind, 0) + f.occurrences
    worst = failures[0] if failures else None
    tight = tightest(failures)
    ranks = sorted({f.rank for f in failures if f.rank is not None})
    return {
        "failures": sum(f.occurrences for f in failures),
        "sources_failed": len(sources),
        "sources": sources,
        "ranks_failed": len(ranks),
        "ranks": ranks,
        "worst": None
        if worst is None
        else {"source": worst.source, "kind": worst.kind, "file": worst.file, "line": worst.line},
        "tightest": None
        if tight is None
        else {
            "source": tight.source,
            "device": tight.device,
            "kind": tight.kind,
            "file": tight.file,
            "line": tight.line,
            "free_bytes": tight.numbers.get("free_bytes"),
            "shortfall_bytes": shortfall(tight),
        },
        "same_kind": len(kinds) == 1 if kinds else None,
        "kinds": kinds,
        "warnings": sum(f.occurrences for f in ordered if f.kind in WARNING_KINDS),
    }


def table_fix_applies(f: Finding, fw: Framework, expandable: str) -> bool | None:
    """Does the Failure Diagnosis row's Fix cell fit this run (None: cannot tell)?

    The row is written for Megatron on a current PyTorch: expandable segments for
    fragmentation, plan_memory.py for capacity.
    """
    if f.kind == "fragmentation":
        return expandable in ("accepted", "unknown")
    if f.kind == "capacity":
        if fw.in_megatron:
            return True
        return None if fw.name is None else False
    return True


def decide_frameworks(
    findings: list[Finding], hits: dict[str, FrameworkHits], inputs: list[str]
) -> dict[str, tuple[Framework, list[str], str]]:
    """Per input: (Framework, matched signals, reason)."""
    fws = load_frameworks()
    out = {}
    for name in inputs:
        kinds = {f.kind for f in findings if f.file == name}
        out[name] = fws.decide(hits.get(name) or FrameworkHits(), kinds)
    return out


def build_report(
    findings: list[Finding],
    rows: list[Row],
    patterns: PatternSet,
    inputs: list[str],
    facts: dict[str, dict[str, int]] | None = None,
    framework_hits: dict[str, FrameworkHits] | None = None,
    torch_version: TorchRange | None = None,
    hints_seen: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    facts = facts or {}
    kept = drop_consequent_kills(drop_last_resort(findings, patterns), patterns)
    kept = [with_stated_device(f) for f in drop_numberless_echoes(kept)]
    ordered = order_findings(kept, patterns, inputs)
    table = {kind: row_for_kind(rows, kind, info.table_key) for kind, info in patterns.kinds.items()}
    # The GPU size any allocator message of the same file printed (all ranks share a type).
    totals = {f.file: f.numbers["total_bytes"] for f in reversed(ordered) if f.numbers.get("total_bytes")}
    frameworks = decide_frameworks(ordered, framework_hits or {}, inputs)
    return {
        "findings": [
            finding_json(
                f,
                table[f.kind],
                patterns,
                facts.get(f.file),
                f.numbers.get("total_bytes") or totals.get(f.file),
                frameworks[f.file][0] if f.file in frameworks else None,
                torch_version,
            )
            for f in ordered
        ],
        "summary": summarize(ordered),
        "run": {name: layout for name, layout in ((n, layout_facts(v)) for n, v in facts.items()) if layout},
        "frameworks": {name: fw.as_json(matched, why) for name, (fw, matched, why) in frameworks.items()},
        "hints": {name: found for name, found in (hints_seen or {}).items() if found},
        "inputs": inputs,
        "message": None if ordered else NO_FINDING,
    }


def _numbers_text(numbers: dict[str, int | None]) -> str | None:
    labels = (
        ("requested_bytes", "requested"),
        ("total_bytes", "GPU total"),
        ("free_bytes", "free"),
        ("allocated_bytes", "allocated"),
        ("reserved_unallocated_bytes", "reserved-but-unallocated"),
    )
    if all(numbers.get(k) is None for k, _ in labels):
        return None
    parts = []
    for key, label in labels:
        value = numbers.get(key)
        parts.append(f"{label} {format_bytes(value)}" + ("" if value is None else f" ({value} B)"))
    most = numbers.get("reserved_unallocated_max_bytes")
    if most is not None:  # read from a figure cut off in the message: a range, not a value
        parts[-1] = (
            f"reserved-but-unallocated {format_bytes(numbers.get('reserved_unallocated_bytes'))} to {format_bytes(most)} (its figure is cut off)"
        )
    return "; ".join(parts)


def _verdict_text(kind: str, numbers: dict[str, int | None]) -> str | None:
    """The finding in one sentence, with the two figures that decide it.

    Why: the numbers line lists five figures, and a reader (a small agent above all) picks the
    wrong one; this line says which comparison made the verdict."""
    request, total = numbers.get("requested_bytes"), numbers.get("total_bytes")
    idle = numbers.get("reserved_unallocated_bytes")
    if request is None:
        return None
    asked = format_bytes(request)
    if kind == "fragmentation" and idle is not None and idle >= request:
        return (
            f"fragmentation: the {asked} request is smaller than the {format_bytes(idle)} reserved but "
            "unallocated: the memory is there, not as one block"
        )
    free = numbers.get("free_bytes")
    if kind == "capacity" and idle is not None and (free is None or free + idle < request):
        spare = f"the {format_bytes(free)} free plus the " if free is not None else "the "
        return (
            f"capacity: the {asked} request is more than {spare}{format_bytes(idle)} reserved but unallocated: "
            "the GPU is really full; lower the peak"
        )
    if kind == "impossible-request" and total is not None:
        return (
            f"impossible request: {asked} asked of a GPU with {format_bytes(total)} in total, more than the "
            "whole device: a size or shape bug, not an allocator problem"
        )
    return None


def render_text(report: dict[str, Any]) -> str:
    findings = report["findings"]
    if not findings:
        return f"diagnose.py: {NO_FINDING} in {', '.join(report['inputs'])}\n"
    s = report["summary"]
    lines = []
    head = f"{len(findings)} finding(s) in {', '.join(report['inputs'])}: {s['failures']} failure(s) from {s['sources_failed']} source(s)"
    if s["ranks_failed"]:
        head += f" ({s['ranks_failed']} rank(s): {', '.join(map(str, s['ranks']))})"
    if s["worst"]:
        head += f"; first: {s['worst']['source']} ({s['worst']['kind']})"
    if s.get("tightest") and s["tightest"]["source"] != (s["worst"] or {}).get("source"):
        t = s["tightest"]
        how = (
            f"{format_bytes(t['shortfall_bytes'])} short"
            if t["shortfall_bytes"] > 0
            else f"{format_bytes(t['free_bytes'])} free"
        )
        head += f"; tightest GPU: {t['source']} ({how})"
    if s["same_kind"] is not None:
        head += (
            "; every failure is the same kind"
            if s["same_kind"]
            else "; failures of different kinds: " + ", ".join(f"{k} x{n}" for k, n in s["kinds"].items())
        )
    lines.append(head)
    for name, facts in report.get("run", {}).items():
        layout = ", ".join(f"{k.upper() if k != 'gpus' else 'GPUs'} {v}" for k, v in facts.items())
        lines.append(f"run layout printed in {name}: {layout}")
    for name, fw in report.get("frameworks", {}).items():
        seen = f" (signals: {', '.join(fw['matched'])})" if fw["matched"] else f" ({fw['reason']})"
        where = "Megatron" if fw["in_megatron"] else "outside Megatron"
        lines.append(f"framework in {name}: {fw['label']}{seen}; {where}")
    folded = _fold_repeats(findings)
    for i, f in enumerate(findings, 1):
        if i not in folded:
            continue  # summarised on the fold line of the first identical finding
        where = f"{f['file']}:{f['line']}" + (f"-{f['line_end']}" if f.get("line_end") else "")
        who = f["source"] + (f", GPU {f['device']}" if f["device"] is not None and "GPU" not in f["source"] else "")
        times = f" (x{f['occurrences']})" if f["occurrences"] > 1 else ""
        lines.append("")
        lines.append(f"[{i}] {f['kind']} - {who} - {where}{times}")
        verdict = _verdict_text(f["kind"], f["numbers"])
        if verdict:
            lines.append(f"    verdict:  {verdict}")
        lines.append(f"    evidence: {f['evidence']}")
        nums = _numbers_text(f["numbers"])
        if nums:
            lines.append(f"    numbers:  {nums}")
        if f.get("details"):
            lines.append("    details:  " + ", ".join(f"{k}={v}" for k, v in f["details"].items()))
        if f.get("note"):
            lines.append(f"    note:     {f['note']}")
        lines.append(f"    cause:    {f['cause']}")
        lines.append(f"    confirm:  {f['confirm']}")
        fit = "" if f.get("table_fix_applies") is not False else "(does not fit this run, see do 1) "
        lines.append(f"    fix:      {fit}{f['fix']}")
        lines.append(f"    next:     {f['next_step']}")
        for j, action in enumerate(f.get("advice") or (), 1):
            lines.append(f"    do {j}:     {action}")
        for note in f.get("evidence_notes") or ():
            lines.append(f"    fact:     [{note['code']}] {note['text']}")
        t = f.get("torch")
        if t and (t["source"] != "unknown" or f["kind"] in ("fragmentation", "capacity")):
            lines.append(f"    pytorch:  {t['range']} ({t['source']}); expandable_segments {t['expandable_segments']}")
        c = f.get("confidence")
        if c:
            lines.append(f"    confidence: {c['level']} — {c['why']}")
        if folded[i]:
            lines.append(_fold_line(i, folded[i], findings))
    return "\n".join(lines) + "\n"


def _advice_key(f: dict[str, Any]) -> str:
    """What a reader acts on in a text finding: equal keys mean the same diagnosis and fix.

    Evidence, numbers, details and the confidence *reason* are left out on purpose: they
    differ per GPU (its own byte counts) without changing what to do.  JSON keeps them all.
    """
    c = f.get("confidence") or {}
    parts = (
        f["kind"],
        f["cause"],
        f["confirm"],
        f["fix"],
        f.get("table_fix_applies"),
        f["next_step"],
        f.get("advice") or [],
        f.get("evidence_notes") or [],
        f.get("torch"),
        f.get("note"),
        c.get("level"),
    )
    return json.dumps(parts, sort_keys=True, default=str)


def _fold_repeats(findings: list[dict[str, Any]]) -> dict[int, list[int]]:
    """1-based index of each finding printed in full -> indexes of later identical ones.

    Six ranks failing the same NCCL allocation would otherwise print six identical blocks
    (several thousand characters that bury the first one and overflow agents' output caps).
    """
    first_of: dict[str, int] = {}
    folded: dict[int, list[int]] = {}
    for i, f in enumerate(findings, 1):
        key = _advice_key(f)
        if key in first_of:
            folded[first_of[key]].append(i)
        else:
            first_of[key] = i
            folded[i] = []
    return folded


def _fold_line(first: int, rest: list[int], findings: list[dict[str, Any]]) -> str:
    """``[2]-[6] same kind, cause and fix as [1]: GPU 4, 3, 7, 6, 1 (lines 13, 15, ...)``."""
    contiguous = rest == list(range(rest[0], rest[-1] + 1))
    ids = f"[{rest[0]}]-[{rest[-1]}]" if contiguous and len(rest) > 1 else ", ".join(f"[{j}]" for j in rest)
    picked = [findings[j - 1] for j in rest]
    who = [
        f"rank {f['rank']}"
        if f.get("rank") is not None
        else f"GPU {f['device']}"
        if f["device"] is not None
        else f["source"]
        for f in picked
    ]
    for word in ("rank ", "GPU "):
        if all(w.startswith(word) for w in who):
            who = [who[0]] + [w[len(word) :] for w in who[1:]]
            break
    files = {f["file"] for f in picked}
    if len(files) == 1:
        where = "line" + ("s " if len(picked) > 1 else " ") + ", ".join(str(f["line"]) for f in picked)
    else:
        where = ", ".join(f"{f['file']}:{f['line']}" for f in picked)
    return f"{ids} same kind, cause and fix as [{first}]: {', '.join(who)} ({where}; every one in full with --json)"


def render_symptom_matches(query: str, matches: list[Match], route: RouteMatch | None = None) -> str:
    lines: list[str] = []
    if route is not None:
        lines += [f'"{query}" is {route.route.title} (it says "{route.because}"):']
        lines += [f"  {i}. {step}" for i, step in enumerate(route.route.steps, 1)]
        if not matches:
            return "\n".join(lines) + "\n"
        lines += ["", "Failure Diagnosis rows that share words with it (they describe single failures):"]
    elif not matches:
        return f'diagnose.py: no Failure Diagnosis row matches "{query}"; try words from the error message\n'
    else:
        lines = [f'Failure Diagnosis rows for "{query}" (best first):']
    for i, m in enumerate(matches, 1):
        r = m.row
        lines += [
            "",
            f"[{i}] score {m.score:.2f}  symptom: {r.symptom_md}",
            f"    cause:   {r.cause_md}",
            f"    confirm: {r.confirm_md}",
            f"    fix:     {r.fix_md}",
        ]
    return "\n".join(lines) + "\n"
