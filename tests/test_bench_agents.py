"""Agent adapters without running any agent: output parsers and the local agent's prompts."""

from __future__ import annotations

import json
from pathlib import Path

from helper_cli import invoke
from memtune.bench.agents import (
    WITH,
    WITHOUT,
    LocalAgent,
    Task,
    parse_claude_stream,
    parse_codex_events,
    parse_command_output,
    task_prompt,
)
from memtune.bench.dataset import load_dataset
from memtune.bench.skill import load_skill, split_frontmatter, stage_clean_copy

REPO = Path(__file__).resolve().parent.parent
SKILL = "nemo-mbridge-perf-memory-tuning"
DATASET = load_dataset(REPO / "evals" / "evals.json")
CATALOG = json.loads((REPO / "evals" / "harness" / "skill_catalog.json").read_text())["skills"]


def make_task(case_id: str, condition: str, attempt: int = 1) -> Task:
    case = DATASET.by_id()[case_id]
    files = {n: (REPO / "evals" / "files" / n).read_text() for n in case.files}
    skill = load_skill(REPO) if condition == WITH else None
    return Task(case, condition, attempt, REPO, files, skill)


def test_command_output_plain_text_or_json() -> None:
    assert parse_command_output("just text\n").answer == "just text\n"
    doc = parse_command_output(json.dumps({"answer": "a", "activated_skill": SKILL, "commands": ["x"], "tokens_in": 3}))
    assert (doc.answer, doc.activated_skill, doc.commands, doc.tokens_in) == ("a", SKILL, ["x"], 3)
    assert parse_command_output('{"not": "an answer"}').answer == '{"not": "an answer"}'


def test_claude_stream_activation_commands_usage() -> None:
    events = [
        {"type": "system", "subtype": "init"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "tool_use", "name": "Skill", "input": {"skill": SKILL}},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "python3 scripts/diagnose.py train.log"}},
                ]
            },
        },
        {
            "type": "result",
            "result": "It is fragmentation.",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 7},
        },
    ]
    result = parse_claude_stream("\n".join(map(json.dumps, events)) + "\nnot json\n", SKILL)
    assert result.activated_skill == SKILL
    assert result.commands == ["python3 scripts/diagnose.py train.log"]
    assert (result.answer, result.tokens_in, result.tokens_out) == ("It is fragmentation.", 15, 7)
    read_only = parse_claude_stream(
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {
                            "type": "tool_use",
                            "name": "Read",
                            "input": {"file_path": f"/p/.claude/skills/{SKILL}/SKILL.md"},
                        }
                    ]
                },
            }
        ),
        SKILL,
    )
    assert read_only.activated_skill == SKILL
    assert parse_claude_stream("", SKILL).activated_skill is None


def test_codex_events_activation_by_reading_skill_md() -> None:
    events = [
        {
            "type": "item.completed",
            "item": {"type": "command_execution", "command": f"bash -lc 'cat .agents/skills/{SKILL}/SKILL.md'"},
        },
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Set expandable_segments:True."}},
        {"type": "turn.completed", "usage": {"input_tokens": 100, "output_tokens": 20}},
    ]
    result = parse_codex_events("\n".join(map(json.dumps, events)), SKILL)
    assert result.activated_skill == SKILL and result.answer == "Set expandable_segments:True."
    assert (result.tokens_in, result.tokens_out) == (100, 20)
    assert parse_codex_events(json.dumps(events[1]), SKILL).activated_skill is None


def test_task_prompt_inlines_or_names_files() -> None:
    task = make_task("frag-log-diagnosis", WITHOUT)
    inline = task_prompt(task, inline_files=True)
    assert "Tried to allocate 172.00 MiB" in inline
    named = task_prompt(task, inline_files=False)
    assert "megatron_llama3_70b_sft_rank13_oom.log" in named and "172.00 MiB" not in named


def test_local_discovery_offers_every_skill_once_in_a_seeded_order() -> None:
    agent = LocalAgent(None, CATALOG)
    prompt, options = agent.discovery_prompt(make_task("frag-first-fix", WITH, 1))
    assert sorted(o for o in options if o) == sorted([SKILL, *(s["name"] for s in CATALOG)])
    assert options.count(None) == 1
    assert agent.discovery_prompt(make_task("frag-first-fix", WITH, 1)) == (prompt, options)
    orders = {tuple(agent.discovery_prompt(make_task("frag-first-fix", WITH, a))[1]) for a in range(1, 6)}
    assert len(orders) > 1  # the position of our skill changes between attempts
    assert prompt.rstrip().endswith("Answer:") and "A. " in prompt


def test_local_answer_prompt_differs_only_by_the_skill_body() -> None:
    agent = LocalAgent(None, CATALOG)
    task = make_task("vpp-myth", WITH)
    skill = load_skill(REPO)
    plain = agent.answer_prompt(task, None)
    loaded = agent.answer_prompt(task, skill.body)
    assert loaded.endswith(plain) and "## Failure Diagnosis" in loaded and "## Failure Diagnosis" not in plain
    assert "description:" not in loaded  # the frontmatter is for discovery, the body for activation


def test_skill_frontmatter_split_and_clean_staging(tmp_path: Path) -> None:
    front, body = split_frontmatter((REPO / "SKILL.md").read_text())
    assert "name:" in front and body.startswith("#")
    staged = stage_clean_copy(REPO, tmp_path / SKILL)
    assert (staged / "SKILL.md").is_file() and (staged / "scripts" / "diagnose.py").is_file()
    assert not (staged / ".venv").exists() and not (staged / "evals" / "results").exists()


def test_local_agent_with_missing_model_exits_2(tmp_path: Path) -> None:
    proc = invoke(
        "run_benchmark",
        "run",
        "--agent",
        "local-gemma",
        "--model",
        str(tmp_path / "missing.gguf"),
        "--results-dir",
        str(tmp_path),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "llama-cpp-python" in proc.stderr or "missing.gguf" in proc.stderr


def test_sampling_seed_is_shared_by_both_conditions() -> None:
    """Common random numbers: an unactivated with-skill task replays the without-skill sample."""
    assert make_task("vpp-myth", WITH, 2).seed == make_task("vpp-myth", WITHOUT, 2).seed
    assert make_task("vpp-myth", WITH, 1).seed != make_task("vpp-myth", WITH, 2).seed
    assert make_task("vpp-myth", WITH, 1).seed != make_task("why-not-tp", WITH, 1).seed


def test_local_activation_mode_is_validated() -> None:
    import pytest

    from memtune.bench.agents import AgentUnavailable

    assert LocalAgent(None, CATALOG, activation="always").describe()["settings"]["activation"] == "always"
    with pytest.raises(AgentUnavailable, match="activation"):
        LocalAgent(None, CATALOG, activation="sometimes")


def test_command_agent_keeps_a_venv_interpreter_path_as_given(tmp_path: Path, monkeypatch) -> None:
    """A venv's bin/python is a symlink; run through its resolved target it would leave the venv."""
    import sys

    from memtune.bench.agents import CommandAgent

    (tmp_path / "venv" / "bin").mkdir(parents=True)
    link = tmp_path / "venv" / "bin" / "python"
    link.symlink_to(sys.executable)
    (tmp_path / "agent.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    agent = CommandAgent("venv/bin/python agent.py --flag x/y")
    assert agent.argv[0] == str(link) and agent.argv[0] != str(link.resolve())
    assert agent.argv[1] == "agent.py" and agent.argv[3] == "x/y"  # no separator / no such file: as given
    agent.prepare()
