"""llama-cpp-python as the loop's chat model, with a RAM cache of evaluated prefixes.

Kept apart from memtune.bench.loop so that the loop (and its tests with a scripted model)
never touches llama_cpp; this module imports it only when a model is built.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memtune.bench.chat import Reply


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


def load_llama(model_path: Path, n_ctx: int, threads: int, logits_all: bool = False) -> Any:
    """A llama_cpp.Llama on plain CPU buffers (see ``_without_extra_buffers``). ``logits_all``
    keeps every position's logits, which token log-probabilities need (benchmarks/local_judge.py)."""
    from llama_cpp import Llama

    with _without_extra_buffers():
        return Llama(
            model_path=str(model_path),
            n_ctx=n_ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_batch=512,
            seed=0,
            verbose=False,
            logits_all=logits_all,
        )


class LlamaChatModel:
    """llama-cpp-python chat completion with a RAM cache of evaluated prefixes.

    The cache (``PrefixStateCache``) keeps llama.cpp states keyed by token prefix, so the
    system prompt + catalog (+ body) is read once per process and restored for each
    later task instead of re-read, even when tasks with and without the body alternate.
    """

    def __init__(self, model_path: Path, n_ctx: int, threads: int, temperature: float, cache_bytes: int) -> None:
        from memtune.bench.prefix_cache import PrefixStateCache

        self.llm = load_llama(model_path, n_ctx, threads)
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
