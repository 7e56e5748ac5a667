"""Memory settings that act only under another setting, shared by both readers' "changes memory
and is not modelled" warnings (Megatron-LM flags and Megatron Bridge fields).

TransformerConfig reads a paged-stash size only with the stash on, the bf16 layer counts only
with ``first_last_layers_bf16``, the context-parallel communication type only with CP > 1: a
warning for such a setting with its switch off names something the run never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: setting -> the setting it acts under (a switch that must be on; for context_parallel_size, > 1).
ACTS_UNDER: dict[str, str] = {
    "num_layers_at_start_in_bf16": "first_last_layers_bf16",
    "num_layers_at_end_in_bf16": "first_last_layers_bf16",
    "kitchen_attention_backend": "use_kitchen_attention",
    "moe_paged_stash_buffer_size_factor_cpu": "moe_paged_stash",
    "moe_paged_stash_buffer_size_factor_cuda": "moe_paged_stash",
    "moe_paged_stash_page_size": "moe_paged_stash",
    "activation_offload_fraction": "fine_grained_activation_offloading",
    "min_offloaded_tensor_size": "fine_grained_activation_offloading",
    "delay_offload_until_cuda_graph": "fine_grained_activation_offloading",
    "delta_offload_bytes_across_pp_ranks": "fine_grained_activation_offloading",
    "fine_grained_offloading_max_inflight_offloads": "fine_grained_activation_offloading",
    "cp_comm_type": "context_parallel_size",
}

#: Values that mean what the estimate models although the setting is given: p2p is the
#: context-parallel exchange the estimate prices (and what TE's attention uses when unset,
#: extensions/transformer_engine.py; several Bridge providers write it as their default); zero
#: bf16 layers keeps every layer in the low-precision recipe the estimate reads.
MODELLED_VALUES: dict[str, tuple[str, ...]] = {
    "cp_comm_type": ("p2p",),
    # no layer kept in bf16 (Bridge's MixedPrecisionConfig default; Megatron-Core's is 1)
    "num_layers_at_start_in_bf16": ("0",),
    "num_layers_at_end_in_bf16": ("0",),
}

_OFF_WORDS = ("false", "none", "0", "")


def switched_on(switch: str, value: Any) -> bool:
    """Is ``switch`` on? A boolean switch is on unless unset / false; the CP size when above 1."""
    if switch == "context_parallel_size":
        return value is not None and str(value).strip() not in ("1", "")
    if value is None or value is False:
        return False
    return not (isinstance(value, str) and value.strip().lower() in _OFF_WORDS)


def acts(setting: str, get: Callable[[str], Any]) -> bool:
    """Does ``setting`` act in this run? ``get`` reads another setting of the same run."""
    switch = ACTS_UNDER.get(setting)
    return switch is None or switched_on(switch, get(switch))


def modelled_value(setting: str, value: Any) -> bool:
    """Is every value given (one, a list, or an nargs flag's ``['p2p']`` text) one the estimate models?"""
    modelled = MODELLED_VALUES.get(setting)
    if not modelled:
        return False
    values = value if isinstance(value, list | tuple) else [value]
    words = [str(v).strip().strip("[]").strip().strip("'\"").lower() for v in values]
    return bool(words) and all(w in modelled for w in words)
