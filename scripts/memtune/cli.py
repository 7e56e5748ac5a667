"""Command-line conventions shared by every helper (the contract README.md and SKILL.md state).

Exit codes: 0 ran fine, 1 the check found errors, 2 bad usage or bad input. Bad input
is expected input, so it is reported as one line on stderr naming the problem and the
fix, never as a traceback.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import click

from memtune.errors import EXIT_OK, EXIT_USAGE, InputError

FC = TypeVar("FC", bound="Callable[..., Any] | click.Command")


class Option(click.Option):
    """An option that refuses to be given twice and knows its --help section.

    click keeps the last of two ``--preset`` values without a word, and the answer would then
    be about a run the user did not describe; every single-valued option of these helpers is
    therefore collected as a list by the parser and refused when it holds more than one value.
    Flags (``--json --json``) and repeatable options (``multiple=True``) are not affected.
    """

    def __init__(self, *args: Any, section: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.section = section

    def _once(self) -> bool:
        return not (self.multiple or self.count or self.is_flag) and self.nargs == 1

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        if not self._once():
            return
        # The parser keeps one entry per spelling; asking it to append instead of store lets
        # handle_parse_result see every value the user gave (--gpus 8 --world-size 16 too).
        for table in (getattr(parser, "_long_opt", {}), getattr(parser, "_short_opt", {})):
            for name in self.opts + self.secondary_opts:
                entry = table.get(name)
                if entry is not None and getattr(entry, "action", None) == "store":
                    entry.action = "append"

    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> tuple[Any, list[str]]:
        given = opts.get(self.name) if self.name else None
        if self._once() and isinstance(given, list):
            if len(given) > 1:
                raise InputError(f"{self.opts[0]} given twice ({given[0]!r}, then {given[1]!r}); give it once")
            opts = {**opts, self.name: given[0]}
        return super().handle_parse_result(ctx, opts, args)


def option(*names: str, **kwargs: Any) -> Callable[[FC], FC]:
    """``click.option`` with :class:`Option` (given-twice check, --help sections)."""
    return click.option(*names, cls=Option, **kwargs)


CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Interrupted(Exception):
    """Ctrl-C carried past click, which would print a blank line and raise Abort."""


class _PipeClosed(Exception):
    """A BrokenPipeError carried past click's own handler, which would exit 1 for it."""


class _Contract:
    """What every helper command shares beyond click.

    --help as these helpers have always printed it: ``usage:`` in lower case, the
    description and the examples verbatim (their line breaks are the layout), and the
    options under the section headings the shared decorators give them. And the exit
    contract: a closed pipe and Ctrl-C reach :func:`run` unchanged instead of being turned
    into click's exit 1 / "Aborted!".
    """

    help: str | None
    epilog: str | None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except BrokenPipeError as exc:
            raise _PipeClosed() from exc
        except KeyboardInterrupt as exc:
            raise _Interrupted() from exc

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        pieces = self.collect_usage_pieces(ctx)  # type: ignore[attr-defined]
        formatter.write_usage(ctx.command_path, " ".join(pieces), prefix="usage: ")

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.help:
            formatter.write_paragraph()
            formatter.write(self.help.rstrip("\n") + "\n")

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write_paragraph()
            formatter.write(self.epilog.rstrip("\n") + "\n")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        arguments: list[tuple[str, str]] = []
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if isinstance(param, click.Argument):
                text = getattr(param, "help_text", None)
                if text:
                    # get_usage_pieces: make_metavar's signature changed in click 8.2
                    arguments.append((" ".join(param.get_usage_pieces(ctx)), text))
                continue
            record = param.get_help_record(ctx)
            if record is not None:
                sections.setdefault(getattr(param, "section", None) or "options", []).append(record)
        if arguments:
            with formatter.section("positional arguments"):
                formatter.write_dl(arguments)
        general = sections.pop("options", [])  # the helper's own options (and -h) after the shared groups
        for title, records in [*sections.items(), ("options", general)]:
            if not records:
                continue
            with formatter.section(title):
                formatter.write_dl(records)
        if isinstance(self, click.Group):
            rows = []
            for name in self.list_commands(ctx):
                sub = self.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    rows.append((name, sub.get_short_help_str(limit=formatter.width)))
            if rows:
                with formatter.section("commands"):
                    formatter.write_dl(rows)

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Arguments are listed by format_options (click >= 8.5 would list them twice)."""


class Command(_Contract, click.Command):
    """A helper's click command: the shared help layout and context settings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(*args, **kwargs)


