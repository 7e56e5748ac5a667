"""The agent loop's tool: parse what the model wrote, and run an allowed helper in a sandbox dir.

The model acts by writing one fenced block per reply:

- ```` ```load ```` with a skill name: load that skill's instructions (progressive disclosure);
- ```` ```run ```` with one command line: run a helper of a loaded skill; a ```` ```bash ````,
  ``sh``, ``shell``, ``console``, ``python`` or ``python3`` block whose first line runs
  ``scripts/<name>.py`` counts as a run too (small models put commands in those fences, and
  a command the model wrote but the harness ignored would measure the parser, not the model);
- anything else is its final answer. The first block of these kinds in the reply wins.

Nothing the model writes reaches a shell. The command line is split with shlex; the only
programs allowed are ``python3``/``python`` followed by ``scripts/<helper>.py`` (or the same
path under ``.agents/skills/<name>/``) where ``<helper>`` is one of HELPERS and the file
exists in an installed skill. The interpreter that runs it is the harness's own
(``sys.executable``); arguments may not be absolute paths or climb out of the project
directory with ``..``. A trailing ``<<'EOF'`` here-document becomes the helper's standard
input (that is how an agent pipes an error message into ``diagnose.py -``): it is data,
never parsed as commands. Each run has a timeout and an output cap that keeps whole
paragraphs (the verdict and the summary) rather than cutting through them.

An option whose value is one of the instructions' capitalised slots (``--tp TP``,
``--preset MODEL``) is answered the same way, before anything runs.

A file argument that is not in the project directory (``train.log``, ``launch.sh``: the
skill's example names, copied instead of the user's) is answered before anything runs
with the names of the files that are there, so the model can retry with the right one.
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

#: Every helper SKILL.md's question -> command table names for a memory question (sign_skill,
#: which checks the installed copy and needs the signing extra, is not one): a helper the table
#: names but the loop refuses would measure the harness, not the agent.
HELPERS = (
    "diagnose",
    "estimate_memory",
    "plan_memory",
    "check_env",
    "runtime_memory",
    "trace_regression",
    "regather_config",
)
_FENCE = re.compile(r"```[ \t]*(load|run)\b[ \t]*(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
#: a shell or Python fence; it is a run only when its first line runs scripts/<name>.py
_CODE_FENCE = re.compile(
    r"```[ \t]*(?:bash|sh|shell|console|zsh|python3?|py)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE
)
_RUNS_HELPER = re.compile(r"^python3?\s+(?:\./)?(?:\.agents/skills/[^/\s]+/)?scripts/[A-Za-z0-9_]+\.py(?:\s|$)")
#: the file slots of SKILL.md's "Question -> command" table, which the user's file names replace
FILE_SLOTS = ("LOG_FILE", "HF_CONFIG_JSON", "LAUNCH_SCRIPT", "BRIDGE_YAML", "NVIDIA_SMI_TXT", "BEFORE", "AFTER")
#: the value slots of SKILL.md's commands and of the helpers' next-step templates
#: (``--preset MODEL --tp TP``): an option given one of these copied a template, not the
#: user's number; the forced run under harness 5 sent them again and again
VALUE_SLOTS = (
    "MODEL", "NAME", "TP", "PP", "CP", "EP", "VPP", "N", "S", "B", "GPU_GiB", "GPU_NAME", "VALUE", "GOOD..BAD",
)  # fmt: skip
#: a reply that is only "load" and a skill name on the next line (the fence left out, as the
#: 1.5B model did in a smoke run): a load, not an answer
_BARE_LOAD = re.compile(r"\A\s*load\s*\n\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\Z", re.IGNORECASE)
#: suffixes of the input files the helpers read (logs, launch scripts, configs, env files)
_FILE_SUFFIXES = (
    ".log", ".txt", ".out", ".err", ".gz", ".sh", ".sbatch", ".yaml", ".yml", ".json", ".env", ".py", ".pickle",
)  # fmt: skip
_HEREDOC = re.compile(r"\s<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1\s*$")
NOT_FOUND = 127  # the shell's "command not found", for a helper no installed skill provides


@dataclass(frozen=True)
class Action:
    """What one reply asks for: ``kind`` is load, run or answer."""

    kind: str
    text: str  # skill name (load), command line (run) or the answer
    stdin: str | None = None


def _helper_line(body: str) -> str | None:
    """The first line of a shell/Python fence when it runs scripts/<name>.py (a ``$ `` prompt dropped)."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if not lines:
        return None
    first = lines[0][1:].lstrip() if lines[0].startswith("$") else lines[0]
    return first if _RUNS_HELPER.match(first) else None


def parse_action(reply: str) -> Action:
    """The first load/run block in the reply wins; a reply with none is the final answer."""
    found: list[tuple[int, str, str]] = []
    match = _FENCE.search(reply)
    if match is not None:
        found.append((match.start(), match.group(1).lower(), match.group(2)))
    for code in _CODE_FENCE.finditer(reply):
        body = code.group(1)
        first = _helper_line(body)
        if first is not None:
            # from the helper line on, as a run block would hold it (a here-document follows it)
            found.append((code.start(), "run", body[body.index(first) :]))
            break
    if not found:
        bare = _BARE_LOAD.match(reply)
        if bare:  # the block's content without its fence: "load" and a skill name, nothing else
            return Action("load", bare.group(1))
        return Action("answer", reply.strip())
    _, kind, body = min(found)
    lines = body.strip("\n").splitlines()
    if kind == "load":
        name = lines[0].strip().strip("`'\"") if lines else ""
        return Action("load", name)
    first = lines[0].strip() if lines else ""
    first = first[1:].lstrip() if first.startswith("$") else first
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
    stdin: str | None = None  # what a here-document gave it (not recorded: only to spot a repeat)

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


