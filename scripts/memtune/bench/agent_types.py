"""The types every agent kind shares: the task an agent answers, what it reports, the base class.

This module sits below the agent kinds (external.py, cli_agents.py, gemma.py, loop.py),
the factory (agents.py) and the runner, so none of them imports another to get a type:
before it, agents.py and loop.py imported each other.

Every agent answers the same task in two conditions: ``with_skill`` (the skill is
installed the way that agent installs skills) and ``without_skill`` (it is not). Each
reports what it answered, whether it activated a skill and which, the commands it ran
(when it has tools), tokens and wall time.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.bench.dataset import Case
from memtune.bench.skill import SkillDoc

WITH = "with_skill"
WITHOUT = "without_skill"
CONDITIONS = (WITHOUT, WITH)


class AgentUnavailable(Exception):
    """The agent cannot run here (program or package missing): the message says how to fix it."""


@dataclass(frozen=True)
class Task:
    case: Case
    condition: str
    attempt: int
    workdir: Path
    files: Mapping[str, str]  # fixture name -> text, for agents that cannot read files
    skill: SkillDoc | None  # None in the without_skill condition

    @property
    def seed(self) -> int:
        """Stable per (case, attempt) and the same in both conditions (common random
        numbers): when the skill is not activated the two conditions see the same prompt
        and sample the same answer, so the measured uplift comes from the skill, not from
        sampling noise. Reruns and resumes sample the same way."""
        key = f"{self.case.id}|{self.attempt}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:4], "big")


@dataclass
class AgentResult:
    answer: str = ""
    activated_skill: str | None = None
    commands: list[str] = field(default_factory=list)
    tokens_in: int | None = None
    tokens_out: int | None = None
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def task_prompt(task: Task, inline_files: bool) -> str:
    """The user's message: the question, then the fixture files (inline or by name)."""
    parts = [task.case.question.strip()]
    if task.case.files:
        if inline_files:
            for name in task.case.files:
                parts.append(f"Contents of {name}:\n```\n{task.files[name].rstrip()}\n```")
        else:
            parts.append("Files in the current directory: " + ", ".join(task.case.files))
    return "\n\n".join(parts) + "\n"


class Agent:
    """Base class: subclasses set ``name``/``model`` and implement ``run``."""

    name = "agent"
    model = "unknown"
    needs_workdir = True  # a fresh project directory with the fixture files

    def prepare(self) -> None:
        """Check the agent can run; raise AgentUnavailable with the fix otherwise."""

    def install_skill(self, workdir: Path, skill: SkillDoc, staged: Path) -> None:
        """Install the staged skill copy into the project dir (with_skill condition only).
        Default: the layout the skills CLI produces for Codex, ``.agents/skills/<name>``."""
        shutil.copytree(staged, workdir / ".agents" / "skills" / skill.name)

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name, "model": self.model}

    def run(self, task: Task) -> AgentResult:  # pragma: no cover - interface
        raise NotImplementedError
