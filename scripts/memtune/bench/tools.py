"""The agent loop's tool: parse what the model wrote, and run an allowed helper in a sandbox dir.

The model acts by writing one fenced block per reply:

- ```` ```load ```` with a skill name: load that skill's instructions (progressive disclosure);
- ```` ```run ```` with one command line: run a helper of a loaded skill;
- anything else is its final answer.

Nothing the model writes reaches a shell. The command line is split with shlex; the only
programs allowed are ``python3``/``python`` followed by ``scripts/<helper>.py`` (or the same
path under ``.agents/skills/<name>/``) where ``<helper>`` is one of HELPERS and the file
exists in an installed skill. The interpreter that runs it is the harness's own
(``sys.executable``); arguments may not be absolute paths or climb out of the project
directory with ``..``. A trailing ``<<'EOF'`` here-document becomes the helper's standard
input (that is how an agent pipes an error message into ``diagnose.py -``): it is data,
never parsed as commands. Each run has a timeout and an output cap.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

HELPERS = ("diagnose", "estimate_memory", "plan_memory", "check_env", "regather_config")
_FENCE = re.compile(r"```[ \t]*(load|run)\b[ \t]*(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_HEREDOC = re.compile(r"\s<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1\s*$")
NOT_FOUND = 127  # the shell's "command not found", for a helper no installed skill provides


@dataclass(frozen=True)
class Action:
    """What one reply asks for: ``kind`` is load, run or answer."""

    kind: str
    text: str  # skill name (load), command line (run) or the answer
    stdin: str | None = None


def parse_action(reply: str) -> Action:
    """The first load/run block in the reply wins; a reply with none is the final answer."""
    match = _FENCE.search(reply)
    if match is None:
        return Action("answer", reply.strip())
    kind, body = match.group(1).lower(), match.group(2)
    lines = body.strip("\n").splitlines()
    if kind == "load":
        name = lines[0].strip().strip("`'\"") if lines else ""
        return Action("load", name)
    first = lines[0].strip() if lines else ""
    heredoc = _HEREDOC.search(first)
    if heredoc:
        end = heredoc.group(2)
        rest = lines[1:]
        stop = next((i for i, line in enumerate(rest) if line.strip() == end), len(rest))
        return Action("run", first[: heredoc.start()].strip(), "\n".join(rest[:stop]) + "\n")
    return Action("run", first)


@dataclass(frozen=True)
class ToolCall:
    """One command the model asked for. ``exit_code`` is None when it was refused unrun."""

    command: str
    exit_code: int | None
    output: str
    seconds: float
    refused: str | None = None
    helper: str | None = None

    def to_json(self) -> dict[str, Any]:
        # the helpers exit 1 for "ran fine, found problems" (check_env, diagnose): only a
        # refusal, a timeout or exit code >= 2 (bad usage or input) is a failed run
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "failed": self.exit_code is None or self.exit_code >= 2,
            "seconds": round(self.seconds, 2),
            "output_chars": len(self.output),
            "refused": self.refused,
            "helper": self.helper,
        }


#: Characters of a helper's output the model sees (head and tail, see :func:`cap`): about
#: 1,000 tokens, so six turns of helper output stay inside the local agent's 16k context.
OUTPUT_CAP = 4000
#: Seconds a helper may run before the call is recorded as timed out (the attempt goes on).
COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class Sandbox:
    """The project directory a task runs in; installed skills sit in ``.agents/skills``."""

    workdir: Path
    timeout: float = COMMAND_TIMEOUT
    output_cap: int = OUTPUT_CAP

    def skill_dirs(self) -> list[Path]:
        root = self.workdir / ".agents" / "skills"
        return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def resolve_helper(self, script: str, loaded: str | None) -> tuple[Path | None, str | None]:
        """(path, None) for an allowed helper, else (None, why not)."""
        rel = PurePosixPath(script)
        if rel.is_absolute() or ".." in rel.parts:
            return None, "helper paths are relative: scripts/<helper>.py"
        parts = rel.parts
        if len(parts) >= 4 and parts[:2] == (".agents", "skills"):
            skill_dirs = [self.workdir / ".agents" / "skills" / parts[2]]
            parts = parts[3:]
        else:
            installed = self.skill_dirs()
            # a loaded skill's helpers first: that is the skill whose instructions name them
            skill_dirs = sorted(installed, key=lambda p: p.name != loaded)
        if len(parts) != 2 or parts[0] != "scripts" or not parts[1].endswith(".py"):
            return None, "only scripts/<helper>.py of an installed skill can run"
        name = parts[1][:-3]
        if name not in HELPERS:
            return None, f"{parts[1]} is not an allowed helper (allowed: {', '.join(h + '.py' for h in HELPERS)})"
        for skill_dir in skill_dirs:
            candidate = skill_dir / "scripts" / parts[1]
            if candidate.is_file():
                return candidate, None
        return None, f"no installed skill provides scripts/{parts[1]}"

    def check_args(self, args: Sequence[str]) -> str | None:
        for arg in args:
            value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
            path = PurePosixPath(value)
            if value.startswith(("/", "~")) or ".." in path.parts:
                return f"argument {arg!r}: use paths inside the project directory"
        return None

    def run(self, command: str, stdin: str | None = None, loaded: str | None = None) -> ToolCall:
        start = time.monotonic()
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return ToolCall(command, None, f"refused: cannot parse the command ({exc})", 0.0, "unparsable")
        if not argv or argv[0] not in ("python3", "python") or len(argv) < 2:
            return ToolCall(
                command,
                None,
                "refused: only `python3 scripts/<helper>.py ARGS` can run (no shell, no pipes, one command per block)",
                0.0,
                "not-allowed",
            )
        script, args = argv[1], argv[2:]
        if any(tok in ("|", "&&", ";", "||", ">", "<") for tok in args):
            return ToolCall(
                command,
                None,
                "refused: no shell operators; one helper per block "
                "(stdin: end the line with <<'EOF' and put the text below it)",
                0.0,
                "not-allowed",
            )
        path, why = self.resolve_helper(script, loaded)
        if path is None:
            code = NOT_FOUND if why and why.startswith("no installed skill") else None
            return ToolCall(
                command, code, f"{'error' if code else 'refused'}: {why}", 0.0, None if code else "not-allowed"
            )
        why = self.check_args(args)
        if why:
            return ToolCall(command, None, f"refused: {why}", 0.0, "not-allowed", path.stem)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
        }
        try:
            proc = subprocess.run(
                [sys.executable, "-B", str(path), *args],
                cwd=str(self.workdir),
                env=env,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=self.timeout,
            )
        except subprocess.TimeoutExpired:
            return ToolCall(
                command,
                None,
                f"error: timed out after {self.timeout:.0f} s",
                time.monotonic() - start,
                "timeout",
                path.stem,
            )
        output = proc.stdout + (("\n" if proc.stdout and proc.stderr else "") + proc.stderr if proc.stderr else "")
        return ToolCall(
            command, proc.returncode, cap(output, self.output_cap), time.monotonic() - start, None, path.stem
        )


def cap(text: str, limit: int) -> str:
    """Head and tail of a long output: findings come first, summaries last.

    The cut falls between lines whenever that keeps at least half of each part: a cut
    inside a line can turn ``"reserved_unallocated_bytes": 8589934592`` into a smaller
    number the model would quote as a fact, and leaves JSON that no longer parses. The
    marker says how much went and, for a JSON document, that the plain-text form of the
    same helper is shorter (every helper prints one).
    """
    if len(text) <= limit:
        return text
    head_budget = limit * 3 // 4
    tail_budget = limit - head_budget
    head = text[:head_budget]
    tail = text[len(text) - tail_budget :]
    end = head.rfind("\n")
    if end >= head_budget // 2:
        head = head[: end + 1]
    start = tail.find("\n")
    if 0 <= start < tail_budget // 2 and start < len(tail) - 1:
        tail = tail[start + 1 :]
    gone = text[len(head) : len(text) - len(tail)]
    hint = "; without --json the same answer is shorter" if text.lstrip().startswith("{") else ""
    marker = f"[... {gone.count(chr(10))} lines, {len(gone)} characters cut{hint} ...]"
    return f"{head}{'' if head.endswith(chr(10)) else chr(10)}{marker}\n{tail}"
