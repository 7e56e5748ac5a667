"""Two ways to run a helper in a test: in-process (``invoke``, the default) or as a user does.

Starting a fresh interpreter per call costs ~0.3-1 s on this machine (imports, PyYAML,
the SKILL.md table) and most tests only want the helper's exit code and output, so they
call the command's ``main(argv)`` in this process through ``invoke``. A subprocess
(``run_helper``) is kept for what only a real process shows: the entry point's bootstrap
(missing packages, bytecode prefix), closed standard streams, a reader that hangs up.

``invoke`` runs the command inside ``click.testing.CliRunner``'s isolation (captured byte
streams, a per-call environment) but through ``memtune.cli.run``, the wrapper the entry
point uses, so the one-line usage errors and exit codes are the ones a user sees; its result
has CliRunner's ``exit_code`` / ``stdout`` / ``stderr`` fields.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

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
    code: int | str | None = 0
    # CliRunner.isolation swaps in byte-backed standard streams (``.buffer`` works, as on a
    # pipe), applies ``env`` for this call only and wraps help at 80 columns.
    with CliRunner().isolation(input=data, env={"COLUMNS": "80", **(env or {})}) as streams:
        out, err = streams[0], streams[1]
        try:
            cli.run(main, f"{helper}.py", list(args))
        except SystemExit as stop:
            code = stop.code
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    if code is None:
        code = 0
    elif isinstance(code, str):  # sys.exit("message"): printed to stderr, exit 1
        return Result(1, _text(out), _text(err) + code + "\n")
    return Result(code, _text(out), _text(err))


def invoke_json(helper: str, *args: str, codes: Collection[int] = (0,)) -> Any:
    """The JSON document ``invoke(helper, *args)`` prints (pass ``--json`` in ``args``).

    The exit code must be one of ``codes`` - 0 unless the run is expected to report
    findings - else the test fails showing the helper's stderr, not a JSON decode error.
    """
    out = invoke(helper, *args)
    assert out.exit_code in codes, out.stderr
    return json.loads(out.stdout)


def _text(stream: io.BytesIO) -> str:
    return stream.getvalue().decode("utf-8", errors="replace")
