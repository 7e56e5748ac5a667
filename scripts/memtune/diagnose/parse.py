"""Numbers out of a PyTorch caching-allocator OOM message, and the kind they imply.

Every message format PyTorch has printed since 2017 is covered, because users paste
whatever their version produced:

* pre-1.0 THC: ``cuda runtime error (2) : out of memory at .../THCStorage.cu:66`` (no numbers);
* 1.0-1.4: ``(GPU 0; 31.72 GiB total capacity; 25.59 GiB already allocated; 5.39 GiB free;
  14.59 MiB cached)`` where *cached* already is the reserved-but-unallocated memory (the
  allocator's own comment defined it as "memory held by the allocator but not used");
* 1.5-2.0: ``...; 13.38 GiB reserved in total by PyTorch)``, a *total*, so the idle reserve
  is reserved - allocated;
* 2.1+: ``GPU 0 has a total capacity of ... of which ... is free. [Process N has ...]
  [Including non-PyTorch memory, this process has ...] Of the allocated memory X is
  allocated by PyTorch, [with Y allocated in private pools (e.g., CUDA Graphs),] and Z is
  reserved by PyTorch but unallocated.`` (2.1 spelled it ``capacty``).

A truncated message yields ``None`` for every number it does not state in full: a number
is read only when its unit follows it, so ``of which 1.2`` at the end of a cut-off line
is unknown rather than 1.2 bytes. One exception is decided by arithmetic, not guessed: the
1.5-2.0 form cut inside its last figure (``...; 2.36 GiB free; 27.8``). Digits that already
hold their decimal point fix the magnitude (27.80 to 27.90 of some unit), and the reserved
total lies between the allocated memory and the GPU's size, so at most one unit fits; when
one does, the idle reserve is known to lie in a range, and the verdict is given only when
the whole range falls on one side of the request (:func:`truncated_reserved_total`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

# PyTorch's format_size() prints binary units with two decimals; older messages said "KB"
# style names for the same binary multiples, so both spellings map to powers of 1024.
_UNIT_POWER = {"": 0, "B": 0, "BYTES": 0, "BYTE": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}

# Digit runs are bounded (no printed size has more than 20 digits) so that a search over
# a long run of digits stays linear: an unbounded ``\d+`` restarts at every digit and
# re-reads the whole run, which is quadratic (tests/test_diagnose_redos.py); a number also
# starts only where a digit run starts (the look-behind), never in the middle of one.
SIZE = r"(?<![\d.])(\d{1,20}(?:\.\d{1,20})?)\s{0,4}([KMGTPE]i?B|bytes?|B)(?![A-Za-z])"

_RE = {
    "requested": re.compile(r"Tried to allocate\s+" + SIZE),
    "requested_huge": re.compile(r"Tried to allocate\s+more than\s+1\s*EB", re.I),
    "device_legacy": re.compile(r"\(GPU\s+(\d+);"),
    "device_new": re.compile(r"GPU\s+(\d+)\s+has a total capac"),
    "total_legacy": re.compile(SIZE + r"\s+total capacity"),
    "total_new": re.compile(r"total capac(?:i)?ty of\s+" + SIZE),
    "free_legacy": re.compile(SIZE + r"\s+free[;)]"),
    "free_new": re.compile(r"of which\s+" + SIZE + r"\s+is free"),
    "allocated_legacy": re.compile(SIZE + r"\s+already allocated"),
    "allocated_new": re.compile(r"Of the allocated memory\s+" + SIZE + r"\s+is allocated by PyTorch"),
    "reserved_total": re.compile(SIZE + r"\s+reserved in total by PyTorch"),
    "cached": re.compile(SIZE + r"\s+cached\)"),
    "reserved_unallocated": re.compile(SIZE + r"\s+is reserved by PyTorch but unallocated"),
    "thc": re.compile(r"cuda runtime error \(2\) : out of memory"),
}

# A message is complete (for numbers) once its last number has been printed.
_COMPLETE = re.compile(
    r"reserved in total by PyTorch\)|cached\)|is reserved by PyTorch but unallocated|"
    r"cuda runtime error \(2\) : out of memory"
)

# The cudaMallocAsync backend's OOM (c10/cuda/CUDAMallocAsyncAllocator.cpp, mallocAsync):
# "Allocation on device N would exceed allowed memory. (out of memory)" then one field per
# line, "Currently allocated     : X" (this process's PyTorch allocations), "Requested" (the
# failed call), "Device limit" (cudaMemGetInfo's total: the device's size), "Free (according
# to CUDA)" and the user's memory-fraction cap on two lines.  A Rust or JSON wrapper may print
# it on one line with literal "\n" escapes; the field names are the same either way.
_ASYNC = {
    "allocated": re.compile(r"Currently allocated\s{0,40}:\s{0,40}" + SIZE),
    "requested": re.compile(r"Requested\s{0,40}:\s{0,40}" + SIZE),
    "total": re.compile(r"Device limit\s{0,40}:\s{0,40}" + SIZE),
    "free": re.compile(r"Free \(according to CUDA\)\s{0,40}:\s{0,40}" + SIZE),
    "limit": re.compile(r"PyTorch limit \(set by user-supplied memory fraction\)(?:\\n|\s){0,40}:\s{0,40}" + SIZE),
}

# Every regex this module runs, for the adversarial-line tests (tests/test_diagnose_redos.py).
REGEXES: dict[str, re.Pattern[str]] = {**_RE, "complete": _COMPLETE, **{f"async_{k}": v for k, v in _ASYNC.items()}}

ONE_EB = 1 << 60


def size_to_bytes(value: str, unit: str) -> int:
    """``("13.38", "GiB")`` -> bytes, rounded half-up to an int (the message has 2 decimals)."""
    u = unit.strip().upper()
    if u.startswith("BYTE") or u == "B":
        power = 0
    else:
        power = _UNIT_POWER[u[0]]
    exact = Decimal(value) * (1 << (10 * power))
    return int(exact.to_integral_value(rounding=ROUND_HALF_UP))


def format_bytes(n: int | None) -> str:
    """Bytes as PyTorch prints them (two decimals, binary units) for human output."""
    if n is None:
        return "unknown"
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} bytes"  # pragma: no cover - loop always returns


@dataclass(frozen=True)
class AllocatorNumbers:
    """The five numbers an allocator OOM message carries, in bytes, ``None`` when it does not say."""

    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    device: int | None = None
    requested_more_than_1eb: bool = False
    legacy_form: str | None = None  # "thc", "cached", "reserved-total" or None (2.1+ prose)
    #: set when the reserved total was cut off inside its figure: what was read, and the
    #: idle reserve's upper end (``reserved_unallocated_bytes`` then holds its lower end)
    truncated_reserved: str | None = None
    reserved_unallocated_max_bytes: int | None = None

    def as_json(self) -> dict[str, int | None]:
        out = {
            "requested_bytes": self.requested_bytes,
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "allocated_bytes": self.allocated_bytes,
            "reserved_unallocated_bytes": self.reserved_unallocated_bytes,
        }
        if self.reserved_unallocated_max_bytes is not None:
            out["reserved_unallocated_max_bytes"] = self.reserved_unallocated_max_bytes
        return out


#: the 1.5-2.0 form cut inside its last figure: "...; 2.36 GiB free; 27.8" and nothing after
_CUT_RESERVED = re.compile(r"free;\s{1,4}(\d{1,20}\.\d{0,20})\s*$")
REGEXES["cut_reserved"] = _CUT_RESERVED


def truncated_reserved_total(text: str, allocated: int | None, total: int | None) -> tuple[str, int, int] | None:
    """(digits read, lowest, highest) reserved total in bytes when the message stops inside
    its reserved-total figure and exactly one unit puts that figure between the allocated
    memory and the GPU's size; None otherwise (no cut figure, or no unit or several fit)."""
    m = _CUT_RESERVED.search(text)
    if m is None or allocated is None or total is None:
        return None
    digits = m.group(1)
    decimals = len(digits.split(".")[1])
    low = Decimal(digits)
    high = low + Decimal(1).scaleb(-decimals)  # 27.8 may go on as 27.8x, never reach 27.9
    fits = []
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        scale = 1 << (10 * _UNIT_POWER[unit[0]])
        lo, hi = int(low * scale), int(high * scale)
        if hi > allocated and lo <= total:
            fits.append((max(lo, allocated), min(hi, total)))
    if len(fits) != 1:
        return None
    return digits, fits[0][0], fits[0][1]


