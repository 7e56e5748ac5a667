"""The vocabulary size a Megatron-LM launch line implies when it gives no --vocab-size.

Megatron reads the size from the tokenizer at start-up; the reader never opens a tokenizer, so it
names the size from the tokenizer flags (``data/tokenizers.yaml``) and says where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

GPT2_VOCAB_SIZE = 50257  # GPT2BPETokenizer (Megatron-LM's default tokenizer type)


def vocab_from_tokenizer(a: Mapping[str, Any]) -> tuple[int, str]:
    """(vocabulary size, the assumption to print) when --vocab-size is absent.

    Megatron reads the size from the tokenizer file at start-up, which we never open: a
    known tokenizer file name or type (``data/tokenizers.yaml``) gives its real size, any
    other tokenizer a stated assumption - never an error, because the vocabulary only moves
    the embedding/output matrices and the logits, and a launch script rarely spells it out.
    """
    tokenizer = str(a.get("tokenizer_type", "GPT2BPETokenizer"))
    if tokenizer.startswith("$"):
        default = int(_tokenizer_table()["types"]["SentencePieceTokenizer"]["vocab_size"])
        return default, (
            f"vocabulary ASSUMED {default}: --tokenizer-type is the unresolved {tokenizer}; "
            "pass --vocab-size for the real one"
        )
    if tokenizer == "GPT2BPETokenizer":
        return GPT2_VOCAB_SIZE, f"vocabulary {GPT2_VOCAB_SIZE} (GPT-2 BPE, Megatron's default tokenizer)"
    table = _tokenizer_table()
    # The file name is enough, even behind an unresolved ${DATA_PATH}/ prefix; a Hugging Face
    # name (meta-llama/Llama-2-7b-hf, Megatron-DeepSpeed's --tokenizer-name-or-path gpt2) is
    # matched whole.
    named = str(a.get("tokenizer_model", "") or a.get("tokenizer_name_or_path", "") or "").lower()
    model_file = named.rsplit("/", 1)[-1]
    if model_file.startswith("$"):
        model_file = named = ""
    for key, entry in table.get("models", {}).items():
        if entry.get("exact"):
            hit = model_file == key.lower()
        else:
            hit = key.lower() in model_file or ("/" in key and key.lower() in named)
        if model_file and hit:
            return int(entry["vocab_size"]), (
                f"vocabulary {entry['vocab_size']} for tokenizer {named if '/' in key else model_file} "
                f"({entry['source']}); pass --vocab-size if yours differs"
            )
    entry = table.get("types", {}).get(tokenizer)
    if entry is not None:
        kind = "ASSUMED" if entry.get("assumed") else "known"
        return int(entry["vocab_size"]), (
            f"vocabulary {entry['vocab_size']} {kind} for --tokenizer-type {tokenizer} ({entry['source']})"
        )
    default = int(table["types"]["SentencePieceTokenizer"]["vocab_size"])
    return default, (
        f"vocabulary ASSUMED {default} for --tokenizer-type {tokenizer} (size unknown without the "
        "tokenizer file); pass --vocab-size for the real one"
    )


@lru_cache(maxsize=1)
def _tokenizer_table() -> dict[str, Any]:
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    return load_data_yaml(DATA_DIR / "tokenizers.yaml") or {}
