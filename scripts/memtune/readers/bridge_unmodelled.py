"""Leading warnings for the memory-relevant settings of a Megatron Bridge config the estimate
does not model.

The Megatron-LM reader warns about such a flag when a launch line gives it (the ``warned`` class
of data/megatron_flags.yaml). A Bridge run-config dump writes every TransformerConfig field,
defaults included, so here a field warns only when it is set off Megatron-Core's class default
(data/mcore_config_defaults.yaml) *and* the switch it depends on is on: a paged-stash size means
nothing without the stash, a flex-dispatcher backend nothing without the flex dispatcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtune.readers.switched_fields import acts, modelled_value

Section = Mapping[str, Any]

#: Fields TransformerConfig derives itself (``__post_init__``) from settings the reader parses.
DERIVED = frozenset({"mtp_standalone"})
#: Judged together with the dispatcher type below, not on its own.
PAIRED = frozenset({"moe_flex_dispatcher_backend"})


#: The bf16 layer settings of Megatron Bridge's named mixed-precision recipes that keep some
#: layers in bf16 (training/mixed_precision.py): (start, end) with first_last_layers_bf16 on.
#: Every other recipe, and MixedPrecisionConfig's own defaults, keep none.
RECIPE_BF16_LAYERS: dict[str, tuple[int, int]] = {
    "bf16_with_fp8_current_scaling_mixed": (1, 1),
    "fp16_with_fp8_current_scaling_mixed": (1, 1),
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": (2, 2),
    "nanov2_bf16_with_fp8_current_scaling_mixed": (2, 2),
    "nemotron_3_super_bf16_with_nvfp4_mixed": (0, 14),
}
#: The MixedPrecisionConfig fields behind those settings, with the class defaults.
MIXED_PRECISION_BF16_DEFAULTS: dict[str, Any] = {
    "first_last_layers_bf16": False,
    "num_layers_at_start_in_bf16": 0,
    "num_layers_at_end_in_bf16": 0,
}


def mixed_precision_fields(mixed: Section) -> tuple[dict[str, Any], str]:
    """The fields a mixed_precision section writes over the model config (MixedPrecisionConfig.setup
    copies every field, its defaults included), and how to name where they come from: a named
    recipe expands to its settings, a mapping keeps its own values over the class defaults."""
    name = mixed.get("_name")
    fields = dict(MIXED_PRECISION_BF16_DEFAULTS)
    where = "mixed_precision"
    if isinstance(name, str) and name in RECIPE_BF16_LAYERS:
        start, end = RECIPE_BF16_LAYERS[name]
        fields.update(first_last_layers_bf16=True, num_layers_at_start_in_bf16=start, num_layers_at_end_in_bf16=end)
        where = f"mixed_precision ({name})"
    fields.update({k: v for k, v in mixed.items() if k != "_name"})
    return fields, where


def _set_off_default(key: str, value: Any, default: Any) -> bool:
    if value is None or value == default:
        return False
    if default is None and value in (False, 0, "", "none", [], {}):
        return False  # an off value of a switch that defaults to unset
    return not modelled_value(key, value)


def unmodelled_model_fields(model_s: Section, comm: Section, mixed: Section | None = None) -> list[str]:
    """WARNING lines for ``model.*`` fields (and ``comm_overlap.*`` / ``mixed_precision.*`` ones,
    which Bridge copies onto the model config: CommOverlapConfig.setup, MixedPrecisionConfig.setup)
    that change memory, are not modelled and are set to act."""
    from memtune.readers.megatron_flags import flag_classes, mcore_config_defaults

    warned, defaults = flag_classes().warned, mcore_config_defaults()
    mixed_fields, mixed_where = mixed_precision_fields(mixed) if mixed else ({}, "mixed_precision")
    # with a mixed_precision section, its fields replace the model's (MixedPrecisionConfig.setup)
    model_only = {k: v for k, v in model_s.items() if k not in mixed_fields}
    effective = {**model_s, **mixed_fields}
    out = []
    for section, where in ((model_only, "model"), (comm, "comm_overlap"), (mixed_fields, mixed_where)):
        for key, value in section.items():
            if key not in warned or key not in defaults or key in DERIVED | PAIRED:
                continue
            if not _set_off_default(key, value, defaults[key]) or not acts(key, effective.get):
                continue
            out.append(f"WARNING: {where}.{key} {value!r} changes memory and is not modelled: {warned[key]}")
    # DeepEP / HybridEP: the flex dispatcher's backend acts only under it, and its default
    # (deepep) is the usual way to turn DeepEP on
    if str(model_s.get("moe_token_dispatcher_type") or "").lower() == "flex":
        backend = model_s.get("moe_flex_dispatcher_backend") or defaults.get("moe_flex_dispatcher_backend")
        out.append(
            f"WARNING: model.moe_token_dispatcher_type flex with backend {backend!r} changes memory and is not "
            f"modelled: {warned.get('moe_flex_dispatcher_backend', 'the flex dispatcher keeps its own buffers')}"
        )
    return list(dict.fromkeys(out))