def _first(name: str, text: str) -> int | None:
    m = _RE[name].search(text)
    return size_to_bytes(m.group(1), m.group(2)) if m else None


def is_complete(text: str) -> bool:
    """True once the message has printed its last number (later lines are only hints)."""
    return _COMPLETE.search(text) is not None


def parse_allocator_message(text: str) -> AllocatorNumbers:
    """Read every number the (possibly re-joined, possibly truncated) message states."""
    if _RE["thc"].search(text):
        return AllocatorNumbers(legacy_form="thc")
    huge = _RE["requested_huge"].search(text) is not None
    requested = None if huge else _first("requested", text)
    dev = _RE["device_legacy"].search(text) or _RE["device_new"].search(text)
    device = int(dev.group(1)) if dev else None
    total = _first("total_legacy", text)
    if total is None:
        total = _first("total_new", text)
    free = _first("free_new", text)
    if free is None:
        free = _first("free_legacy", text)
    allocated_legacy = _first("allocated_legacy", text)
    allocated = allocated_legacy if allocated_legacy is not None else _first("allocated_new", text)

    legacy_form = None
    unallocated = _first("reserved_unallocated", text)
    if unallocated is None:
        reserved_total = _first("reserved_total", text)
        cached = _first("cached", text)
        if reserved_total is not None:
            legacy_form = "reserved-total"
            # The 1.5-2.0 form prints the total reserved; the idle part is the difference.
            if allocated is not None:
                unallocated = reserved_total - allocated
        elif cached is not None:
            legacy_form = "cached"
            unallocated = cached
    cut = (
        None
        if unallocated is not None or allocated_legacy is None
        else truncated_reserved_total(text, allocated, total)
    )
    if cut is not None and allocated is not None:
        legacy_form = "reserved-total"
        unallocated = cut[1] - allocated
    return AllocatorNumbers(
        requested_bytes=requested,
        total_bytes=total,
        free_bytes=free,
        allocated_bytes=allocated,
        reserved_unallocated_bytes=unallocated,
        device=device,
        requested_more_than_1eb=huge,
        legacy_form=legacy_form,
        truncated_reserved=cut[0] if cut else None,
        reserved_unallocated_max_bytes=cut[2] - allocated if cut and allocated is not None else None,
    )


