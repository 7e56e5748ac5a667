"""The command behind a generated reference page: rewrite it, or ``--check`` it for drift.

``references/cli-help.md`` (from every helper's ``--help``) and ``references/json-output.md``
(from the output schemas) are rendered from one source each and committed; CI fails when the
committed page is not what a fresh render gives. The two generators differ only in what they
render and in how they explain a drift. The rest - compare, write only when the text
changed, the one-line "stale" message, exit 1 under ``--check``, a usage error as one line
and exit 2 - is the same contract, kept here once so the two cannot drift apart.

Standard library, click and :mod:`memtune.errors` only: the generators run as plain
``python3 scripts/memtune/release/<generator>.py`` from a checkout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from memtune.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE


def sync_page(
    page: Path,
    text: str,
    *,
    check: bool,
    prog: str,
    regenerate: str,
    explain: Callable[[str], str] | None = None,
    written: str = "",
) -> int:
    """Make ``page`` hold ``text``, or (``check``) only say whether it does.

    Under ``check`` a stale or missing page is exit 1 and one line on stderr naming the page,
    what changed (``explain(current_page)``, when the generator can say) and the command that
    regenerates it. Otherwise the page is written only when its text differs - an unchanged
    page keeps its timestamp - and ``wrote PAGE`` plus ``written`` is printed.
    """
    current = page.read_text(encoding="utf-8") if page.exists() else ""
    if current == text:
        return EXIT_OK
    if check:
        why = explain(current) if explain else ""
        print(f"{prog}: {page.name} is stale: {f'{why}; ' if why else ''}run {regenerate}", file=sys.stderr)
        return EXIT_FINDINGS
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}{written}")
    return EXIT_OK


def run_command(command: click.Command, prog: str, argv: Sequence[str] | None) -> int:
    """Run a generator's click command; a usage error is one line and exit 2, as for the helpers."""
    try:
        code = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.UsageError as exc:
        print(f"{prog}: error: {' '.join(exc.format_message().split())} (see --help)", file=sys.stderr)
        return EXIT_USAGE
    return int(code or 0)
