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
