"""Hugging Face ``config.json`` -> ModelSpec, for the families in ``data/hf_families.yaml``
(Llama, Llama 4, Mistral, Mixtral, Phi-3/4, Qwen2/2.5/3 and their MoE variants, gpt-oss,
DeepSeek-V2/V3, Kimi K2, Gemma 2/3, OLMo 2, Nemotron and Nemotron-H).

A config.json gives sizes; the family (``model_type``) decides what the file does not say:
Qwen2 has QKV biases, Qwen3 has QK-norm, gpt-oss has attention/expert/router biases and
attention sinks, DeepSeek-V3 has a per-expert score-correction bias, Nemotron uses a plain
squared-ReLU MLP with LayerNorm, Llama 4 puts a shared expert in every MoE layer and a wider
MLP in its dense layers, Gemma 3 omits fields whose transformers defaults it relies on.
Explicit hint fields (``attention_bias``, ``qk_norm``, ``expert_bias``, ``router_bias``,
``mlp``, ``norm``) override the family defaults.

Reading the wrong model is worse than reading none: a config whose layers the estimator
cannot model (linear attention) is refused with InputError, and everything assumed on the
way (an unknown family, a default filled in, a part not counted) comes back as a note that
the helpers print with the estimate (:class:`HFReading`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.files.textfile import read_text
from memtune.spec.model_spec import ModelSpec

REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")

#: Sub-configs of multimodal wrappers that describe something other than the language model.
NON_TEXT_CONFIGS = ("vision_config", "audio_config", "speech_config")

#: Fields only hybrid linear-attention models (Qwen3-Next, Qwen3.5) write; a config with one
#: of them is refused even when it has no layer_types list.
LINEAR_ATTENTION_FIELDS = ("linear_num_value_heads", "linear_num_key_heads", "full_attention_interval")

#: Fields of DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5).
DSA_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")


@dataclass(frozen=True)
class HFReading:
    """A config.json read as a ModelSpec, plus what the reader assumed to get there.

    ``notes`` go out with the estimate (a note starting with ``WARNING`` is also listed
    under warnings), so an agent quoting the numbers also sees what they rest on."""

    model: ModelSpec
    notes: tuple[str, ...]


@lru_cache(maxsize=1)
def _family_table() -> dict[str, Any]:
    from memtune.files.data_yaml import load_data_mapping
    from memtune.files.paths import DATA_DIR

    return load_data_mapping(DATA_DIR / "hf_families.yaml")


def family(model_type: str) -> dict[str, Any] | None:
    """The data/hf_families.yaml entry of ``model_type`` (None when the type is unknown)."""
    entry = (_family_table().get("families") or {}).get(model_type)
    return dict(entry) if isinstance(entry, Mapping) else None


def _first(cfg: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def language_config(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The language model's fields and notes on what was left out.

    Multimodal wrappers (Llama 4, Gemma 3, Qwen3.5) keep the LM under ``text_config``; the
    wrapper's own top-level fields (tie_word_embeddings on Qwen3.5) still apply unless the
    text config repeats them, so they are merged underneath it."""
    notes: list[str] = []
    text = cfg.get("text_config")
    if not isinstance(text, Mapping):
        return dict(cfg), notes
    outer = {k: v for k, v in cfg.items() if k != "text_config" and k not in NON_TEXT_CONFIGS}
    merged = {**outer, **text, "model_type": text.get("model_type", cfg.get("model_type"))}
    others = [k for k in NON_TEXT_CONFIGS if isinstance(cfg.get(k), Mapping)]
    if others:
        notes.append(
            f"language model only: the encoder described by {' and '.join(others)} and its projector are not counted "
            "(their weights, gradients and optimizer state add to the stage that holds them)"
        )
    return merged, notes


