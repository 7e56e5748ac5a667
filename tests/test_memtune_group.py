"""The `memtune` click group: one subcommand per helper, the same commands and contract."""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import test_cli_bad_input as bad_input
from memtune import cli
from memtune.commands import group

REPO = Path(__file__).resolve().parent.parent
made = bad_input.made  # the fixture the bad-input rows expand against
HELPERS = sorted(p.stem for p in (REPO / "scripts").glob("*.py"))


def test_every_helper_is_a_subcommand_with_the_same_command_object() -> None:
    assert sorted(name.replace("-", "_") for name in group.COMMANDS) == HELPERS
    for name, command in group.COMMANDS.items():
        module = importlib.import_module(f"memtune.commands.{name.replace('-', '_')}")
        assert command is module.command
        assert group.command.get_command(click.Context(group.command), name) is command


@pytest.mark.parametrize("name", sorted(group.COMMANDS))
def test_subcommand_help_teaches(name: str) -> None:
    result = CliRunner().invoke(group.command, [name, "--help"], prog_name="memtune")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"usage: memtune {name} ")
    assert "examples:" in result.output


def test_same_answer_as_the_helper_script(capsys) -> None:
    from memtune.commands import estimate_memory

    assert estimate_memory.main(["--example", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    result = CliRunner().invoke(
        group.command, ["estimate-memory", "--example", "--json"], prog_name="memtune", standalone_mode=False
    )
    assert result.exception is None and result.return_value == 0
    assert json.loads(result.output) == direct


@pytest.mark.parametrize(
    ("argv", "code", "needles"),
    [
        ([], 2, ("choose a command", "diagnose", "sign-skill")),
        (["bogus"], 2, ("no such command 'bogus'", "see memtune --help")),
        (["estimate-memory", "--example", "--tp", "0"], 2, ("--tp", "see memtune estimate-memory --help")),
        (["plan-memory", "--preset", "a", "--preset", "b"], 2, ("--preset given twice",)),
        (["sign-skill", "verify", "--bogus"], 2, ("no such option: --bogus", "see memtune sign-skill verify --help")),
        (["check-env", "--set", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage"], 1, ()),
    ],
)
def test_errors_are_one_line_under_the_runner(argv: list[str], code: int, needles: tuple[str, ...], capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.run(group.main, "memtune", argv)
    out, err = capsys.readouterr()
    assert stop.value.code == code, err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memtune: error: "), err
        assert out == ""
        for needle in needles:
            assert needle in lines[0]
    else:
        assert "MT007" in out and err == ""


def test_console_script_is_declared_and_installed() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'memtune = "memtune.commands.group:console"' in text
    script = Path(sys.executable).parent / "memtune"
    assert script.exists(), f"{script} missing: pip install -e . (the README's set-up) installs it"
    proc = subprocess.run(
        [str(script), "diagnose", "--symptom", "OOM on one rank only", "--json", "--limit", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["matches"]) == 1
    bad = subprocess.run([str(script), "--no-such-option"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--no-such-option" in bad.stderr


def _group_rows() -> list:
    """Every bad-input row; the default run keeps the first two rows of each helper (the group
    only routes to the same command objects, whose every row test_cli_bad_input runs in the
    default run), the rest run with -m slow."""
    seen: dict[str, int] = {}
    params = []
    for param in bad_input.ROWS:
        helper = param.values[0].helper
        seen[helper] = seen.get(helper, 0) + 1
        slow = [pytest.mark.slow] if seen[helper] > 2 else []
        params.append(pytest.param(*param.values, id=param.id, marks=[*param.marks, *slow]))
    return params


@pytest.mark.parametrize("case", _group_rows())
def test_bad_input_table_holds_through_the_group(case: bad_input.Row, made: Path, capsys, monkeypatch) -> None:
    """Every row of the bad-input table, run as `memtune <helper> ...`: the same one line
    (prefixed memtune) with the same needles, the same exit code. Standard input is empty, as
    for the table's own runs (pytest's stand-in cannot be read)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    argv = [case.helper.replace("_", "-"), *bad_input.expand(case.args, made)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.run(group.main, "memtune", argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert stop.value.code == case.code, err
    assert len(lines) == 1 and lines[0].startswith("memtune: error: "), err
    for needle in case.needles:
        assert needle.lower() in lines[0].lower(), f"{needle!r} not named in: {lines[0]}"
    assert out.strip() == "" or "--json" in argv
