"""One-line memory reports printed every iteration (or every --log-memory-interval): parse one line.

Three families, each in every spelling its history printed:

* Megatron-LM ``report_memory`` (``megatron/training/utils.py``, since 2019):
  ``[Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.56 | max allocated: ... |
  reserved: ... | max reserved: ...``. Until 2020 the last two were ``cached`` / ``max cached``
  and no ``[Rank N]`` was printed (``print_rank_0``); until 2026 the values were the plain
  float repr (``1234.5678901234``), since then two decimals, with an optional
  ``| total device memory used: ...``. "MB" there is 1024 x 1024 bytes (``mega_bytes =
  1024.0 * 1024.0``), so it is read as MiB. Forks (Megatron-DeepSpeed, GPT-NeoX) print the same.
* Megatron Bridge (``training/utils/train_utils.py``): ``[Rank 0] (after 10 iterations)
  memory (GB) | mem-allocated-gigabytes: 12.345 | ... | mem-max-reserved-gigabytes: ... |
  mem-alloc-retires: 0 | mem-allocated-count: 123``: torch.cuda.memory_stats() keys renamed,
  bytes / 1e9 rounded to 5 significant digits, so "GB" is 10^9 bytes. The names are
  configurable (``logger.memory_keys``), so they are matched by their words, not exactly.
* DeepSpeed ``see_memory_usage`` (Megatron-DeepSpeed logs): ``MA 1.2 GB  Max_MA 2.3 GB
  CA 3.4 GB  Max_CA 4 GB`` in GiB (``/ (1024 * 1024 * 1024)``, two decimals).

Launcher prefixes (``[default3]:``, ``3:``, ``[rank3]:``, timestamps) are peeled with the
diagnose reader's :func:`strip_prefixes`, which also gives the rank when the message has none.
"""

from __future__ import annotations

import re
from functools import lru_cache

from memtune.diagnose.log_reader import strip_prefixes
from memtune.runtime.model import Reading
from memtune.units import GIB, MIB

#: Literal byte strings that mark a line worth parsing: the stream reader counts and finds
#: them at C speed and hands only those lines here.
TRIGGERS = (b"memory (", b"Max_MA ", b"max_memory_allocated: ")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_HEAD = re.compile(r"\bmemory \((MB|GB|MiB|GiB)\)\s*\|")
_RANK = re.compile(r"\[Rank (\d+)\]\s*")
# A value ends at the next "|", the line's end, a glued "[Rank N]" or a glued next report's
# words ("max reserved: 22138.0Memory Report, Device 1: ...").
_FIELDS = re.compile(r"\|\s*([A-Za-z][\w .\-/]*?)\s*:\s*(" + _NUMBER + r")\s*(?=\||$|\[|[A-Za-z])")
_DEVICE = re.compile(r"\bDevice (\d+)\b")
_ITERATION = re.compile(
    r"\b(?:after|before)\s+(\d+)\s+iterations?\b|\bfor iteration\s+(\d+)\b|\biter(?:ation)?\s+(\d+)\b", re.IGNORECASE
)
_DEEPSPEED = re.compile(
    r"\bMA\s+(?P<ma>" + _NUMBER + r")\s*GB\s+Max_MA\s+(?P<max_ma>" + _NUMBER + r")\s*GB\s+"
    r"CA\s+(?P<ca>" + _NUMBER + r")\s*GB\s+Max_CA\s+(?P<max_ca>" + _NUMBER + r")\s*GB"
)
_UNIT_BYTES = {"MB": MIB, "MiB": MIB, "GB": 10**9, "GiB": GIB}
_SIZE_FIELDS = frozenset({"allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes"})


@lru_cache(maxsize=256)
def _field_name(key: str) -> str | None:
    """Which Reading field a report key fills, from its words: Megatron's ``max allocated``,
    Bridge's ``mem-max-allocated-gigabytes`` or a user's own ``memory_keys`` name."""
    k = key.lower().replace("-", " ").replace("_", " ")
    words = set(k.split())
    if "device" in words and "used" in words:
        return "device_used_bytes"
    if "retires" in words or "retries" in words or "retry" in words:
        return "alloc_retries"
    if "count" in words:
        return None  # mem-allocated-count: a number of tensors, not a size
    peak = bool(words & {"max", "peak"})
    if "inactive" in words:
        return None if peak else "inactive_split_bytes"
    if "active" in words:
        return None  # active ~ allocated; allocated is the figure everyone reports
    if "allocated" in words or "alloc" in words:
        return "max_allocated_bytes" if peak else "allocated_bytes"
    if "reserved" in words or "cached" in words:
        return "max_reserved_bytes" if peak else "reserved_bytes"
    return None


def parse_line(text: str, source: str, line: int) -> Reading | None:
    """The first reading in one log line, or None when the line holds no memory report."""
    readings = parse_reports(text, source, line)
    return readings[0] if readings else None