def _refuse_unmodelled_layers(cfg: Mapping[str, Any], kind: str) -> None:
    """InputError when the config's layers include a token mixer we have no model for."""
    unsupported = _family_table().get("unsupported_layer_types") or {}
    raw = cfg.get("layer_types")
    types: list[str] = [str(t) for t in raw] if isinstance(raw, list) else []
    interval = cfg.get("full_attention_interval")
    if not types and isinstance(interval, int) and not isinstance(interval, bool) and interval > 0:
        # Qwen3-Next writes no layer_types: transformers derives them, every interval-th layer
        # (1-based) full attention and the rest linear attention
        layers = int(cfg.get("num_hidden_layers") or 0)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    found = sorted({t for t in types if t in unsupported})
    if found:
        count = sum(1 for t in types if t in unsupported)
        what = ", ".join(str(unsupported[t]) for t in found)
        raise InputError(
            f"model_type {kind or '(none)'}: {count} of {len(types)} layers are {what}, which the estimator "
            "does not model; no estimate from this config.json (it would be a different model)"
        )
    present = [f for f in LINEAR_ATTENTION_FIELDS if cfg.get(f) is not None]
    if present:
        raise InputError(
            f"model_type {kind or '(none)'}: hybrid linear-attention model ({', '.join(present)}), which the "
            "estimator does not model; no estimate from this config.json (it would be a different model)"
        )


def _with_defaults(cfg: dict[str, Any], fam: Mapping[str, Any] | None, label: str) -> list[str]:
    """Fill fields the file omits with the family's transformers defaults (in place); one note
    per value used, because the number did not come from the user's file."""
    notes = []
    for key, value in ((fam or {}).get("defaults") or {}).items():
        if cfg.get(key) is None:
            cfg[key] = value
            notes.append(f"{key} not in config.json: {value}, the {label} default in transformers")
    return notes