#: Characters of a helper's output the model sees (see :func:`cap`): about 1,500 tokens, so
#: the longest helper report (plan_memory.py, ~7 kB) keeps its verdict, ladder, ranked table
#: and recommendation, and five turns of output still fit the local agent's 16k context.
OUTPUT_CAP = 6000
#: Seconds a helper may run before the call is recorded as timed out (the attempt goes on).
COMMAND_TIMEOUT = 60.0


@dataclass(frozen=True)
class Sandbox:
    """The project directory a task runs in; installed skills sit in ``.agents/skills``."""

    workdir: Path
    timeout: float = COMMAND_TIMEOUT
    output_cap: int = OUTPUT_CAP
    files: tuple[str, ...] = ()  # the user's files (named in the question), for the missing-file message

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

    def missing_file(self, args: Sequence[str]) -> str | None:
        """The first argument that names an input file the project directory does not hold."""
        for arg in args:
            value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
            if value.startswith("-") or ("=" in value and not arg.startswith("--")):
                continue  # an option, or a key.path=value override
            named = value.lower().endswith(_FILE_SUFFIXES) or value in FILE_SLOTS
            if named and not (self.workdir / value).is_file():
                return value
        return None

    def placeholder(self, args: Sequence[str]) -> str | None:
        """The first ``--option SLOT`` (or ``--option=SLOT``) whose value is a template slot."""
        for i, arg in enumerate(args):
            if arg.startswith("--") and "=" in arg:
                option, value = arg.split("=", 1)
            elif i > 0 and args[i - 1].startswith("--") and "=" not in args[i - 1]:
                option, value = args[i - 1], arg
            else:
                continue
            if value in VALUE_SLOTS:
                return f"{option} {value}"
        return None

    def files_here(self) -> list[str]:
        if self.files:
            return list(self.files)
        return sorted(p.name for p in self.workdir.iterdir() if p.is_file() and not p.name.startswith("."))

    def run(self, command: str, stdin: str | None = None, loaded: str | None = None) -> ToolCall:
        start = time.monotonic()
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return ToolCall(command, None, f"refused: cannot parse the command ({exc})", 0.0, "unparsable", stdin=stdin)
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
        slot = self.placeholder(args)
        if slot is not None:
            return ToolCall(
                command,
                None,
                f"not run: in `{slot}` the capitals are a placeholder from the instructions, not a value. "
                "Put the user's own value from the question in its place (for --preset, a model name "
                "that --list-presets prints, such as llama3-70b), or leave the option out when the "
                "question does not give it.",
                0.0,
                "placeholder",
                path.stem,
            )
        missing = self.missing_file(args)
        if missing is not None:
            here = self.files_here()
            listing = (
                f"the user's files here are: {', '.join(here)}. Run it again with those names."
                if here
                else "the user gave no files: pass the numbers from the question as options "
                "(see the helper's --help), or the error text on standard input (<<'EOF')."
            )
            return ToolCall(
                command,
                None,
                f"not run: there is no file {missing!r} in the project directory (names such as LOG_FILE, "
                f"train.log or launch.sh in instructions stand for the user's files); {listing}",
                0.0,
                "missing-file",
                path.stem,
            )
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
            command, proc.returncode, cap(output, self.output_cap), time.monotonic() - start, None, path.stem, stdin
        )


def cap(text: str, limit: int) -> str:
    """A long output cut to ``limit`` characters, keeping what answers the question.

    Helpers print their verdict and main table first and notes, evidence and a summary in
    later paragraphs, so whole paragraphs (blocks between blank lines) are kept from the
    start up to three quarters of the budget, then from the end; the paragraphs left out
    are named by their first line, so the model knows what it did not see. An output
    without paragraphs (a JSON document, one long table) falls back to :func:`cap_lines`.
    """
    if len(text) <= limit:
        return text
    blocks = text.split("\n\n")
    head_budget = limit * 3 // 4
    kept_head: list[str] = []
    used = 0
    for block in blocks:
        if used + len(block) + 2 > head_budget:
            break
        kept_head.append(block)
        used += len(block) + 2
    kept_tail: list[str] = []
    for block in reversed(blocks[len(kept_head) :]):
        if used + len(block) + 2 > limit - 200:  # room for the marker
            break
        kept_tail.insert(0, block)
        used += len(block) + 2
    dropped = blocks[len(kept_head) : len(blocks) - len(kept_tail)]
    if not kept_head or not dropped:
        return cap_lines(text, limit)
    titles = "; ".join(_first_line(b) for b in dropped[:6]) + ("; ..." if len(dropped) > 6 else "")
    gone = sum(len(b) + 2 for b in dropped)
    marker = f"[... {len(dropped)} paragraph(s), {gone} characters cut: {titles} ...]"
    return "\n\n".join([*kept_head, marker, *kept_tail])


def _first_line(block: str) -> str:
    line = block.strip().splitlines()[0] if block.strip() else ""
    return line if len(line) <= 60 else line[:57] + "..."


def cap_lines(text: str, limit: int) -> str:
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
