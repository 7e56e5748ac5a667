"""``claude-code`` and ``codex``: a coding-agent CLI in a fresh project directory.

The skill is installed with the skills CLI (``npx skills add <staged copy> --agent
claude-code|codex``); the agent runs non-interactively and its JSON event stream gives
the answer, the commands it ran, their outcomes, activation and usage.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from memtune.bench.agent_types import Agent, AgentResult, Task, task_prompt
from memtune.bench.external import _require_program, _run_process
from memtune.bench.skill import SkillDoc

SKILLS_CLI = "skills@1.5.16"


class _CliAgent(Agent):
    """Shared by claude-code and codex: a fresh project dir, the skill via the skills CLI."""

    program = ""
    skills_agent = ""
    install_hint = ""

    def __init__(self, timeout: float = 900.0) -> None:
        self.timeout = timeout
        self.name = self.skills_agent

    def prepare(self) -> None:
        _require_program(self.program, self.install_hint)
        _require_program("npx", "the skills CLI runs through npx: install Node.js (npm ships npx)")
        code, out, _ = _run_process([self.program, "--version"], "", Path.cwd(), os.environ, 60)
        self.model = f"{self.program} {out.strip() or '(version unknown)'}" if code == 0 else self.program

    def install_skill(self, workdir: Path, skill: SkillDoc, staged: Path) -> None:
        argv = ["npx", "--yes", SKILLS_CLI, "add", str(staged), "--agent", self.skills_agent, "--yes"]
        code, out, err = _run_process(argv, "", workdir, os.environ, 300)
        if code != 0:
            raise RuntimeError(f"skills CLI failed ({code}): {(err or out).strip()[-300:]}")

    def command(self, task: Task) -> tuple[list[str], str]:  # pragma: no cover - interface
        """argv and stdin of one non-interactive agent call."""
        raise NotImplementedError

    @staticmethod
    def parse(stdout: str, skill_name: str | None) -> AgentResult:  # pragma: no cover - interface
        raise NotImplementedError

    def run(self, task: Task) -> AgentResult:
        argv, stdin = self.command(task)
        start = time.monotonic()
        code, out, err = _run_process(argv, stdin, task.workdir, os.environ, self.timeout)
        result = self.parse(out, task.skill.name if task.skill else None)
        result.seconds = time.monotonic() - start
        if code != 0:
            reported = f" ({result.error})" if result.error else ""
            result.error = f"{self.program} exit {code}{reported}: {err.strip()[-300:]}"
        return result


class ClaudeCodeAgent(_CliAgent):
    program = "claude"
    skills_agent = "claude-code"
    install_hint = "install Claude Code (npm install -g @anthropic-ai/claude-code) and log in"

    def command(self, task: Task) -> tuple[list[str], str]:
        argv = [
            "claude",
            "-p",
            task_prompt(task, inline_files=False),
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "Bash Read Grep Glob Skill",
        ]
        return argv, ""

    @staticmethod
    def parse(stdout: str, skill_name: str | None) -> AgentResult:
        return parse_claude_stream(stdout, skill_name)


def _events(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL stream; other lines (warnings, banners) are skipped."""
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _text_of(content: Any) -> str:
    """A tool result's content: a string, or a list of ``{"type": "text", "text"}`` blocks."""
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "" if content is None else str(content)


