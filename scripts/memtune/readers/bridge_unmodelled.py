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
    mixed = mixed or {}
    effective = {**model_s, **mixed}  # the mixed-precision setup writes its fields over the model's
    out = []
    for section, where in ((model_s, "model"), (comm, "comm_overlap"), (mixed, "mixed_precision")):
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
