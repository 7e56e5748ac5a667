"""Name the file in an OSError raised while writing it.

``write()`` on a full disk raises ENOSPC without a file name, so the user would read
"no space left" and not know which file is now missing or stale. Library code that
writes a user's file (the signature, a benchmark report) wraps the write in
:func:`writing`, and the CLI's one-line error then says which file could not be written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Re-raise an OSError that has no file name with ``path`` as its file name."""
    try:
        yield
    except OSError as exc:
        if getattr(exc, "filename", None):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
