"""claude-code and codex adapters driven end to end through fake executables.

Each fake is a tiny program named ``claude`` / ``codex`` on PATH that records its argv and
stdin and prints a canned event stream in the real CLI's format:

- Claude Code ``claude -p --output-format stream-json --verbose``: ``system``/``init``,
  ``assistant`` messages whose content holds ``tool_use`` blocks (``Skill``, ``Bash``,
  ``Read``), ``user`` messages holding the matching ``tool_result`` blocks (``is_error``),
  and one final ``result`` (``subtype`` success / error_max_turns, ``is_error``, ``usage``).
- Codex ``codex exec --json``: ``thread.started``, ``turn.started``, ``item.started`` /
  ``item.completed`` for ``command_execution`` (``command``, ``aggregated_output``,
  ``exit_code``, ``status``), ``reasoning`` and ``agent_message`` items,
  ``turn.completed`` with ``usage``, ``turn.failed`` and top-level ``error`` events.

If either CLI's adapter stops reading these shapes (or stops calling the CLI the way the
shapes assume), these tests fail.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from memtune.bench.agents import WITH, WITHOUT, ClaudeCodeAgent, CodexAgent, Task
from memtune.bench.dataset import load_dataset
from memtune.bench.skill import load_skill

REPO = Path(__file__).resolve().parent.parent
SKILL = load_skill(REPO)
DATASET = load_dataset(REPO / "evals" / "evals.json")
LOG = "megatron_llama3_70b_sft_rank13_oom.log"


def install_fake(bin_dir: Path, program: str, events: list[dict], exit_code: int = 0, stderr: str = "") -> Path:
    """A fake CLI: saves argv + stdin next to itself, prints the events as JSONL."""
    bin_dir.mkdir(exist_ok=True)
    stream = bin_dir / f"{program}.jsonl"
    stream.write_text("".join(json.dumps(e) + "\n" for e in events) + "a non-JSON banner line\n")
    script = bin_dir / program
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, pathlib\n"
        f"here = pathlib.Path({str(bin_dir)!r})\n"
        f"(here / '{program}.call.json').write_text(json.dumps({{'argv': sys.argv[1:], 'stdin': sys.stdin.read()}}))\n"
        f"sys.stdout.write((here / '{program}.jsonl').read_text())\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def make_task(tmp_path: Path, condition: str) -> Task:
    case = DATASET.by_id()["frag-log-diagnosis"]
    work = tmp_path / "project"
    work.mkdir()
    (work / LOG).write_bytes((REPO / "evals" / "files" / LOG).read_bytes())
    return Task(case, condition, 1, work, {}, SKILL if condition == WITH else None)


def call_of(bin_dir: Path, program: str) -> dict:
    return json.loads((bin_dir / f"{program}.call.json").read_text())


CLAUDE_OK = [
    {
        "type": "system",
        "subtype": "init",
        "session_id": "s1",
        "model": "claude-sonnet-4-5",
        "tools": ["Bash", "Read", "Skill"],
        "cwd": "/p",
    },
    {
        "type": "assistant",
        "session_id": "s1",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "text", "text": "Loading the memory skill."},
                {"type": "tool_use", "id": "toolu_01", "name": "Skill", "input": {"skill": SKILL.name}},
            ],
            "usage": {"input_tokens": 50, "output_tokens": 5},
        },
    },
    {
        "type": "user",
        "session_id": "s1",
        "message": {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Launching skill: " + SKILL.name}
            ],
        },
    },
    {
        "type": "assistant",
        "session_id": "s1",
        "message": {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "Bash",
                    "input": {
                        "command": f"python3 .claude/skills/{SKILL.name}/scripts/diagnose.py missing.log",
                        "description": "Diagnose the log",
                    },
                }
            ],
        },
    },
    {
        "type": "user",
        "session_id": "s1",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "is_error": True,
                    "content": "Exit code 2\ndiagnose.py: error: missing.log: no such file",
                }
            ],
        },
    },
    {
        "type": "assistant",
        "session_id": "s1",
        "message": {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_03",
                    "name": "Bash",
                    "input": {"command": f"python3 .claude/skills/{SKILL.name}/scripts/diagnose.py {LOG}"},
                }
            ],
        },
    },
    {
        "type": "user",
        "session_id": "s1",
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_03",
                    "is_error": False,
                    "content": [{"type": "text", "text": "[1] fragmentation - GPU 0"}],
                }
            ],
        },
    },
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 5123,
        "num_turns": 4,
        "result": "Fragmentation: 172 MiB requested while 2.84 GiB sat reserved but unallocated.",
        "session_id": "s1",
        "total_cost_usd": 0.01,
        "usage": {
            "input_tokens": 120,
            "cache_creation_input_tokens": 30,
            "cache_read_input_tokens": 900,
            "output_tokens": 80,
        },
    },
]


def test_claude_code_adapter_through_a_fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = install_fake(tmp_path / "bin", "claude", CLAUDE_OK)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    task = make_task(tmp_path, WITH)
    result = ClaudeCodeAgent(timeout=60).run(task)
    call = call_of(bin_dir, "claude")
    argv = call["argv"]
    assert argv[0] == "-p" and LOG in argv[1] and task.case.question.strip()[:40] in argv[1]
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    assert result.error is None and result.activated_skill == SKILL.name
    assert result.answer.startswith("Fragmentation: 172 MiB")
    assert [c["failed"] for c in result.extra["tool_calls"]] == [True, False]
    assert result.commands[1].endswith(f"diagnose.py {LOG}")
    assert (result.tokens_in, result.tokens_out) == (1050, 80) and result.extra["num_turns"] == 4


def test_claude_code_error_result_and_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = CLAUDE_OK[:4] + [
        {
            "type": "result",
            "subtype": "error_max_turns",
            "is_error": True,
            "num_turns": 3,
            "errors": ["Reached maximum number of turns (2)"],
            "session_id": "s1",
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    ]
    bin_dir = install_fake(tmp_path / "bin", "claude", events, exit_code=1, stderr="stopped\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = ClaudeCodeAgent(timeout=60).run(make_task(tmp_path, WITHOUT))
    assert result.answer == "" and result.error is not None
    assert "claude exit 1" in result.error and "error_max_turns" in result.error and "Reached maximum" in result.error
    assert result.extra["tool_calls"][0]["failed"] is None  # no tool_result arrived for it


CODEX_OK = [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {
        "type": "item.completed",
        "item": {"id": "item_0", "type": "reasoning", "text": "**Reading the skill** before diagnosing the log"},
    },
    {
        "type": "item.started",
        "item": {
            "id": "item_1",
            "type": "command_execution",
            "command": f"bash -lc 'cat .agents/skills/{SKILL.name}/SKILL.md'",
            "aggregated_output": "",
            "exit_code": None,
            "status": "in_progress",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_1",
            "type": "command_execution",
            "command": f"bash -lc 'cat .agents/skills/{SKILL.name}/SKILL.md'",
            "aggregated_output": "---\nname: ...",
            "exit_code": 0,
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_2",
            "type": "command_execution",
            "command": f"bash -lc 'python3 .agents/skills/{SKILL.name}/scripts/diagnose.py nope.log'",
            "aggregated_output": "diagnose.py: error: nope.log: no such file\n",
            "exit_code": 2,
            "status": "failed",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_3",
            "type": "command_execution",
            "command": f"bash -lc 'python3 .agents/skills/{SKILL.name}/scripts/diagnose.py {LOG}'",
            "aggregated_output": "[1] fragmentation - GPU 0\n",
            "exit_code": 0,
            "status": "completed",
        },
    },
    {
        "type": "item.completed",
        "item": {
            "id": "item_4",
            "type": "agent_message",
            "text": "Fragmentation: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        },
    },
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}},
]


def test_codex_adapter_through_a_fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = install_fake(tmp_path / "bin", "codex", CODEX_OK)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    task = make_task(tmp_path, WITH)
    result = CodexAgent(timeout=60).run(task)
    call = call_of(bin_dir, "codex")
    assert call["argv"][:2] == ["exec", "--json"] and call["argv"][-1] == "-"
    assert call["argv"][call["argv"].index("--cd") + 1] == str(task.workdir)
    assert task.case.question.strip()[:40] in call["stdin"] and LOG in call["stdin"]
    assert result.error is None and result.activated_skill == SKILL.name
    assert result.answer.startswith("Fragmentation") and len(result.commands) == 3  # started items are not doubled
    assert [(c["exit_code"], c["failed"]) for c in result.extra["tool_calls"]] == [(0, False), (2, True), (0, False)]
    assert (result.tokens_in, result.tokens_out) == (24763, 122)


def test_codex_turn_failed_and_error_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = CODEX_OK[:2] + [
        {"type": "error", "message": "stream disconnected before completion"},
        {"type": "turn.failed", "error": {"message": "unexpected status 401 Unauthorized"}},
    ]
    bin_dir = install_fake(tmp_path / "bin", "codex", events, exit_code=1)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = CodexAgent(timeout=60).run(make_task(tmp_path, WITHOUT))
    assert result.answer == "" and result.activated_skill is None
    assert (
        "codex exit 1" in result.error and "401 Unauthorized" in result.error and "stream disconnected" in result.error
    )
