"""Hugging Face ``config.json`` -> ModelSpec, for Llama, Mistral, Qwen2/3, Qwen2/3-MoE,
Mixtral, gpt-oss, DeepSeek-V2/V3, Nemotron and Nemotron-H (hybrid Mamba) field names.

The architecture family (``model_type``) decides what the file does not say: Qwen2 has
QKV biases, Qwen3 has QK-norm, gpt-oss has attention/expert/router biases and attention
sinks, DeepSeek-V3 has a per-expert score-correction bias, Nemotron uses a plain
squared-ReLU MLP with LayerNorm. Explicit hint fields (``attention_bias``, ``qk_norm``,
``expert_bias``, ``router_bias``, ``mlp``, ``norm``) override the family defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.files.textfile import read_text
from memtune.spec.model_spec import ModelSpec

REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


def _first(cfg: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def model_from_hf(cfg: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """Translate one HF config mapping (raises InputError naming missing fields)."""
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the LM here
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
    missing = [f for f in REQUIRED if cfg.get(f) is None]
    if missing:
        raise InputError(f"HF config is missing {', '.join(missing)}")
    _check_counts(cfg)
    kind = str(cfg.get("model_type", "")).lower()
    layers = int(cfg["num_hidden_layers"])
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    experts = _first(cfg, "num_local_experts", "num_experts", "n_routed_experts")
    experts = int(experts) if experts else None
    ffn = _first(cfg, "intermediate_size")
    moe_ffn = _first(cfg, "moe_intermediate_size")
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
    elif cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * int(moe_ffn or ffn)

    pattern = None
    if experts:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        step = int(cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1)
        only_mlp = set(cfg.get("mlp_only_layers") or ())
        pattern = tuple(
            0 if (i < first_dense or i in only_mlp or (i - first_dense) % step) else 1 for i in range(layers)
        )
        if all(pattern):
            pattern = None

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
        add_qkv_bias=attention_bias or kind in ("qwen2", "qwen2_moe") or bool(cfg.get("qkv_bias")),
        add_attn_output_bias=attention_bias,
        qk_layernorm=bool(cfg.get("qk_norm")) or kind in ("qwen3", "qwen3_moe", "olmo2"),
        softmax_sinks=is_gpt_oss or bool(cfg.get("attention_sinks_per_head")),
        untie_embeddings_and_output_weights=not bool(cfg.get("tie_word_embeddings", False)),
        position_embedding_type="rope",
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 4096),
        num_moe_experts=experts,
        moe_router_topk=int(_first(cfg, "num_experts_per_tok", "num_experts_per_token", default=2)),
        moe_ffn_hidden_size=int(moe_ffn) if experts and moe_ffn else None,
        moe_shared_expert_intermediate_size=shared,
        moe_shared_expert_gate=kind == "qwen2_moe" and bool(shared),
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
    "moe_intermediate_size",
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


POSITIVE_FIELDS = REQUIRED + ("intermediate_size", "num_key_value_heads", "head_dim")


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
        return model_from_hf(cfg, name=p.parent.name or None)
    except InputError as exc:
        raise InputError(f"{p}: {exc}") from None
