"""Megatron Bridge's nested model config: ``model.transformer.*`` read as the flat ``model.*``.

Bridge's newer model configs (``BridgeGPTModelConfig``, the default model config class of its
bridges on main after v0.6) keep every TransformerConfig field - layout, sizes, recompute,
precision - in a ``transformer`` member, and a dumped ConfigContainer writes them under
``model.transformer``; the model-level fields (vocab size, sequence length, position
embedding) stay under ``model``. Each field has exactly one owner, and Bridge routes a flat
assignment (``model.tensor_model_parallel_size = 2``) to it, so reading both levels as one
mapping loses nothing. Without this the reader found no ``model.tensor_model_parallel_size``
in such a file and estimated TP 1, with no warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NESTED = "transformer"
_PREFIX = f"model.{NESTED}."


def lift_transformer(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with ``model.transformer``'s fields moved up into ``model``.

    A key written at both levels keeps the ``model`` one: there it can only have come from an
    override or an older, flat config, both written on purpose. The nested ``_target_`` (the
    class that builds the transformer) is dropped; the model's own stays."""
    model = cfg.get("model")
    if not isinstance(model, Mapping) or not isinstance(model.get(NESTED), Mapping):
        return dict(cfg)
    nested = {k: v for k, v in model[NESTED].items() if k != "_target_"}
    outer = {k: v for k, v in model.items() if k != NESTED}
    return {**cfg, "model": {**nested, **outer}}


def flat_model_key(dotted: str) -> str:
    """``model.transformer.x`` as ``model.x`` (other keys unchanged), for readers of dotted keys."""
    return "model." + dotted[len(_PREFIX) :] if dotted.startswith(_PREFIX) else dotted


def flat_override(text: str) -> str:
    """A Hydra-style override (``model.transformer.x=v``, ``+``/``++``/``~`` prefixes kept)
    addressed to the flat field, as the loaded config has been lifted: without this the
    override would make a nested key that the lifted ``model.x`` hides."""
    op = text[: len(text) - len(text.lstrip("+~"))]
    return op + flat_model_key(text[len(op) :])
