"""The exception and exit codes every part of memtune shares.

They live here, not in the CLI layer, so that a library module can refuse bad input
without importing the command-line code: the readers, estimators and diagnosers raise
``InputError`` and only ``memtune.cli.run`` turns it into a one-line message and exit 2.

Exit codes: 0 ran fine, 1 the check found errors, 2 bad usage or bad input.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class InputError(Exception):
    """Bad usage or bad input: the message is the one line the user sees."""
