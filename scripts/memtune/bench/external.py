"""``command:<cmd>``: any program that reads the prompt on stdin (argv split with shlex, never a shell).

It runs in the project directory; with the skill, a copy sits in
``.agents/skills/<name>`` and ``MEMTUNE_BENCH_SKILL_DIR`` points at it. It may print
plain text (the answer) or one JSON object ``{"answer", "activated_skill", "commands",
"tokens_in", "tokens_out"}``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from memtune.bench.agent_types import Agent, AgentResult, AgentUnavailable, Task, task_prompt


def _require_program(program: str, hint: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise AgentUnavailable(f"`{program}` not found on PATH; {hint}")
    return path


def _run_process(
    argv: Sequence[str], stdin: str, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int, str, str]:
    proc = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, cwd=str(cwd), env=dict(env), timeout=timeout
    )
    return proc.returncode, proc.stdout, proc.stderr


class CommandAgent(Agent):
    """Any program reading the prompt on stdin (``command:<cmd>``)."""

    def __init__(self, command: str, timeout: float = 600.0, inline_files: bool = True) -> None:
        # The program runs in each task's project directory, so arguments naming files
        # relative to where the benchmark was started are made absolute now: absolute, not
        # resolved, since a virtualenv's bin/python is a symlink and run through its
        # resolved target it is a different Python, outside the venv and its packages.
        self.argv = [
            os.path.abspath(a) if not a.startswith("-") and os.sep in a and Path(a).exists() else a
            for a in shlex.split(command)
        ]
        if not self.argv:
            raise AgentUnavailable("command: agent needs a program, e.g. --agent 'command:python3 my_agent.py'")
        self.name = "command:" + command
        self.model = "external program"
        self.timeout = timeout
        self.inline_files = inline_files

    def prepare(self) -> None:
        program = self.argv[0]
        if os.sep in program:
            if not (Path(program).is_file() and os.access(program, os.X_OK)):
                raise AgentUnavailable(f"command agent program {program!r} does not exist or is not executable")
        else:
            _require_program(program, "install it or give its full path in --agent command:...")

    def run(self, task: Task) -> AgentResult:
        env = dict(os.environ)
        env["MEMTUNE_BENCH_CONDITION"] = task.condition
        env["MEMTUNE_BENCH_CASE_ID"] = task.case.id
        env["MEMTUNE_BENCH_ATTEMPT"] = str(task.attempt)
        env["MEMTUNE_BENCH_SEED"] = str(task.seed)
        env.pop("MEMTUNE_BENCH_SKILL_DIR", None)
        if task.skill is not None:
            env["MEMTUNE_BENCH_SKILL_DIR"] = str(task.workdir / ".agents" / "skills" / task.skill.name)
        start = time.monotonic()
        code, out, err = _run_process(self.argv, task_prompt(task, self.inline_files), task.workdir, env, self.timeout)
        result = parse_command_output(out)
        result.seconds = time.monotonic() - start
        if code != 0:
            result.error = f"exit {code}: {err.strip().splitlines()[-1] if err.strip() else 'no stderr'}"
        return result


def parse_command_output(stdout: str) -> AgentResult:
    """Plain text is the answer; one JSON object may also report activation and usage."""
    text = stdout.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and "answer" in doc:
            return AgentResult(
                answer=str(doc.get("answer", "")),
                activated_skill=doc.get("activated_skill"),
                commands=[str(c) for c in doc.get("commands", [])],
                tokens_in=doc.get("tokens_in"),
                tokens_out=doc.get("tokens_out"),
            )
    return AgentResult(answer=stdout)
