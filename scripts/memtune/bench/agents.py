"""The agent for ``--agent SPEC``: the factory over the agent kinds.

- ``claude-code``, ``codex``: memtune.bench.cli_agents (a coding-agent CLI, the skill
  installed with the skills CLI);
- ``command:<cmd>``: memtune.bench.external (any program reading the prompt on stdin);
- ``local``: Qwen2.5-Coder-1.5B-Instruct in a real agent loop (catalog, load, run
  helpers, answer): memtune.bench.loop;
- ``local-gemma``: the earlier Gemma 3 270M completion agent: memtune.bench.gemma.

The shared types live in memtune.bench.agent_types and are re-exported here for callers
that only need "an agent". A missing agent raises AgentUnavailable, which the CLI turns
into exit code 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from memtune.bench.agent_types import (
    CONDITIONS,
    WITH,
    WITHOUT,
    Agent,
    AgentResult,
    AgentUnavailable,
    Task,
    task_prompt,
)
from memtune.bench.cli_agents import ClaudeCodeAgent, CodexAgent, parse_claude_stream, parse_codex_events
from memtune.bench.external import CommandAgent, parse_command_output
from memtune.bench.gemma import LocalAgent
from memtune.bench.loop import LoopAgent, LoopSettings

__all__ = [
    "CONDITIONS",
    "WITH",
    "WITHOUT",
    "Agent",
    "AgentResult",
    "AgentUnavailable",
    "ClaudeCodeAgent",
    "CodexAgent",
    "CommandAgent",
    "LocalAgent",
    "LoopAgent",
    "Task",
    "make_agent",
    "parse_claude_stream",
    "parse_codex_events",
    "parse_command_output",
    "task_prompt",
]


def make_agent(
    spec: str,
    *,
    model_path: Path | None,
    catalog: Sequence[Mapping[str, str]],
    workers: int,
    timeout: float,
    max_tokens: int | None = None,
    threads: int | None = None,
    activation: str = "discover",
    max_turns: int = 6,
) -> Agent:
    """The agent for ``--agent SPEC``; AgentUnavailable for an unknown spec."""
    if spec == "claude-code":
        return ClaudeCodeAgent(timeout=timeout)
    if spec == "codex":
        return CodexAgent(timeout=timeout)
    if spec == "local":
        if max_turns < 1:
            raise AgentUnavailable("--max-turns must be at least 1")
        # "always" is local-gemma's older name for the same thing
        mode = "forced" if activation in ("forced", "always") else activation
        return LoopAgent(
            catalog,
            model_path=model_path,
            threads=threads,
            settings=LoopSettings(max_turns=max_turns, max_tokens=max_tokens or 384, activation=mode),
        )
    if spec == "local-gemma":
        mode = "always" if activation == "forced" else activation  # its runs have recorded "always" since v2
        return LocalAgent(
            model_path, catalog, threads=threads, workers=workers, max_tokens=max_tokens or 160, activation=mode
        )
    if spec.startswith("command:"):
        return CommandAgent(spec[len("command:") :], timeout=timeout)
    raise AgentUnavailable(
        f"unknown agent {spec!r}: use local, local-gemma, claude-code, codex or command:<program ...>"
    )
