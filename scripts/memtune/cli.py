"""Command-line conventions shared by every helper (DESIGN.md §3).

Exit codes: 0 ran fine, 1 the check found errors, 2 bad usage or bad input. Bad input
is expected input, so it is reported as one line on stderr naming the problem and the
fix, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, NoReturn, Sequence

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class InputError(Exception):
    """Bad usage or bad input: the message is the one line the user sees."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (argparse prints the
    whole usage block first, which buries the actual problem)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(EXIT_USAGE)


def make_parser(prog: str, description: str, epilog: str | None = None) -> ArgumentParser:
    """A parser whose --help keeps the description's and examples' line breaks."""
    return ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout (the contract agents parse)."""
    json.dump(document, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def run(main: Callable[[Sequence[str] | None], int], prog: str, argv: Sequence[str] | None = None) -> NoReturn:
    """Run a helper's ``main`` and turn every expected failure into its exit code.

    Only ``InputError`` (and the OS errors a user's bad path causes) are expected; any
    other exception is a bug in the helper and keeps its traceback so it gets reported.
    """
    try:
        code = main(argv)
    except InputError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        code = EXIT_USAGE
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        sys.stderr.write(f"{prog}: error: {exc.strerror or exc}{where}\n")
        code = EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
    except BrokenPipeError:
        # `helper | head` closed the pipe: not an error worth a traceback.
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        code = EXIT_OK
    raise SystemExit(code)