def _async_first(name: str, text: str) -> int | None:
    m = _ASYNC[name].search(text)
    return size_to_bytes(m.group(1), m.group(2)) if m else None


def parse_async_message(text: str) -> tuple[AllocatorNumbers, dict[str, int]]:
    """The numbers of a cudaMallocAsync-backend OOM (see ``_ASYNC``), and its memory-fraction
    cap as a detail (``pytorch_limit_bytes``; PyTorch prints 2**64 bytes, "17179869184.00 GiB",
    when no fraction was set).  This backend keeps no reserve of its own, so the idle
    reserve (reserved but unallocated) is never stated and stays None."""
    numbers = AllocatorNumbers(
        requested_bytes=_async_first("requested", text),
        total_bytes=_async_first("total", text),
        free_bytes=_async_first("free", text),
        allocated_bytes=_async_first("allocated", text),
    )
    limit = _async_first("limit", text)
    return numbers, ({"pytorch_limit_bytes": limit} if limit is not None else {})


def async_message_complete(text: str) -> bool:
    """True once the async backend's message has printed its last field (the fraction cap)."""
    return _ASYNC["limit"].search(text) is not None


_PROCESS = re.compile(r"Process\s+\d+\s+has\s+" + SIZE + r"\s+memory in use")
_THIS_PROCESS = re.compile(r"this process has\s+" + SIZE + r"\s+memory in use")
_PRIVATE_POOLS = re.compile(r"with\s+" + SIZE + r"\s+allocated in private pools")
_ALLOWED = re.compile(r"is free\.\s+" + SIZE + r"\s+allowed;")


