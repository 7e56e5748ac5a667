"""A RAM cache of llama.cpp states, keyed by token prefix, that stays within its byte budget.

llama-cpp-python's ``LlamaRAMCache`` evicts by ``llama_state_size`` alone, but every state it
keeps also holds a copy of the model's logits buffer (``n_batch x vocabulary`` float32: 311 MB
for Qwen2.5's 151,936-token vocabulary at n_batch 512) and of the token ids. One state is saved
per model reply, so a "3 GiB" cache grew without bound in practice: the Tier-3 run process
reached 24 GB and the host's OOM killer stopped it after about 20 tasks. This cache counts
every array a state holds, so the budget is the memory it really uses.

It is duck-typed to what ``Llama`` calls (``cache[tokens]``, ``cache[tokens] = state``,
``tokens in cache``, ``cache_size``) and imports nothing from llama_cpp, so it is tested
without the optional model dependencies.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any


def state_bytes(state: Any) -> int:
    """Every byte a saved state keeps: llama.cpp's own state plus the logits and token arrays."""
    return int(state.llama_state_size) + int(state.scores.nbytes) + int(state.input_ids.nbytes)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixStateCache:
    """Least-recently-used states; a lookup returns the state sharing the longest prefix."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.cache_state: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._sizes: dict[tuple[int, ...], int] = {}

    def __bool__(self) -> bool:  # Llama tests `if self.cache:` before saving: an empty cache is still on
        return True

    @property
    def cache_size(self) -> int:
        return sum(self._sizes.values())

    def _longest_prefix_key(self, key: Sequence[int]) -> tuple[int, ...] | None:
        best, best_len = None, 0
        for candidate in self.cache_state:
            length = common_prefix_length(candidate, key)
            if length > best_len:
                best, best_len = candidate, length
        return best

    def __getitem__(self, key: Sequence[int]) -> Any:
        found = self._longest_prefix_key(key)
        if found is None:
            raise KeyError("no cached state shares a prefix with this prompt")
        self.cache_state.move_to_end(found)
        return self.cache_state[found]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._longest_prefix_key(key) is not None

    def __setitem__(self, key: Sequence[int], state: Any) -> None:
        k = tuple(key)
        self.cache_state.pop(k, None)
        self.cache_state[k] = state
        self._sizes[k] = state_bytes(state)
        while self.cache_size > self.capacity_bytes and self.cache_state:
            oldest, _ = self.cache_state.popitem(last=False)
            del self._sizes[oldest]
