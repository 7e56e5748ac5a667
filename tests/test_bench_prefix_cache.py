"""The Tier-3 prefix cache keeps to its byte budget, counting every array a state holds."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memtune.bench.prefix_cache import PrefixStateCache, common_prefix_length, state_bytes


@dataclass(frozen=True)
class Buffer:
    nbytes: int


@dataclass(frozen=True)
class FakeState:
    """What llama_cpp.LlamaState holds, as far as memory goes (the sizes of Qwen2.5 at n_batch 512)."""

    llama_state_size: int = 150_000_000
    scores: Buffer = Buffer(512 * 151_936 * 4)  # the logits copy LlamaRAMCache leaves uncounted
    input_ids: Buffer = Buffer(16_384 * 4)


def test_a_state_counts_its_logits_copy_and_token_ids() -> None:
    assert state_bytes(FakeState()) == 150_000_000 + 311_164_928 + 65_536


def test_the_budget_holds_with_the_logits_copies_counted() -> None:
    cache = PrefixStateCache(capacity_bytes=3 << 30)
    for i in range(40):  # one state per model reply, as Llama saves them
        cache[(1, 2, 3, i)] = FakeState()
    assert cache.cache_size <= 3 << 30
    assert len(cache.cache_state) == (3 << 30) // state_bytes(FakeState())  # 6 states, not 21 as before
    assert (1, 2, 3, 39) in cache.cache_state and (1, 2, 3, 0) not in cache.cache_state


def test_lookup_returns_the_longest_shared_prefix_and_refreshes_it() -> None:
    cache = PrefixStateCache(capacity_bytes=10 * state_bytes(FakeState()))
    short, long_ = FakeState(llama_state_size=1), FakeState(llama_state_size=2)
    cache[(1, 2)] = short
    cache[(1, 2, 3, 4)] = long_
    cache[(9,)] = FakeState(llama_state_size=3)
    assert cache[(1, 2, 3, 4, 5, 6)] is long_
    assert cache[(1, 2, 7)] is short
    assert list(cache.cache_state)[-1] == (1, 2)  # most recently used last: evicted last
    assert (5, 5) not in cache
    with pytest.raises(KeyError):
        cache[(5, 5)]


def test_an_empty_cache_is_still_switched_on() -> None:
    # Llama saves a state only `if self.cache:`; an empty cache must not read as "no cache"
    assert bool(PrefixStateCache(1 << 30)) is True


def test_common_prefix_length() -> None:
    assert common_prefix_length((1, 2, 3), (1, 2, 4, 5)) == 2
    assert common_prefix_length((), (1,)) == 0
    assert common_prefix_length((1, 2), (1, 2)) == 2
