"""The click layer every helper shares (memtune.cli, memtune.commands.options)."""

from __future__ import annotations

import click
import pytest

from memtune import cli
from memtune.commands.options import GPU, HEADROOM, SIZE, GpuNameType
from memtune.commands.run_inputs import GivenSize
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError


@click.command("toy", cls=cli.Command, help="A toy.\n\n  kept   as written", epilog="examples:\n  toy --n 1")
@cli.option("--n", type=click.IntRange(min=1), help="a number")
@cli.option("--tag", multiple=True, help="repeatable")
@cli.option("--json", "as_json", is_flag=True)
@cli.option("--boom", type=click.Choice(("interrupt", "pipe", "input")))
def toy(n: int | None, tag: tuple[str, ...], as_json: bool, boom: str | None) -> int:
    if boom == "interrupt":
        raise KeyboardInterrupt
    if boom == "pipe":
        raise BrokenPipeError
    if boom == "input":
        raise InputError("bad\ninput")
    print(n, list(tag), as_json)
    return EXIT_FINDINGS if n == 7 else EXIT_OK


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.run(lambda a: cli.invoke(toy, "toy.py", a), "toy.py", argv)
    out, err = capsys.readouterr()
    return int(stop.value.code or 0), out, err


def test_values_flags_and_repeatable_options(capsys) -> None:
    assert run(["--n", "3", "--tag", "a", "--tag", "b", "--json", "--json"], capsys) == (0, "3 ['a', 'b'] True\n", "")
    assert run(["--n", "7"], capsys)[0] == 1  # a command's own code passes through


def test_single_valued_option_given_twice_is_refused(capsys) -> None:
    code, out, err = run(["--n", "3", "--n", "4"], capsys)
    assert (code, out) == (2, "")
    assert err == "toy.py: error: --n given twice ('3', then '4'); give it once\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--n", "0"], "toy.py: error: --n: 0 is not in the range x>=1 (see toy.py --help)"),
        (["--nn", "1"], "toy.py: error: no such option: --nn (did you mean --json or --n?) (see toy.py --help)"),
        (["--n"], "toy.py: error: option '--n' requires an argument (see toy.py --help)"),
        (["extra"], "toy.py: error: got unexpected extra argument (extra) (see toy.py --help)"),
        (["--boom", "input"], "toy.py: error: bad input"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str], line: str, capsys) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out, err) == (2, "", line + "\n")


def test_ctrl_c_and_closed_pipe_keep_their_meaning(capsys) -> None:
    assert run(["--boom", "interrupt"], capsys) == (130, "", "toy.py: interrupted\n")
    assert run(["--boom", "pipe"], capsys)[:2] == (0, "")


def test_help_exits_0_and_keeps_the_layout(capsys) -> None:
    for flag in ("-h", "--help"):
        code, out, err = run([flag], capsys)
        assert code == 0 and err == ""
        assert out.startswith("usage: toy.py [OPTIONS]")
        assert "  kept   as written\n" in out and out.rstrip().endswith("examples:\n  toy --n 1")


def test_size_type() -> None:
    assert SIZE.convert("80GB", None, None) == GivenSize("80GB", 80 * 10**9)
    assert SIZE.convert("81559MiB", None, None).nbytes == 81559 * 2**20
    assert SIZE.convert("80", None, None).nbytes == SIZE.convert("80GiB", None, None).nbytes == 80 * 2**30
    for bad, reason in (("-1GiB", "negative"), ("0GB", "positive"), ("80XB", "not a positive size")):
        with pytest.raises(click.BadParameter, match=reason):
            SIZE.convert(bad, None, None)


def test_headroom_type() -> None:
    assert HEADROOM.convert("12.5%", None, None).bytes_of(800) == 100
    assert HEADROOM.convert("0GiB", None, None).bytes_of(800) == 0
    for bad in ("100%", "-5%", "abc%", "lots", "-1GiB"):
        with pytest.raises(click.BadParameter):
            HEADROOM.convert(bad, None, None)


def test_gpu_type_checks_the_name_and_keeps_it_as_written() -> None:
    assert GPU.convert(" h100 ", None, None) == "h100"
    with pytest.raises(InputError, match=r"--gpu 'Z80': unknown GPU.*give --gpu-memory"):
        GPU.convert("Z80", None, None)
    with pytest.raises(InputError, match="leave --gpu out"):
        GpuNameType(fallback="or leave --gpu out").convert("Z80", None, None)