def parse_reports(text: str, source: str, line: int) -> list[Reading]:
    """Every memory report in one log line.

    Ranks writing to one stream without a lock glue their reports together
    (``... mem-allocated-count: 433[Rank 3] (after 2 iterations) memory (GB) | ...``), or glue
    a report to the end of another rank's iteration line, so each ``memory (..) |`` head
    starts a report whose fields run to the next report's ``[Rank N]`` tag. The common case
    (a ``[Rank N]`` tag before the head) needs no prefix peeling; only a report without one
    asks :func:`strip_prefixes` for the launcher's rank label.
    """
    heads = list(_HEAD.finditer(text))
    if not heads:
        prefix = strip_prefixes(text)
        reading = _parse_deepspeed(prefix.text, prefix.rank, source, line) or _parse_nemo(
            prefix.text, prefix.rank, source, line
        )
        return [reading] if reading is not None else []
    readings: list[Reading] = []
    start = 0
    for index, head in enumerate(heads):
        before = text[start : head.start()]
        tags = list(_RANK.finditer(before))
        if index + 1 < len(heads):
            following = text[head.end() - 1 : heads[index + 1].start()]
            next_tags = list(_RANK.finditer(following))
            fields = list(_FIELDS.finditer(following))
            if next_tags:
                stop = head.end() - 1 + next_tags[-1].start()
            elif fields:  # the next report's label starts where this one's last value ends
                stop = head.end() - 1 + fields[-1].end()
            else:
                stop = heads[index + 1].start()
        else:
            stop = len(text)
        reading = _report(text, head, before, tags[-1] if tags else None, stop, source, line)
        if reading is not None:
            readings.append(reading)
        start = stop
    return readings


def _report(
    text: str, head: re.Match[str], before: str, tag: re.Match[str] | None, stop: int, source: str, line: int
) -> Reading | None:
    unit = head.group(1)
    if tag is not None:
        rank: int | None = int(tag.group(1))  # the last [Rank N] before "memory" is Megatron's own
        label = before[tag.end() :].strip()
    else:
        prefix = strip_prefixes(before)
        rank, label = prefix.rank, prefix.text.strip()
        device = _DEVICE.search(label)
        if rank is None and device is not None:
            rank = int(device.group(1))  # GPT-NeoX "Memory Report, Device N:": the local device
    scale = _UNIT_BYTES[unit]
    values: dict[str, int] = {}
    for key, number in _FIELDS.findall(text[head.end() - 1 : stop]):
        name = _field_name(key)
        if name is None or name in values:
            continue
        values[name] = int(float(number)) if name == "alloc_retries" else int(round(float(number) * scale))
    if not values.keys() & _SIZE_FIELDS:
        return None
    kind = "bridge_memory" if unit in ("GB", "GiB") else "report_memory"
    # Two decimals of MiB are exact to ~10 kB; Bridge's 5 significant digits of GB to 10 MB at 100 GB.
    resolution = MIB // 100 if kind == "report_memory" else 10**7
    return Reading(
        kind=kind,
        source=source,
        line=line,
        rank=rank,
        iteration=_iteration(label),
        label=label,
        resolution_bytes=resolution,
        allocated_bytes=values.get("allocated_bytes"),
        max_allocated_bytes=values.get("max_allocated_bytes"),
        reserved_bytes=values.get("reserved_bytes"),
        max_reserved_bytes=values.get("max_reserved_bytes"),
        inactive_split_bytes=values.get("inactive_split_bytes"),
        device_used_bytes=values.get("device_used_bytes"),
        alloc_retries=values.get("alloc_retries"),
    )


def _iteration(label: str) -> int | None:
    m = _ITERATION.search(label)
    if m is None:
        return None
    return int(next(g for g in m.groups() if g is not None))


_NEMO_FIELD = re.compile(r"\b(max_memory_reserved|max_memory_allocated|memory_reserved|memory_allocated):\s*(\d+)\b")
_NEMO_STEP = re.compile(r"\biteration\s+(\d+)(?:/\d+)?|\bglobal_step:\s*(\d+)")
_NEMO_TARGET = {
    "max_memory_reserved": "max_reserved_bytes",
    "max_memory_allocated": "max_allocated_bytes",
    "memory_reserved": "reserved_bytes",
    "memory_allocated": "allocated_bytes",
}


def _parse_nemo(message: str, rank: int | None, source: str, line: int) -> Reading | None:
    """NeMo 2 step lines (``Training epoch 0, iteration 8/29 | ... | max_memory_reserved:
    57466159104 | max_memory_allocated: 53930270720 | ...``): bytes, the running peaks."""
    values = {_NEMO_TARGET[k]: int(v) for k, v in _NEMO_FIELD.findall(message)}
    if not values:
        return None
    step = _NEMO_STEP.search(message)
    iteration = int(step.group(1) or step.group(2)) if step else None
    return Reading(
        kind="nemo_memory",
        source=source,
        line=line,
        rank=rank,
        iteration=iteration,
        label=f"(after {iteration} iterations)" if iteration is not None else "",
        allocated_bytes=values.get("allocated_bytes"),
        max_allocated_bytes=values.get("max_allocated_bytes"),
        reserved_bytes=values.get("reserved_bytes"),
        max_reserved_bytes=values.get("max_reserved_bytes"),
    )


def _parse_deepspeed(message: str, rank: int | None, source: str, line: int) -> Reading | None:
    m = _DEEPSPEED.search(message)
    if m is None:
        return None

    def gib(name: str) -> int:
        return int(round(float(m.group(name)) * GIB))

    return Reading(
        kind="deepspeed_memory",
        source=source,
        line=line,
        rank=rank,
        label=message[: m.start()].strip(),
        allocated_bytes=gib("ma"),
        max_allocated_bytes=gib("max_ma"),
        reserved_bytes=gib("ca"),
        max_reserved_bytes=gib("max_ca"),
        resolution_bytes=GIB // 100,
    )
