"""Megatron-LM flags by what they do to GPU memory (data/megatron_flags.yaml).

Every flag of Megatron-LM's real argument list is modelled (read into the specs), memory-
neutral, warned (changes memory but is not modelled: the estimate names it in a leading
warning) or refused (the estimate would be far off: no estimate). The reader asks here which
class a given flag is in; a flag in none is listed as ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memtune.errors import InputError


def ignored_flags(a: Mapping[str, Any]) -> list[str]:
    """Flags given but neither read by the estimator nor classified in data/megatron_flags.yaml.

    A modelled flag counts as known even when this run's reading never consulted it (with
    --bf16 the fp32 gradient buffer is decided before --accumulate-allreduce-grads-in-fp32 is
    looked at): calling it "not a Megatron-LM flag" would be false."""
    table = flag_classes()
    prefixes, names = table.prefixes, table.names
    read: set[str] = getattr(a, "read", set())
    return sorted(
        k
        for k in a
        if k not in read
        and k not in table.modelled
        and k not in names
        and k not in table.warned
        and k not in table.refused
        and k not in table.deepspeed_neutral
        and not k.startswith(prefixes)
    )


def ignored_flag_notes(ignored: list[str]) -> list[str]:
    """What the reader says of flags it does not read: an old flag of an earlier Megatron-LM
    release is told apart from a flag Megatron-LM never had (a typo, or the training script's own
    option), which gets the nearest real flag when one is close.

    Why: the two need different actions. An old flag is real but unmodelled; a misspelt one
    stops Megatron-LM's argument parser before the run starts."""
    import difflib

    table = flag_classes()
    removed = [f for f in ignored if f in table.removed]
    never = [f for f in ignored if f not in table.removed]
    notes = []
    if removed:
        notes.append(
            "ignored flags of earlier Megatron-LM releases (removed since; not modelled here, check they do not "
            "change memory): " + ", ".join("--" + f.replace("_", "-") for f in removed)
        )
    if never:
        known = sorted(table.arguments | table.removed)
        named = []
        for flag in never:
            near = difflib.get_close_matches(flag, known, n=1, cutoff=0.85)
            hint = f" (did you mean --{near[0].replace('_', '-')}?)" if near else ""
            named.append("--" + flag.replace("_", "-") + hint)
        notes.append(
            "ignored flags (not Megatron-LM flags at any commit: its argument parser rejects them unless the "
            "training script adds them; check the spelling and that they do not change memory): " + ", ".join(named)
        )
    return notes


def _peek(a: Mapping[str, Any], key: str) -> Any:
    """A flag's value without marking it read (a _ReadFlags lists what the estimate used)."""
    return dict.get(a, key) if isinstance(a, dict) else a.get(key)


def _given(value: Any) -> bool:
    """Is a flag switched on? (``--x false`` / ``--x none`` in a mapping is not.)"""
    if value is None or value is False:
        return False
    return not (isinstance(value, str) and value.strip().lower() in ("false", "none", "0", ""))


def memory_flags_not_modelled(a: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(flag, why) for each given flag that changes memory but is not modelled (the
    ``warned`` class of data/megatron_flags.yaml), in the order given."""
    from memtune.readers.switched_fields import acts, modelled_value

    warned = flag_classes().warned
    out = [
        (k, warned[k])
        for k in a
        if k in warned
        and _given(_peek(a, k))
        and acts(k, lambda switch: _peek(a, switch))  # e.g. a paged-stash size without the stash
        and not modelled_value(k, _peek(a, k))
    ]
    if str(_peek(a, "experimental_attention_variant") or "").strip().lower() == "dsa":
        out.append(("experimental_attention_variant", "DeepSeek sparse attention adds an indexer per layer"))
    return out


def refuse_unmodelled_models(a: Mapping[str, Any]) -> None:
    """Raise InputError naming the first given flag of the ``refused`` class: the estimate of
    such a model (a linear-attention hybrid like Qwen3-Next) would be far off, so none is made."""
    refused = flag_classes().refused
    for k in a:
        value = _peek(a, k)
        if k == "experimental_attention_variant" and str(value).strip().lower() == "dsa":
            continue  # sparse attention (DeepSeek-V3.2): warned, the model is still a transformer
        if k in refused and _given(value):
            raise InputError(
                f"--{k.replace('_', '-')}: {refused[k]} is not modelled and an estimate would be far off; "
                "no estimate is made - measure one step with torch.cuda.max_memory_allocated()"
            )


@dataclass(frozen=True)
class FlagClasses:
    """data/megatron_flags.yaml: Megatron-LM's flags by what they do to memory."""

    arguments: frozenset[str]
    modelled: frozenset[str]
    prefixes: tuple[str, ...]
    names: frozenset[str]
    warned: Mapping[str, str]
    refused: Mapping[str, str]
    deepspeed_neutral: frozenset[str] = frozenset()
    #: options of earlier Megatron-LM commits that ``arguments`` no longer has (real, not invented)
    removed: frozenset[str] = frozenset()

    def classify(self, name: str) -> str:
        """'refused' | 'warned' | 'modelled' | 'neutral' | 'unclassified'."""
        if name in self.refused:
            return "refused"
        if name in self.warned:
            return "warned"
        if name in self.modelled:
            return "modelled"
        if name in self.names or name.startswith(self.prefixes):
            return "neutral"
        return "unclassified"


@lru_cache(maxsize=1)
def flag_classes() -> FlagClasses:
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    table = load_data_yaml(DATA_DIR / "megatron_flags.yaml") or {}
    return FlagClasses(
        arguments=frozenset(table.get("arguments", ())),
        modelled=frozenset(table.get("modelled", ())),
        prefixes=tuple(table.get("prefixes", ())),
        names=frozenset(table.get("names", ())),
        warned=dict(table.get("warned", {})),
        refused=dict(table.get("refused", {})),
        deepspeed_neutral=frozenset(table.get("deepspeed_neutral", ())),
        removed=frozenset(table.get("removed_arguments", ())),
    )


@lru_cache(maxsize=1)
def mcore_config_defaults() -> dict[str, Any]:
    """Megatron-Core's defaults of the warned and refused TransformerConfig fields
    (data/mcore_config_defaults.yaml, written by scripts/memtune/release/mcore_defaults.py)."""
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    return dict((load_data_yaml(DATA_DIR / "mcore_config_defaults.yaml") or {}).get("defaults") or {})
