"""Numbers as answers write them: plain values, percentages and sizes with their units.

Split from the grader (memtune.bench.grading) because reading "2.84GiB", "-28.4 %" or a table
cell's bare figure under a GiB header is a job of its own, shared by the numbers checks and the
figures check. Only the standard library is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

# A number as people write it in answers: 1,024 / 58.8 / -28.4 / 4.731e9 / .5
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\d.]\d)(?!\d)")


def extract_numbers(text: str) -> list[float]:
    """Every number written in ``text`` (thousands separators and a Unicode minus accepted)."""
    found = []
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        if not any(ch.isdigit() for ch in token):
            continue
        token = token.replace(",", "").replace("−", "-")
        try:
            value = float(token)
        except ValueError:
            continue
        if math.isfinite(value):
            found.append(value)
    return found


def number_matches(spec: Mapping[str, Any], numbers: Iterable[float]) -> float | None:
    """The first number within tolerance of the spec's value or an alternative, else None.

    Signs are ignored ("-28.4%" and "28.4% slower" say the same thing). Without a stated
    tolerance a number must match to 1e-9 relative.
    """
    targets = [float(spec["value"]), *map(float, spec.get("alternatives", ()))]
    absolute = float(spec.get("tolerance", 0.0))
    relative = float(spec.get("rel_tolerance", 0.0))
    for number in numbers:
        for target in targets:
            allowed = max(absolute, relative * abs(target), 1e-9 * abs(target))
            if abs(abs(number) - abs(target)) <= allowed:
                return number
    return None


# A percentage: "28.4%", "-28.4 %", "28.4 percent", "28.4 pct".
_PERCENT = re.compile(
    r"(?<![\w.])[-+−]?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)\s*(?:%|per\s?cent\b|pct\b)", re.IGNORECASE
)


def extract_percentages(text: str) -> list[float]:
    """Every number written as a percentage (the sign dropped: "-6%" and "6% slower" agree)."""
    return [float(m.group(1).replace(",", "")) for m in _PERCENT.finditer(text)]


# A size as answers write it: "172 MiB", "2.84GiB", "147.4 GB", "40,406,826,834,985 bytes".
_SIZE = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(k)?\s*"
    r"(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B)(?![A-Za-z])",
    re.IGNORECASE,
)
_PREFIX = {"k": 1, "m": 2, "g": 3, "t": 4}


def significant_digits(number: str) -> int:
    """Digits that carry information: "0.05" has 1, "172" and "2.8" have 3 and 2, "80" has 2."""
    digits = number.replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def extract_sizes(text: str) -> list[tuple[str, tuple[float, ...], float]]:
    """Every size written with a unit: (as written, candidate byte values, rounding allowance).

    Why two candidates: "GB" and "GiB" are used interchangeably in training logs and
    tools (PyTorch prints GiB, many dashboards print the same number as GB), so a prefix
    is read both ways. Why an allowance: "0.17 GiB" is an honest rounding of 172 MiB; the
    last written digit may be off by half a unit (never credited beyond 5%, see
    size_matches)."""
    found = []
    for match in _SIZE.finditer(text):
        number, unit = match.group(1).replace(",", ""), match.group(3).lower()
        thousands = 1000.0 if match.group(2) else 1.0  # "37.6k GiB"
        value = float(number) * thousands
        decimals = len(number.split(".", 1)[1]) if "." in number else 0
        power = _PREFIX.get(unit[0], 0) if unit not in ("b", "byte", "bytes") else 0
        scales = (1.0,) if power == 0 else (1000.0**power, 1024.0**power)
        candidates = tuple(value * scale for scale in scales)
        allowance = 0.5 * 10.0**-decimals * max(scales) * thousands
        found.append((match.group(0), candidates, allowance))
    return found


#: How close a number with fewer than ``min_digits`` digits must be to count: it is the value.
EXACT_SHARE = 0.001
#: "4.69 → 7.58 GiB", "from 4.69 to 7.58 GiB": a before/after pair, for ``delta`` checks.
_PAIR = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:(TiB|GiB|MiB|TB|GB|MB)\s*)?(?:→|->|=>|⇒|\bto\b)\s*(\d+(?:\.\d+)?)\s*"
    r"(TiB|GiB|MiB|TB|GB|MB)(?![A-Za-z])",
    re.IGNORECASE,
)


def pair_sizes(text: str) -> list[str]:
    """Each before/after pair rewritten as its difference ("+2.89 GiB" for "4.69 → 7.58 GiB"),
    so a growth check accepts an answer that gives both ends instead of the difference."""
    out = []
    for m in _PAIR.finditer(text):
        if m.group(2) and m.group(2).lower() != m.group(4).lower():
            continue
        before, after = m.group(1), m.group(3)
        decimals = max(len(x.split(".", 1)[1]) if "." in x else 0 for x in (before, after))
        out.append(f"{float(after) - float(before):.{decimals}f} {m.group(4)}")
    return out


def size_matches(spec: Mapping[str, Any], text: str) -> str | None:
    """The first size in ``text`` within tolerance of ``spec["bytes"]`` or one of its
    ``alternatives_bytes`` (as written), else None.

    A helper's number must carry its unit, and at least ``min_digits`` significant digits
    (default 2): a bare "172" could be anything, and a one-digit "~3 GB" from SKILL.md's
    measured tables lies near many users' numbers by coincidence. A spec whose own
    input is that coarse (values rounded to 0.01 GiB) sets ``min_digits`` to 1."""
    targets = [float(spec["bytes"]), *map(float, spec.get("alternatives_bytes", ()))]
    relative = float(spec.get("rel_tolerance", 0.02))
    min_digits = int(spec.get("min_digits", 2))
    for written, candidates, allowance in extract_sizes(text):
        number = _SIZE.match(written)
        assert number is not None, written  # ``written`` is a whole _SIZE match, so it matches again
        digits_ok = significant_digits(number.group(1)) >= min_digits
        for target in targets:
            if not digits_ok and not any(abs(c - target) <= EXACT_SHARE * target for c in candidates):
                continue  # a short number counts only where it is the value itself ("1 GiB" for 1.00 GiB)
            allowed = max(relative * target, min(allowance, 0.05 * target))
            if any(abs(c - target) <= allowed for c in candidates):
                return written
    return None


_UNIT_CELL = re.compile(r"\b(TiB|GiB|MiB|TB|GB|MB)\b")
_BARE_CELL = re.compile(r"^(\s*[~≈]?\s*)([-+]?\d+(?:\.\d+)?)(\s*)$")


def _with_unit(cell: str, unit: str) -> str:
    m = _BARE_CELL.match(cell)
    return f"{m.group(1)}{m.group(2)} {unit}{m.group(3)}" if m else cell


def with_table_units(text: str) -> str:
    """The answer with the unit of a markdown table's column header written after each bare
    number in that column ("| Failed request | 448.00 |" under "| | MiB |" reads "448.00 MiB"):
    a table that names its unit once states every size in it."""
    out: list[str] = []
    units: dict[int, str] = {}
    header_seen = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped.startswith("|"):
            units, header_seen = {}, False
            out.append(line)
            continue
        cells = stripped.strip("|").split("|")
        if all(re.fullmatch(r"\s*:?-{2,}:?\s*", c) for c in cells):
            out.append(line)
            continue
        if not header_seen:  # the first row of a table is its header
            header_seen = True
            units = {i: m.group(1) for i, c in enumerate(cells) if (m := _UNIT_CELL.search(c))}
            out.append(line)
            continue
        filled = [_with_unit(c, units[i]) if i in units else c for i, c in enumerate(cells)]
        out.append("|" + "|".join(filled) + "|" + ("\n" if line.endswith("\n") else ""))
    return "".join(out)