def _moe_pattern(cfg: Mapping[str, Any], layers: int, llama4: bool) -> tuple[int, ...] | None:
    """1 per MoE layer, 0 per dense layer; None when every layer is MoE."""
    listed = cfg.get("moe_layers")
    if isinstance(listed, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
        moe = set(listed)
        pattern = tuple(1 if i in moe else 0 for i in range(layers))
    elif llama4:
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        moe = set(range(step - 1, layers, step))  # transformers Llama4TextConfig default
        pattern = tuple(1 if i in moe else 0 for i in range(layers))
    else:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        step = int(cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1)
        only_mlp = set(cfg.get("mlp_only_layers") or ())
        pattern = tuple(
            0 if (i < first_dense or i in only_mlp or (i - first_dense) % step) else 1 for i in range(layers)
        )
    return None if all(pattern) else pattern


def model_from_hf(cfg: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """Translate one HF config mapping (raises InputError naming missing fields)."""
    return read_hf(cfg, name).model


def read_hf(cfg: Mapping[str, Any], name: str | None = None) -> HFReading:
    """Translate one HF config mapping into a ModelSpec and the notes on what was assumed.

    Raises InputError naming missing or malformed fields, or the layers it cannot model."""
    cfg, notes = language_config(cfg)
    kind = str(cfg.get("model_type", "")).lower()
    fam = family(kind)
    label = str((fam or {}).get("label") or kind)
    _refuse_unmodelled_layers(cfg, kind)
    notes.extend(_with_defaults(cfg, fam, label))
    missing = [f for f in REQUIRED if cfg.get(f) is None]
    if missing:
        raise InputError(f"HF config is missing {', '.join(missing)}")
    _check_counts(cfg)
    if fam is None:
        notes.insert(
            0,
            f"WARNING: model_type {kind or '(none)'} is not a family this reader knows: read from the standard "
            "field names, Llama-style where the file is silent (RMSNorm, gated MLP, RoPE, no biases unless "
            "attention_bias); check the parameter count against the model card before trusting the estimate",
        )
    elif fam.get("note"):
        notes.append(str(fam["note"]))
    if any(cfg.get(f) is not None for f in DSA_FIELDS):
        notes.insert(
            0,
            f"WARNING: model_type {kind}: DeepSeek Sparse Attention's lightning indexer ("
            + ", ".join(f"{f} {cfg[f]}" for f in DSA_FIELDS if cfg.get(f) is not None)
            + ") is not modelled: estimated as the same model with dense multi-latent attention, "
            "without the indexer's parameters and activations",
        )
    return HFReading(model=_spec(cfg, kind, fam or {}, name), notes=tuple(notes))


def _spec(cfg: Mapping[str, Any], kind: str, fam: Mapping[str, Any], name: str | None) -> ModelSpec:
    layers = int(cfg["num_hidden_layers"])
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    llama4 = bool(fam.get("llama4_moe"))
    experts = _first(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    experts = int(experts) if experts else None
    ffn = _first(cfg, "intermediate_size")
    moe_ffn = _first(cfg, "moe_intermediate_size")
    if llama4 and experts:
        # Llama 4: intermediate_size is the expert (and shared expert) width; dense layers
        # use intermediate_size_mlp.
        moe_ffn, ffn = ffn, _first(cfg, "intermediate_size_mlp", default=ffn)
    if experts and moe_ffn is None:
        moe_ffn = ffn  # Mixtral / gpt-oss: intermediate_size is the expert width
    if ffn is None:
        ffn = moe_ffn
    if ffn is None:
        raise InputError("HF config is missing intermediate_size (or moe_intermediate_size)")

    mlp_hint = str(cfg.get("mlp", cfg.get("mlp_hidden_act", cfg.get("hidden_act", "")))).lower()
    gated = not ("not gated" in mlp_hint or "relu2" in mlp_hint or "squared" in mlp_hint or kind == "nemotron")
    if mlp_hint in ("gelu", "gelu_new", "gelu_pytorch_tanh") and kind in ("gpt2", "gpt_neox", "starcoder2"):
        gated = False
    norm_hint = str(cfg.get("norm", "")).lower()
    layer_norm = "layernorm" in norm_hint or kind in ("nemotron", "gpt_neox", "starcoder2")

    shared = None
    if cfg.get("shared_expert_intermediate_size"):
        shared = int(cfg["shared_expert_intermediate_size"])
    elif cfg.get("moe_shared_expert_intermediate_size"):  # Nemotron 3 (nemotron_h with MoE)
        shared = int(cfg["moe_shared_expert_intermediate_size"])
    elif cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * int(moe_ffn or ffn)
    elif llama4 and experts:
        shared = int(moe_ffn or ffn)  # Llama4TextMoe.shared_expert: one MLP of intermediate_size

    pattern = _moe_pattern(cfg, layers, llama4) if experts else None

    mla = cfg.get("kv_lora_rank") is not None
    attention_bias = bool(cfg.get("attention_bias", False))
    is_gpt_oss = kind == "gpt_oss"
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or cfg.get("name") or kind or "hf-model"),
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=None if mla else _first(cfg, "num_key_value_heads", default=None),
        kv_channels=None if mla else _first(cfg, "head_dim", "attention_head_dim", default=None),
        ffn_hidden_size=int(ffn),
        vocab_size=int(cfg["vocab_size"]),
        gated_linear_unit=gated,
        activation="swiglu" if gated else "squared_relu",
        normalization="LayerNorm" if layer_norm else "RMSNorm",
        add_qkv_bias=attention_bias or bool(fam.get("qkv_bias")) or bool(cfg.get("qkv_bias")),
        add_attn_output_bias=attention_bias,
        qk_layernorm=bool(cfg.get("qk_norm")) or bool(fam.get("qk_norm")),
        softmax_sinks=is_gpt_oss or bool(cfg.get("attention_sinks_per_head")),
        untie_embeddings_and_output_weights=not bool(cfg.get("tie_word_embeddings", False)),
        position_embedding_type="rope",
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
        num_moe_experts=experts,
        moe_router_topk=int(_first(cfg, "num_experts_per_tok", "num_experts_per_token", default=2)),
        moe_ffn_hidden_size=int(moe_ffn) if experts and moe_ffn else None,
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=bool(fam.get("shared_expert_gate")) and bool(shared),
        moe_latent_size=int(cfg["moe_latent_size"]) if experts and cfg.get("moe_latent_size") else None,
        moe_layer_pattern=pattern,
        moe_router_bias=is_gpt_oss or bool(cfg.get("router_bias")),
        moe_router_enable_expert_bias=(
            bool(cfg.get("router_score_correction_bias")) or cfg.get("topk_method") == "noaux_tc"
        ),
        moe_expert_bias=is_gpt_oss or bool(cfg.get("expert_bias")),
        multi_latent_attention=mla,
        q_lora_rank=cfg.get("q_lora_rank"),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 512),
        qk_head_dim=int(cfg.get("qk_nope_head_dim") or 128),
        qk_pos_emb_head_dim=int(cfg.get("qk_rope_head_dim") or 64),
        v_head_dim=int(cfg.get("v_head_dim") or 128),
        mtp_num_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        **_hybrid_fields(cfg),
    )


