"""Byte units, defined once.

Memory figures cross the whole pipeline - the GPU table (MiB as nvidia-smi reports them),
the estimator (GiB constants), the planner and the reports (GiB shown to people) - and
a second, slightly different definition in one module (``1e9`` where ``2**30`` was meant)
would shift a fits/does-not-fit verdict without any test noticing. Every module imports
these names instead of writing the powers again. Decimal units (GB = 10^9 bytes) appear
only where a user's size is parsed or a GB figure from a log is printed.

Standard library only and imports nothing: any group may depend on it without a cycle,
and the helpers' ``--help`` paths (which must run without PyYAML) can import it.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4


def human_bytes(value: int | None, small_digits: int = 1, missing: str = "?") -> str:
    """Bytes for people: GiB (two decimals) from 1 GiB up, else MiB, else KiB with
    ``small_digits`` decimals; ``missing`` when there is no figure. The reports differ only in
    how precise a small figure is and how they mark a missing one, so they share the scale."""
    if value is None:
        return missing
    if abs(value) >= GIB:
        return f"{value / GIB:.2f} GiB"
    if abs(value) >= MIB:
        return f"{value / MIB:.{small_digits}f} MiB"
    return f"{value / KIB:.{small_digits}f} KiB"
