"""The training program's arguments: Megatron-LM ``--flags``, Hydra overrides, Bridge shortcuts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memtune.errors import InputError
from memtune.readers.launch.script import Flag, Override, Word

# Bridge performance-script shortcuts -> ConfigContainer paths (scripts/performance/argument_parser.py).
BRIDGE_SHORTCUTS: Mapping[str, str] = {
    "-tp": "model.tensor_model_parallel_size",
    "--tensor_model_parallel_size": "model.tensor_model_parallel_size",
    "-pp": "model.pipeline_model_parallel_size",
    "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "-vp": "model.virtual_pipeline_model_parallel_size",
    "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
    "-cp": "model.context_parallel_size",
    "--context_parallel_size": "model.context_parallel_size",
    "-ep": "model.expert_model_parallel_size",
    "--expert_model_parallel_size": "model.expert_model_parallel_size",
    "-etp": "model.expert_tensor_parallel_size",
    "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "-mb": "train.micro_batch_size",
    "--micro_batch_size": "train.micro_batch_size",
    "-gb": "train.global_batch_size",
    "--global_batch_size": "train.global_batch_size",
}


def split_program_args(
    args: Sequence[Word], valueless: frozenset[str] = frozenset()
) -> tuple[dict[str, Flag], list[Override]]:
    """Megatron-LM ``--flags`` and Hydra overrides / Bridge shortcuts among the program's args.

    A flag takes the following words as its values until the next ``-``-word or override;
    ``valueless`` names switches that never take a value (``use-nccl-ub`` ...), so a word
    after them is not swallowed. The last occurrence of a flag wins, as in Megatron-LM's own command-line parser.
    """
    flags: dict[str, Flag] = {}
    overrides: list[Override] = []
    i, n = 0, len(args)
    while i < n:
        word = args[i]
        text = word.text
        if text in BRIDGE_SHORTCUTS and i + 1 < n:
            value = args[i + 1].text
            overrides.append(Override(BRIDGE_SHORTCUTS[text], value, word.line, "", f"{text} {value}"))
            i += 2
            continue
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text[2:].partition("=")
            values: list[str] = []
            if eq:
                values.append(value)
            elif name not in valueless:
                j = i + 1
                while j < n and not _is_option(args[j].text) and not (is_override(args[j].text) and not args[j].quoted):
                    values.append(args[j].text)
                    j += 1
                i = j - 1
            assumed = word.assumed + tuple(note for w in args[i - len(values) + 1 : i + 1] for note in w.assumed)
            if eq:
                assumed = word.assumed
            flags[name] = Flag(name, tuple(values), word.line, tuple(dict.fromkeys(assumed)))
            i += 1
            continue
        if is_override(text):
            override = parse_override(text, word.line)
            if override is not None:
                overrides.append(override)
        i += 1
    return flags, overrides


def _is_option(text: str) -> bool:
    if not text.startswith("-") or text == "-":
        return False
    return not re.fullmatch(r"-\d+(\.\d+)?([eE][+-]?\d+)?", text)


def is_override(text: str) -> bool:
    """A Hydra override word (``key=value``, ``+key=``, ``++key=``, ``~key``)? Shared rule: memtune.spec.overrides."""
    from memtune.spec import overrides

    return overrides.is_override(text)


_OPS = {"set": "", "add": "+", "force": "++", "delete": "~"}


def parse_override(text: str, line: int = 0) -> Override | None:
    """``model.tensor_model_parallel_size=4`` / ``+peft=lora`` / ``~model.x`` -> Override, else None.

    Parsing is memtune.spec.overrides' (Hydra's grammar); this adds the source line and keeps
    the value as written, so a finding can quote it.
    """
    from memtune.spec import overrides

    if not overrides.is_override(text.strip()):
        return None
    try:
        parsed = overrides.parse_override(text)
    except InputError:
        return None
    value = text.strip().partition("=")[2] if parsed.has_value else None
    return Override(".".join(parsed.path), value, line, _OPS[parsed.op], text)