def _hybrid_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Nemotron-H (model_type nemotron_h): the layer pattern and Mamba-2 sizes, under the
    names its config.json uses (hybrid_override_pattern, ssm_state_size, n_groups, ...)."""
    pattern = cfg.get("hybrid_override_pattern")
    if not pattern:
        return {}
    out: dict[str, Any] = {"hybrid_layer_pattern": str(pattern)}
    for ours, theirs in (
        ("mamba_num_heads", "mamba_num_heads"),
        ("mamba_head_dim", "mamba_head_dim"),
        ("mamba_state_dim", "ssm_state_size"),
        ("mamba_num_groups", "n_groups"),
        ("mamba_d_conv", "conv_kernel"),
        ("mamba_expand", "expand"),
    ):
        if cfg.get(theirs) is not None:
            out[ours] = int(cfg[theirs])
    return out


# Fields that count things (layers, heads, widths, experts): a transformers config always
# writes them as JSON integers. A string, a bool, a fraction, NaN or Infinity is a broken
# or hand-edited file, and silently truncating it would estimate some other model.
COUNT_FIELDS = REQUIRED + (
    "intermediate_size",
    "intermediate_size_mlp",
    "moe_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "interleave_moe_layer_step",
    "num_key_value_heads",
    "head_dim",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "num_experts_per_token",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "moe_layer_freq",
    "max_position_embeddings",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "num_nextn_predict_layers",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "conv_kernel",
    "attention_head_dim",
)


POSITIVE_FIELDS = REQUIRED + ("intermediate_size", "num_key_value_heads", "head_dim", "interleave_moe_layer_step")


def _check_counts(cfg: Mapping[str, Any]) -> None:
    for name in COUNT_FIELDS:
        value = cfg.get(name)
        if value is None:
            continue
        whole = isinstance(value, float) and value.is_integer()  # False for inf and NaN too
        if isinstance(value, bool) or not (isinstance(value, int) or whole):
            raise InputError(f"{name}: expected a whole number, got {value!r}; fix the value in the config.json")
        least = 1 if name in POSITIVE_FIELDS else 0
        if value < least:
            raise InputError(f"{name}: must be at least {least}, got {value!r}; fix the value in the config.json")


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a config.json file (InputError naming the file on bad JSON, types or missing fields)."""
    return read_hf_config(path).model


def read_hf_config(path: str | Path) -> HFReading:
    """Read a config.json file with the reader's notes (InputError naming the file on bad
    JSON, types, missing fields or layers the estimator cannot model)."""
    p = Path(path)
    text = read_text(p, "a Hugging Face config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{p}: JSON nested too deeply to be a Hugging Face config.json") from None
    if not isinstance(cfg, Mapping):
        raise InputError(f"{p}: expected a JSON object (a Hugging Face config.json)")
    try:
        return read_hf(cfg, name=p.parent.name or None)
    except InputError as exc:
        raise InputError(f"{p}: {exc}") from None
