"""Multi-line memory texts: a memory_summary table, a memory_stats dump, nvidia-smi output.

Each parser gets the lines from the one that triggered it onwards (launcher prefixes still
on) and answers ``(readings, lines consumed)``, or ``None`` when the block runs past the
lines it was given and more text may follow (the stream reader then carries the block into
the next chunk). They are small tables, so they are parsed whole; what matters is that every
spelling seen in the wild is read and that nothing else is mistaken for one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from memtune.diagnose.log_reader import strip_prefixes
from memtune.runtime.model import Reading
from memtune.units import GIB, KIB, MIB, TIB

_SIZE_UNITS = {
    "b": 1,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": TIB,
    "pib": TIB * 1024,
    "kb": KIB,
    "mb": MIB,
    "gb": GIB,
}

BlockResult = tuple[list[Reading], int] | None


@dataclass(frozen=True)
class BlockParser:
    """A block format: the literal that starts it and the function that reads it."""

    kind: str
    trigger: bytes
    parse: Callable[[Sequence[str], str, int, bool], BlockResult]


def _message(line: str) -> tuple[str, int | None]:
    prefix = strip_prefixes(line)
    return prefix.text.strip(), prefix.rank


# --------------------------------------------------------------------- memory_summary

_SUMMARY_TITLE = re.compile(r"PyTorch CUDA memory summary, device ID (\d+)")
_SUMMARY_ROW = re.compile(r"^\|\s*(?P<name>[A-Za-z][A-Za-z \-]*?)\s*\|(?P<cols>(?:[^|]*\|){2,4})\s*$")
_SUMMARY_SIZE = re.compile(r"^\s*(-?\d+)\s*([KMGTP]?i?B)\s*$")
_SUMMARY_COUNTS = re.compile(r"CUDA OOMs:\s*(\d+)\s*\|\s*cudaMalloc retries:\s*(\d+)")


def parse_memory_summary(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """``torch.cuda.memory_summary()``: current and peak of allocated / reserved / non-releasable.

    PyTorch prints whole units (``39779 MiB``: the value is floored to the unit), so each
    figure is exact to one unit and the reading says so (``resolution_bytes``).
    """
    text, rank = _message(lines[0])
    title = _SUMMARY_TITLE.search(text)
    if title is None:
        return [], 1
    rows: dict[str, tuple[int, int, int]] = {}
    retries = ooms = None
    consumed = 1
    seen_table = False
    for raw in lines[1:]:
        msg, _ = _message(raw)
        if not msg.startswith(("|", "+")):
            if seen_table or consumed > 3:
                break
            consumed += 1
            continue
        consumed += 1
        seen_table = True
        counts = _SUMMARY_COUNTS.search(msg)
        if counts:
            ooms, retries = int(counts.group(1)), int(counts.group(2))
            continue
        row = _SUMMARY_ROW.match(msg)
        if row is None or row.group("name").lower().startswith("from "):
            if msg.startswith("|===") and "Oversize GPU segments" in rows_key_names(rows):
                break
            continue
        sizes = [_SUMMARY_SIZE.match(c) for c in row.group("cols").split("|")[:2]]
        if all(sizes):
            values = [int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()] for m in sizes if m]
            units = [_SIZE_UNITS[m.group(2).lower()] for m in sizes if m]
            rows[row.group("name").strip().lower()] = (values[0], values[1], max(units))
        else:
            rows[row.group("name").strip().lower()] = (0, 0, 0)
    else:
        if not at_eof:
            return None
    allocated = rows.get("allocated memory")
    reserved = rows.get("gpu reserved memory")
    if allocated is None and reserved is None:
        return [], consumed
    inactive = rows.get("non-releasable memory")
    reading = Reading(
        kind="memory_summary",
        source=source,
        line=first_line,
        rank=rank,
        gpu=int(title.group(1)),
        label="memory_summary",
        allocated_bytes=allocated[0] if allocated else None,
        max_allocated_bytes=allocated[1] if allocated else None,
        reserved_bytes=reserved[0] if reserved else None,
        max_reserved_bytes=reserved[1] if reserved else None,
        inactive_split_bytes=inactive[0] if inactive else None,
        alloc_retries=retries,
        ooms=ooms,
        resolution_bytes=max((r[2] for r in (allocated, reserved) if r), default=1),
    )
    return [reading], consumed


def rows_key_names(rows: dict[str, tuple[int, int, int]]) -> str:
    return " ".join(rows).title().replace("Gpu", "GPU")


# --------------------------------------------------------------------- memory_stats

_STAT_PAIR = re.compile(r"""["'](?P<key>[a-z_]+(?:\.[a-z_0-9]+)*)["']\s*[:,]\s*(?P<value>-?\d+(?:\.\d+)?)""")
_ONLY_BRACKETS = re.compile(r"^[\s{}\[\](),]*(?:OrderedDict\(\[?)?[\s{}\[\](),]*$")
_STAT_FIELDS = {
    "allocated_bytes.all.current": "allocated_bytes",
    "allocated_bytes.all.peak": "max_allocated_bytes",
    "reserved_bytes.all.current": "reserved_bytes",
    "reserved_bytes.all.peak": "max_reserved_bytes",
    "inactive_split_bytes.all.current": "inactive_split_bytes",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
}
_STATS_MAX_LINES = 4000


def parse_memory_stats(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """``torch.cuda.memory_stats()`` printed as a dict, an OrderedDict, JSON on one line or
    pretty-printed JSON (one key a line): consecutive lines holding ``"key": value`` pairs.
    A key seen again starts the next dump (a JSON list of dumps, one per step)."""
    readings: list[Reading] = []
    current: dict[str, int] = {}
    start = first_line
    rank: int | None = None
    consumed = 0

    def flush() -> None:
        if current.keys() & {"allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.peak"}:
            values = {_STAT_FIELDS[k]: v for k, v in current.items() if k in _STAT_FIELDS}
            readings.append(
                Reading(
                    kind="memory_stats",
                    source=source,
                    line=start,
                    rank=rank,
                    label="memory_stats",
                    allocated_bytes=values.get("allocated_bytes"),
                    max_allocated_bytes=values.get("max_allocated_bytes"),
                    reserved_bytes=values.get("reserved_bytes"),
                    max_reserved_bytes=values.get("max_reserved_bytes"),
                    inactive_split_bytes=values.get("inactive_split_bytes"),
                    alloc_retries=values.get("alloc_retries"),
                    ooms=values.get("ooms"),
                )
            )
        current.clear()

    for index, raw in enumerate(lines[:_STATS_MAX_LINES]):
        msg, line_rank = _message(raw)
        pairs = _STAT_PAIR.findall(msg)
        if not pairs:
            if index > 0 and _ONLY_BRACKETS.match(msg) and msg:
                consumed = index + 1
                continue
            break
        if rank is None:
            rank = line_rank
        for key, value in pairs:
            if key in current:
                flush()
                start = first_line + index
            if key in _STAT_FIELDS or key.endswith((".current", ".peak")):
                current[key] = int(float(value))
        consumed = index + 1
    else:
        if not at_eof and len(lines) < _STATS_MAX_LINES:
            return None
    flush()
    return readings, max(consumed, 1)


# --------------------------------------------------------------------- nvidia-smi

_SMI_GPU_ROW = re.compile(r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|")
_SMI_MEMORY = re.compile(r"(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB")
_SMI_PROCESS = re.compile(r"^\|\s*(?P<gpu>\d+)\s+.*?\s(?P<used>\d+)\s*MiB\s*\|$")


def parse_smi_table(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """The ``nvidia-smi`` table: per GPU index, used / total MiB and the model name, plus the
    per-process memory column when the Processes table follows."""
    gpus: dict[int, Reading] = {}
    processes: dict[int, int] = {}
    process_count: dict[int, int] = {}
    current: int | None = None
    since_row = 0
    in_processes = False
    blank_run = 0
    consumed = 1
    for offset, raw in enumerate(lines[1:], start=1):
        msg, _ = _message(raw)
        if not msg.startswith(("|", "+")):
            blank_run += 1
            if blank_run > 2 or (msg and not re.match(r"^\w{3} \w{3} ", msg)):
                break
            continue
        blank_run = 0
        consumed = offset + 1
        if "Processes:" in msg:
            in_processes = True
            continue
        if "MIG devices:" in msg:
            current = None  # MIG instance rows also hold "used / total": not the whole GPU
            continue
        if in_processes:
            proc = _SMI_PROCESS.match(msg)
            if proc:
                gpu = int(proc.group("gpu"))
                processes[gpu] = processes.get(gpu, 0) + int(proc.group("used")) * MIB
                process_count[gpu] = process_count.get(gpu, 0) + 1
            continue
        row = _SMI_GPU_ROW.match(msg)
        since_row += 1
        if row:
            since_row = 0
            current = int(row.group("index"))
            gpus[current] = Reading(
                kind="nvidia_smi",
                source=source,
                line=first_line + offset,
                gpu=current,
                gpu_name=row.group("name").strip(),
                label="nvidia-smi",
                resolution_bytes=MIB,
            )
            continue
        memory = _SMI_MEMORY.search(msg)
        if memory and current is not None and since_row <= 2 and gpus[current].device_used_bytes is None:
            gpus[current] = replace(
                gpus[current],
                device_used_bytes=int(memory.group("used")) * MIB,
                device_total_bytes=int(memory.group("total")) * MIB,
            )
    else:
        if not at_eof:
            return None
    readings = [
        replace(g, processes_bytes=processes.get(index), processes=process_count.get(index) if in_processes else None)
        for index, g in gpus.items()
        if g.device_used_bytes is not None
    ]
    return readings, consumed


_QUERY = re.compile(r"--query-gpu[= ](?P<fields>[\w.,]+)")
_FORMAT = re.compile(r"--format[= ](?P<format>[\w,]+)")
_CSV_VALUE = re.compile(r"^\s*(?P<number>-?\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]iB|B)?\s*$")


def _csv_rows(
    fields: list[str], lines: Sequence[str], source: str, first_line: int, default_unit: int
) -> tuple[list[Reading], int]:
    readings: list[Reading] = []
    consumed = 0
    for offset, raw in enumerate(lines):
        msg, rank = _message(raw)
        cells = [c.strip() for c in msg.split(",")]
        if not msg or len(cells) != len(fields):
            break
        row = dict(zip(fields, cells, strict=True))
        values: dict[str, int] = {}
        for key, target in (("memory.used", "device_used_bytes"), ("memory.total", "device_total_bytes")):
            if key in row:
                m = _CSV_VALUE.match(row[key])
                if m is None:
                    continue
                unit = _SIZE_UNITS[m.group("unit").lower()] if m.group("unit") else default_unit
                values[target] = int(float(m.group("number")) * unit)
        if "device_used_bytes" not in values:
            break
        index = row.get("index", "")
        readings.append(
            Reading(
                kind="nvidia_smi",
                source=source,
                line=first_line + offset,
                gpu=int(index) if index.isdigit() else len(readings),
                gpu_name=row.get("name") or None,
                label="nvidia-smi --query-gpu",
                resolution_bytes=MIB,
                device_used_bytes=values.get("device_used_bytes"),
                device_total_bytes=values.get("device_total_bytes"),
            )
        )
        consumed = offset + 1
    return readings, consumed


def _header_fields(msg: str) -> list[str]:
    return [re.sub(r"\s*\[.*?\]\s*$", "", c.strip()) for c in msg.split(",")]


def parse_smi_csv_header(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """``nvidia-smi --query-gpu=... --format=csv``: a header such as ``memory.used [MiB],
    memory.total [MiB]`` and one row per GPU (``61335 MiB, 143771 MiB``)."""
    msg, _ = _message(lines[0])
    if "," not in msg and not msg.startswith("memory."):
        return [], 1
    fields = _header_fields(msg)
    if not ({"memory.used"} <= set(fields)):
        return [], 1
    if len(lines) < 2 and not at_eof:
        return None
    readings, consumed = _csv_rows(fields, lines[1:], source, first_line + 1, MIB)
    if consumed == len(lines) - 1 and not at_eof:
        return None
    return readings, consumed + 1


def parse_smi_query_command(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """A shell transcript: ``$ nvidia-smi --query-gpu=memory.used,memory.total
    --format=csv,noheader,nounits`` followed by its rows. Without a header the command line
    is the only place that names the columns, so it is read from there."""
    msg, _ = _message(lines[0])
    query = _QUERY.search(msg)
    if query is None or "nvidia-smi" not in msg:
        return [], 1
    fmt = _FORMAT.search(msg)
    options = set(fmt.group("format").split(",")) if fmt else {"csv"}
    fields = [f.strip() for f in query.group("fields").split(",") if f.strip()]
    rest = list(lines[1:])
    skip = 1
    while rest and (not rest[0].strip() or rest[0].strip().startswith("(rc=")):
        rest.pop(0)
        skip += 1
    if not rest:
        return (None if not at_eof else ([], skip)) if len(lines) < 8 else ([], skip)
    if "noheader" not in options:
        return [], skip  # the header line that follows triggers parse_smi_csv_header itself
    readings, consumed = _csv_rows(fields, rest, source, first_line + skip, MIB)
    if consumed == len(rest) and not at_eof:
        return None
    return readings, skip + consumed


_Q_FIELD = re.compile(r"^\s*(?P<key>Total|Reserved|Used|Free)\s*:\s*(?P<value>\d+)\s*MiB\s*$")


def parse_smi_q(lines: Sequence[str], source: str, first_line: int, at_eof: bool) -> BlockResult:
    """``nvidia-smi -q``: the "FB Memory Usage" section (Total / Reserved / Used / Free MiB).
    The GPU index is not in the section; read.py numbers the sections of a file in order."""
    values: dict[str, int] = {}
    consumed = 1
    for offset, raw in enumerate(lines[1:6], start=1):
        msg, _ = _message(raw)
        m = _Q_FIELD.match(msg)
        if m is None:
            break
        values[m.group("key").lower()] = int(m.group("value")) * MIB
        consumed = offset + 1
    else:
        if len(lines) < 6 and not at_eof:
            return None
    if "used" not in values:
        return [], consumed
    reading = Reading(
        kind="nvidia_smi",
        source=source,
        line=first_line,
        label="nvidia-smi -q",
        device_used_bytes=values["used"],
        device_total_bytes=values.get("total"),
        resolution_bytes=MIB,
    )
    return [reading], consumed


BLOCK_PARSERS = (
    BlockParser("memory_summary", b"PyTorch CUDA memory summary", parse_memory_summary),
    BlockParser("memory_stats", b"_bytes.all.", parse_memory_stats),
    BlockParser("nvidia_smi", b"NVIDIA-SMI ", parse_smi_table),
    BlockParser("nvidia_smi", b"memory.used", parse_smi_csv_header),
    BlockParser("nvidia_smi", b"--query-gpu", parse_smi_query_command),
    BlockParser("nvidia_smi", b"FB Memory Usage", parse_smi_q),
)