def breakdown(text: str) -> dict[str, int]:
    """What the 2.1+ message adds besides the five numbers, in bytes (only keys it states).

    ``other_processes``: how many "Process N has X memory in use" entries (NVML's view of
    the GPU; in a container the current process can appear here too, because PIDs are
    namespaced); ``private_pools_bytes``: memory held by CUDA-graph pools (2.4+);
    ``allowed_bytes``: the cap a per-process memory fraction puts on this process.
    """
    out: dict[str, int] = {}
    procs = _PROCESS.findall(text)
    if procs:
        out["other_processes"] = len(procs)
        out["other_processes_bytes"] = sum(size_to_bytes(v, u) for v, u in procs)
    this = _THIS_PROCESS.search(text)
    if this:
        out["this_process_bytes"] = size_to_bytes(this.group(1), this.group(2))
    pools = _PRIVATE_POOLS.search(text)
    if pools:
        out["private_pools_bytes"] = size_to_bytes(pools.group(1), pools.group(2))
    allowed = _ALLOWED.search(text)
    if allowed:  # a per-process memory fraction caps this process below the GPU size
        out["allowed_bytes"] = size_to_bytes(allowed.group(1), allowed.group(2))
    return out


@dataclass(frozen=True)
class Verdict:
    kind: str
    note: str | None = None


def classify(numbers: AllocatorNumbers) -> Verdict:
    """Impossible-request if the request exceeds the whole GPU (or "more than
    1EB"); fragmentation if the idle reserve could have served it; capacity otherwise.

    When a number the rule needs is missing the kind falls back to ``capacity`` and the
    note says the split could not be decided, rather than guessing fragmentation.
    """
    n = numbers
    if n.requested_more_than_1eb:
        return Verdict("impossible-request")
    if n.requested_bytes is not None and n.total_bytes is not None and n.requested_bytes > n.total_bytes:
        return Verdict("impossible-request")
    if n.requested_bytes is None or n.reserved_unallocated_bytes is None:
        if n.legacy_form == "thc":
            why = "the pre-1.0 message prints no numbers"
        else:
            missing = [
                label
                for label, value in (
                    ("requested", n.requested_bytes),
                    ("reserved-but-unallocated", n.reserved_unallocated_bytes),
                )
                if value is None
            ]
            why = "the message does not state " + " and ".join(missing) + " (truncated?)"
        return Verdict(
            "capacity",
            f"fragmentation vs capacity undecided: {why}; treat as capacity after trying expandable segments",
        )
    if n.truncated_reserved is not None and n.reserved_unallocated_max_bytes is not None:
        low, high = n.reserved_unallocated_bytes, n.reserved_unallocated_max_bytes
        read = (
            f"the reserved total is cut off at '{n.truncated_reserved}': only one unit puts it between the "
            f"allocated memory and the GPU's size, so the idle reserve is {format_bytes(low)} to {format_bytes(high)}"
        )
        if low >= n.requested_bytes:
            return Verdict("fragmentation", f"{read}, at least the {format_bytes(n.requested_bytes)} request")
        if high < n.requested_bytes:
            return Verdict("capacity", f"{read}, less than the {format_bytes(n.requested_bytes)} request")
        return Verdict(
            "capacity",
            f"fragmentation vs capacity undecided: {read}, on both sides of the request; "
            "treat as capacity after trying expandable segments",
        )
    if n.reserved_unallocated_bytes >= n.requested_bytes:
        return Verdict("fragmentation")
    return Verdict("capacity")
