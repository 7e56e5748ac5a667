"""references/cli-help.md is every helper's --help, regenerated in-process and checked for drift."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memtune.release import cli_reference as ref

REPO_ROOT = Path(__file__).resolve().parent.parent

CLICK_GROUP_HELP = """\
Usage: sign_skill.py [OPTIONS] COMMAND [ARGS]...

  Sign or verify skill.oms.sig.

Options:
  --help  Show this message and exit.

Commands:
  sign    write skill.oms.sig for a package tree, with a description long enough
          to wrap onto a second line
  verify  strictly verify a package tree against skill.oms.sig
"""


def test_committed_page_matches_the_helpers_help():
    """The CI drift check: regenerate with `python3 scripts/memtune/release/cli_reference.py`."""
    assert ref.main(["--check"]) == 0


def test_every_helper_and_subcommand_has_a_section():
    page = (REPO_ROOT / "references" / "cli-help.md").read_text(encoding="utf-8")
    for name in ref.helpers():
        assert f"## `{name}`" in page
    for title in ("sign_skill.py sign", "sign_skill.py verify", "run_benchmark.py run", "run_benchmark.py report"):
        assert f"## `{title}`" in page


def test_in_process_help_is_what_a_user_sees(monkeypatch):
    monkeypatch.setenv("COLUMNS", ref.COLUMNS)
    script = REPO_ROOT / "scripts" / "sign_skill.py"
    shown = subprocess.run(
        [sys.executable, str(script), "verify", "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert ref.capture_help(script, "verify") == shown


def test_capture_leaves_the_interpreter_as_it_found_it():
    before = (list(sys.argv), list(sys.path), sys.pycache_prefix, sys.dont_write_bytecode, os.environ.get("COLUMNS"))
    ref.capture_help(REPO_ROOT / "scripts" / "diagnose.py")
    assert (list(sys.argv), list(sys.path), sys.pycache_prefix, sys.dont_write_bytecode, os.environ.get("COLUMNS")) == (
        before
    )


def test_check_names_the_helper_whose_help_drifted(tmp_path, monkeypatch, capsys):
    page = tmp_path / "cli-help.md"
    monkeypatch.setattr(ref, "PAGE", page)
    assert ref.main(["--check"]) == 1  # no page yet
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("strictly verify a package tree", "verify a tree", 1), encoding="utf-8")
    capsys.readouterr()
    assert ref.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "cli-help.md is stale: the help of sign_skill.py changed" in err
    assert "run python3 scripts/memtune/release/cli_reference.py" in err and len(err.splitlines()) == 1


def test_a_failing_help_is_reported_with_the_helper_name(tmp_path):
    (tmp_path / "broken.py").write_text("import sys\nsys.stderr.write('boom\\n')\nsys.exit(2)\n")
    with pytest.raises(ref.HelpError, match=r"broken.py --help exited 2: boom"):
        ref.sections(tmp_path)


def test_subcommands_are_read_from_the_group_help():
    assert ref.subcommands(CLICK_GROUP_HELP) == ["sign", "verify"]
    page = {section.title: section.text for section in ref.sections()}
    assert ref.subcommands(page["sign_skill.py"]) == ["sign", "verify"]
    assert ref.subcommands(page["run_benchmark.py"]) != []
    assert ref.subcommands("usage: diagnose.py [-h] [--json] [FILE ...]\n\nDiagnose.\n") == []
    # a choice option in the usage is not a subcommand list
    assert ref.subcommands("usage: x.py [-h] [--agent {local,codex}]\n\nX.\n") == []


def test_bad_arguments_are_one_line_exit_2(capsys):
    assert ref.main(["--chek"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--chek" in err and err.startswith("cli_reference.py: error:")
