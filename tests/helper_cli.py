"""Two ways to run a helper in a test: in-process (``invoke``, the default) or as a user does.

Starting a fresh interpreter per call costs ~0.3-1 s on this machine (imports, PyYAML,
the SKILL.md table) and most tests only want the helper's exit code and output, so they
call the command's ``main(argv)`` in this process through ``invoke``. A subprocess
(``run_helper``) is kept for what only a real process shows: the entry point's bootstrap
(missing packages, bytecode prefix), closed standard streams, a reader that hangs up.

``invoke`` mirrors ``click.testing.CliRunner.invoke``: its result has the same
``exit_code`` / ``stdout`` / ``stderr`` fields, so when the commands move to click only the
body of ``invoke`` changes, not the tests that call it.
"""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_helper(name: str, *args: str) -> subprocess.CompletedProcess:
    """``python3 scripts/<name>.py args...`` in a fresh interpreter (text output)."""
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / f"{name}.py"), *args], capture_output=True, text=True, timeout=60
    )


@dataclass(frozen=True)
class Result:
    """What a helper run leaves behind: the exit code and both streams as text."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        """``subprocess.CompletedProcess`` spelling, so converted tests read the same."""
        return self.exit_code


@contextmanager
def _environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) variables for the duration of one call, then restore."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _text_stream(data: bytes = b"") -> io.TextIOWrapper:
    # A real text stream over bytes, like a pipe: `.buffer` works (diagnose reads stdin as bytes).
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None, write_through=True)


def invoke(
    helper: str,
    *args: str,
    stdin: bytes | str | None = None,
    env: Mapping[str, str | None] | None = None,
) -> Result:
    """Run ``scripts/<helper>.py args...`` in this process and capture what it prints.

    The command's ``main`` runs under ``memtune.cli.run`` - the wrapper the entry point
    uses - so an ``InputError`` becomes the same one-line message and exit 2 a user sees;
    any other exception is a bug and propagates into the test. Standard input is empty
    unless ``stdin`` is given; ``env`` changes variables for this call only. ``COLUMNS``
    is 80, as for a helper whose output is a pipe, so ``--help`` wraps the same way.
    """
    from memtune import cli

    main = importlib.import_module(f"memtune.commands.{helper}").main
    data = stdin.encode("utf-8") if isinstance(stdin, str) else (stdin or b"")
    out, err, inp = _text_stream(), _text_stream(), _text_stream(data)
    saved = sys.stdin, sys.stdout, sys.stderr
    code: int | str | None = 0
    with _environment({"COLUMNS": "80", **(env or {})}):
        sys.stdin, sys.stdout, sys.stderr = inp, out, err
        try:
            cli.run(main, f"{helper}.py", list(args))
        except SystemExit as stop:
            code = stop.code
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
    if code is None:
        code = 0
    elif isinstance(code, str):  # sys.exit("message"): printed to stderr, exit 1
        err.write(code + "\n")
        code = 1
    return Result(code, _read(out), _read(err))


def _read(stream: io.TextIOWrapper) -> str:
    stream.flush()
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8", errors="replace")
