"""What the agent loop needs from a chat model: ``chat(messages, max_tokens=, seed=) -> Turn``.

Both the real model (memtune.bench.llama_chat) and the tests' scripted models implement
it; neither the loop nor the tests import llama_cpp through this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


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