class Group(_Contract, click.Group):
    """A helper with subcommands (sign_skill.py, run_benchmark.py, memtune).

    Runs its own callback when no subcommand is given, so that the helper can say which
    ones exist in one line instead of click's help page or "Missing command"."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        kwargs.setdefault("invoke_without_command", True)
        kwargs.setdefault("no_args_is_help", False)
        super().__init__(*args, **kwargs)


class Argument(click.Argument):
    """A positional argument with a line of --help (click's own has none before 8.5)."""

    def __init__(self, *args: Any, help_text: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_text = help_text


def argument(*names: str, help_text: str | None = None, **kwargs: Any) -> Callable[[FC], FC]:
    return click.argument(*names, cls=Argument, help_text=help_text, **kwargs)


def invoke(command: click.Command, prog: str, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with ``command`` and run it; the exit code it returns.

    click runs with ``standalone_mode=False`` so that every error comes back here as an
    exception and :func:`run` prints it as the one-line contract, never click's usage block.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=args, prog_name=prog, standalone_mode=False)
    except _PipeClosed:
        raise BrokenPipeError() from None
    except _Interrupted:
        raise KeyboardInterrupt() from None
    if result is None:
        return EXIT_OK
    if isinstance(result, bool) or not isinstance(result, int):
        raise TypeError(f"{prog}: a command returned {result!r}, not an exit code")
    return result


def _hint(param: click.Parameter | None) -> str:
    if param is None:
        return ""
    if isinstance(param, click.Option):
        longs = [o for o in param.opts if o.startswith("--")]
        return (longs or param.opts)[0]
    return (param.metavar or param.name or "").upper()


def usage_line(exc: click.UsageError, prog: str = "") -> str:
    """click's usage error as one line: what is wrong, then where --help is."""
    if isinstance(exc, click.NoSuchOption):
        text = f"no such option: {exc.option_name}"
        # a shortened option ("--seq") means the options it starts (--seq-length); click's
        # edit-distance guesses would offer --ep or --mbs instead
        known = {o for p in exc.ctx.command.params for o in (*p.opts, *p.secondary_opts)} if exc.ctx else set()
        guesses = sorted(o for o in known if o.startswith(exc.option_name) and o != exc.option_name)
        guesses = guesses or sorted(exc.possibilities or ())
        if guesses:
            text += f" (did you mean {' or '.join(guesses)}?)"
    elif isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        hint = exc.param_hint if isinstance(exc.param_hint, str) else _hint(exc.param)
        text = f"{hint}: {exc.message}" if hint else exc.message
    else:
        text = exc.format_message()
    text = " ".join(text.split()).rstrip(".")
    text = text[:1].lower() + text[1:]
    where = exc.ctx.command_path if exc.ctx is not None else prog
    return f"{text} (see {where} --help)" if where else f"{text} (see --help)"


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def print_json(document: Any) -> None:
    """Exactly one JSON document on stdout (the contract agents parse)."""
    import json  # only --json needs it: not imported for --help or text output

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
    except click.UsageError as exc:
        sys.stderr.write(f"{prog}: error: {usage_line(exc, prog)}\n")
        code = EXIT_USAGE
    except click.ClickException as exc:  # any other error click reports (a bad file of click's own, ...)
        sys.stderr.write(f"{prog}: error: {' '.join(exc.format_message().split())}\n")
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
    except (KeyboardInterrupt, click.Abort):
        sys.stderr.write(f"{prog}: interrupted\n")
        code = 130
    raise SystemExit(code)
