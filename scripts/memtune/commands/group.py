"""memtune: every helper as a subcommand of one command (the console script of a pip install).

An installed skill copy runs ``python3 scripts/<helper>.py``; a pip-installed checkout (or a
developer) can run the same commands as ``memtune <helper>``: the same click command objects,
so options, help, messages and exit codes are identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from memtune import cli
from memtune.cli import Group, invoke
from memtune.commands import (
    check_env,
    diagnose,
    estimate_memory,
    lint_skill,
    plan_memory,
    regather_config,
    run_benchmark,
    runtime_memory,
    sign_skill,
    trace_regression,
)
from memtune.errors import InputError

DESCRIPTION = """\
Fix and prevent GPU out-of-memory failures in Megatron Bridge / Megatron-Core training: every
helper of the nemo-mbridge-perf-memory-tuning skill as one command. `memtune HELPER --help`
explains each; the skill's scripts/<helper>.py run the same commands."""

EPILOG = """\
examples:
  memtune diagnose train.log
  memtune estimate-memory --example
  memtune plan-memory --preset llama3-70b --gpus 32 --tp 4 --pp 4 --gpu H100-80GB
  memtune check-env --script train.sh --torch-version 2.9.1
  memtune trace-regression before.sh after.sh --gpu H100-80GB
  memtune runtime-memory train.log --gpu H100-80GB
  memtune sign-skill verify

exit codes: 0 fine, 1 findings (check-env errors, lint errors, a failed verification), 2 bad usage or input."""

#: subcommand -> the helper's click command (the names scripts/<helper>.py has, with '-').
COMMANDS: dict[str, click.Command] = {
    "diagnose": diagnose.command,
    "estimate-memory": estimate_memory.command,
    "plan-memory": plan_memory.command,
    "check-env": check_env.command,
    "regather-config": regather_config.command,
    "trace-regression": trace_regression.command,
    "runtime-memory": runtime_memory.command,
    "lint-skill": lint_skill.command,
    "sign-skill": sign_skill.command,
    "run-benchmark": run_benchmark.command,
}


@click.group("memtune", cls=Group, help=DESCRIPTION, epilog=EPILOG)
@click.version_option(package_name="nemo-mbridge-perf-memory-tuning", message="%(prog)s %(version)s")
@click.pass_context
def command(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise InputError(f"choose a command: {', '.join(COMMANDS)} (see memtune --help)")


for _name, _command in COMMANDS.items():
    command.add_command(_command, _name)


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "memtune", argv)


def console() -> None:
    """The ``memtune`` console script: :func:`main` under the one-line error contract."""
    cli.run(main, "memtune")
