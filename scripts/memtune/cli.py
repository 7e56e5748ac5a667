"""Command-line conventions shared by every helper (DESIGN.md §3).

Exit codes: 0 ran fine, 1 the check found errors, 2 bad usage or bad input. Bad input
is expected input, so it is reported as one line on stderr naming the problem and the
fix, never as a traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from memtune.errors import EXIT_OK, EXIT_USAGE, InputError


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (argparse prints the
    whole usage block first, which buries the actual problem)."""

    _argv: Sequence[str] = ()

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)  # kept for error()'s hint
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        match = re.fullmatch(r"argument ((?:-[\w-]+/?)+): expected one argument", message)
        if match:
            # `--gpu-memory -1GiB`: argparse reads a value that starts with '-' as an option
            names = match.group(1).split("/")
            argv = list(self._argv)
            given = next((i for i, word in enumerate(argv) if word in names), None)
            after = argv[given + 1] if given is not None and given + 1 < len(argv) else ""
            if after.startswith("-") and after.split("=")[0] not in self._option_string_actions:
                message += f"; a value that starts with '-' must be attached: {argv[given]}={argv[given + 1]}"
            short = next(
                (
                    w
                    for w in argv
                    if given is None
                    and w.startswith("--")
                    and "=" not in w
                    and any(n.startswith(w) and n != w for n in names)
                ),
                None,
            )
            if short:
                # argparse takes `--lora` as an abbreviation of `--lora-dim`: say so, or the
                # user hunts for a value they never meant to give
                message += f"; {short} was read as an abbreviation of {names[-1]}; spell options out in full"
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(EXIT_USAGE)


class Once(argparse.Action):
    """``action=Once`` for an option that names one thing (--preset, --config FILE): given
    twice, argparse would silently keep the last, and the answer would be about a run the
    user did not describe, so the second is a one-line usage error instead."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None)
        if before is not None:
            raise InputError(f"{option_string} given twice ({before!r}, then {values!r}); give it once")
        setattr(namespace, self.dest, values)


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


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

    Only ``InputError`` (and the OS and decoding errors a user's bad file causes) are
    expected; any other exception is a bug in the helper and keeps its traceback so it
    gets reported.
    """
    if sys.stdout is None:  # started with stdout closed (`>&-`): the answer goes nowhere, errors still show
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    try:
        code = main(argv)
        sys.stdout.flush()  # a full disk or a closed pipe shows up here, not in a traceback at exit
    except InputError as exc:
        sys.stderr.write(f"{prog}: error: {' '.join(str(exc).splitlines())}\n")  # the contract is one line
        code = EXIT_USAGE
    except BrokenPipeError:
        # `helper | head` closed the pipe: not an error worth a traceback.
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        code = EXIT_OK
    except OSError as exc:
        # a user's path: missing, a directory, no permission, a dangling link, a name too long ...
        # (an OS error without a file name is the machine's problem, not the input's: keep it loud)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not getattr(exc, "filename", None):
            sys.stderr.write(f"{prog}: error: cannot write the answer: {exc.strerror}\n")
            raise SystemExit(EXIT_USAGE) from None
        if not getattr(exc, "filename", None):
            raise
        if exc.errno in _FULL:
            sys.stderr.write(
                f"{prog}: error: cannot write {exc.filename}: {exc.strerror}; free some space and run again\n"
            )
        else:
            sys.stderr.write(f"{prog}: error: {exc.strerror or exc}: {exc.filename}\n")
        code = EXIT_USAGE
    except UnicodeDecodeError as exc:
        # a loader read a user's file as text without memtune.files.textfile: still one line, not a traceback
        sys.stderr.write(
            f"{prog}: error: an input file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
            f"at offset {exc.start}); pass a text file saved as UTF-8\n"
        )
        code = EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
    raise SystemExit(code)