def parse_claude_stream(stdout: str, skill_name: str | None) -> AgentResult:
    """Answer, commands, their outcomes and activation from ``claude -p --output-format
    stream-json --verbose``: ``assistant`` events carry ``tool_use`` blocks (Bash, Skill,
    Read, ...), ``user`` events the matching ``tool_result`` blocks (``is_error`` when a
    command failed; Claude Code reports no exit code), and the final ``result`` event the
    answer, usage and ``is_error``/``subtype`` (e.g. ``error_max_turns``)."""
    result = AgentResult()
    bash_calls: dict[str, dict[str, Any]] = {}
    calls: list[dict[str, Any]] = []
    for event in _events(stdout):
        kind = event.get("type")
        content = (event.get("message") or {}).get("content") or []
        if kind == "assistant":
            for item in content:
                if not isinstance(item, dict) or item.get("type") != "tool_use":
                    continue
                tool, args = item.get("name"), item.get("input") or {}
                if tool == "Bash" and args.get("command"):
                    result.commands.append(str(args["command"]))
                    call: dict[str, Any] = {
                        "command": str(args["command"]),
                        "exit_code": None,
                        "failed": None,
                        "output_chars": 0,
                    }
                    calls.append(call)
                    bash_calls[str(item.get("id", len(calls)))] = call
                if tool == "Skill":
                    result.activated_skill = str(args.get("skill") or args.get("command") or args.get("name") or "")
                if tool == "Read" and skill_name and str(args.get("file_path", "")).endswith(f"{skill_name}/SKILL.md"):
                    result.activated_skill = skill_name
        elif kind == "user" and isinstance(content, list):
            for item in content:
                if isinstance(item, dict) and item.get("type") == "tool_result":
                    answered = bash_calls.get(str(item.get("tool_use_id")))
                    if answered is not None:
                        answered["failed"] = bool(item.get("is_error"))
                        answered["output_chars"] = len(_text_of(item.get("content")))
        elif kind == "result":
            result.answer = str(event.get("result", "") or "")
            usage = event.get("usage") or {}
            result.tokens_in = sum(
                int(usage.get(k, 0) or 0)
                for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            )
            result.tokens_out = int(usage.get("output_tokens", 0) or 0)
            if event.get("is_error") or str(event.get("subtype", "success")) != "success":
                details = "; ".join(str(e) for e in event.get("errors") or []) or result.answer[:200]
                result.error = f"claude result {event.get('subtype', 'error')}" + (f": {details}" if details else "")
            result.extra["num_turns"] = event.get("num_turns")
    if skill_name and result.activated_skill is None and any(f"skills/{skill_name}" in c for c in result.commands):
        result.activated_skill = skill_name
    result.extra["tool_calls"] = calls
    return result


class CodexAgent(_CliAgent):
    program = "codex"
    skills_agent = "codex"
    install_hint = "install the Codex CLI (npm install -g @openai/codex) and log in"

    def command(self, task: Task) -> tuple[list[str], str]:
        argv = [
            "codex",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--sandbox",
            "workspace-write",
            "--cd",
            str(task.workdir),
            "-",
        ]
        return argv, task_prompt(task, inline_files=False)

    @staticmethod
    def parse(stdout: str, skill_name: str | None) -> AgentResult:
        return parse_codex_events(stdout, skill_name)


def parse_codex_events(stdout: str, skill_name: str | None) -> AgentResult:
    """Answer, commands and activation from ``codex exec --json`` events. Codex reads a
    skill by opening its SKILL.md with a shell command, so that is what activation means."""
    result = AgentResult()
    messages = []
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    tokens_in = tokens_out = 0
    for event in _events(stdout):
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "item.completed" and item.get("type") == "command_execution":
            result.commands.append(str(item.get("command", "")))
            code = item.get("exit_code")
            calls.append(
                {
                    "command": str(item.get("command", "")),
                    "exit_code": code,
                    "failed": item.get("status") != "completed" or (code is not None and code != 0),
                    "output_chars": len(str(item.get("aggregated_output") or "")),
                }
            )
        elif kind == "item.completed" and item.get("type") == "agent_message":
            messages.append(str(item.get("text", "")))
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
            tokens_in += int(usage.get("input_tokens", 0) or 0)
            tokens_out += int(usage.get("output_tokens", 0) or 0)
        elif kind == "turn.failed":
            errors.append(str((event.get("error") or {}).get("message", "turn failed")))
        elif kind == "error":
            errors.append(str(event.get("message", "error")))
    result.answer = messages[-1] if messages else ""
    result.tokens_in, result.tokens_out = tokens_in, tokens_out
    result.extra["tool_calls"] = calls
    if errors:
        result.error = "codex: " + "; ".join(errors)[:300]
    if skill_name and any(f"skills/{skill_name}" in c for c in result.commands):
        result.activated_skill = skill_name
    return result
