"""The architecture of a decoder-only transformer, and its exact parameter count.

One frozen dataclass, :class:`ModelSpec`, names every architectural choice that changes
how many parameters a Megatron-Core GPT model has (GQA, gated MLP, MoE with routed and
shared experts and a layer pattern, multi-latent attention, multi-token prediction,
biases, QK-norm, attention sinks, tied embeddings, padded vocabulary). The counting
functions below are exact for Hugging Face checkpoints (every weight and bias, each
matrix once) and, with ``padded=True``, for Megatron's padded vocabulary.

Only the standard library is imported: the CLI's ``--help`` must work without
third-party packages, and the planner calls these functions thousands of times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

# Field names whose absence makes a model unusable (reported by name by the loaders).
REQUIRED_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts, using Megatron-Core's TransformerConfig names where one exists.

    Defaults describe a Llama-style model (RMSNorm, no linear biases, SwiGLU, RoPE,
    untied embeddings) because that is what most presets are; loaders set every field
    they know. ``None`` for an optional size means "derive it" (see the properties).
    """

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    vocab_size: int
    ffn_hidden_size: int | None = None  # dense MLP width; default 4*hidden
    num_query_groups: int | None = None  # GQA groups (KV heads); None = MHA
    kv_channels: int | None = None  # head dim; None = hidden/heads
    name: str = "custom"
    gated_linear_unit: bool = True  # SwiGLU/GeGLU: fc1 produces gate and up halves
    activation: str = "swiglu"  # swiglu | gelu | squared_relu | relu (for the record)
    normalization: str = "RMSNorm"  # RMSNorm (weight) | LayerNorm (weight + bias)
    add_bias_linear: bool = False  # biases on every linear (qkv, proj, fc1, fc2)
    add_qkv_bias: bool = False  # biases on qkv only (Qwen2)
    add_attn_output_bias: bool = False  # bias on the attention output projection (gpt-oss)
    qk_layernorm: bool = False  # per-head-dim norm on Q and K (Qwen3, OLMo2)
    softmax_sinks: bool = False  # one learned sink logit per head (gpt-oss)
    untie_embeddings_and_output_weights: bool = True
    position_embedding_type: str = "rope"  # rope | learned_absolute | none
    max_position_embeddings: int = 4096
    make_vocab_size_divisible_by: int = 128
    # --- mixture of experts -------------------------------------------------------
    num_moe_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None  # per-expert width; default ffn_hidden_size
    moe_shared_expert_intermediate_size: int | None = None  # all shared experts together
    moe_shared_expert_gate: bool = False  # sigmoid gate on the shared expert (Qwen2-MoE)
    moe_latent_size: int | None = None  # routed experts work in this width (latent MoE, Nemotron 3 Super)
    moe_layer_pattern: tuple[int, ...] | None = None  # 1 = MoE layer; None = all MoE
    moe_router_bias: bool = False  # router linear has a bias (gpt-oss)
    moe_router_enable_expert_bias: bool = False  # score-correction bias per expert (DeepSeek-V3)
    moe_expert_bias: bool = False  # expert fc1/fc2 have biases (gpt-oss)
    # --- multi-latent attention (DeepSeek-V2/V3) ----------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None
    kv_lora_rank: int = 512
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # --- multi-token prediction ---------------------------------------------------
    mtp_num_layers: int = 0
    # --- hybrid Mamba / attention (Megatron-Core HybridModel, Nemotron-H) ------------
    # One symbol per decoder layer: M Mamba, * self-attention, - MLP, E MoE (Megatron's
    # hybrid_layer_allocation.Symbols); None = a plain transformer (attention + MLP per layer).
    hybrid_layer_pattern: str | None = None
    mamba_state_dim: int = 128  # d_state (Megatron default)
    mamba_head_dim: int = 64
    mamba_num_groups: int = 8
    mamba_num_heads: int | None = None  # None = expand * hidden / head_dim
    mamba_expand: int = 2  # MambaMixer's expand: d_inner = expand * hidden
    mamba_d_conv: int = 4  # causal conv width
    extra: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    # ----------------------------------------------------------------- derived sizes
    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size if self.ffn_hidden_size else 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.kv_channels if self.kv_channels else self.hidden_size // self.num_attention_heads

    @property
    def query_groups(self) -> int:
        return self.num_query_groups if self.num_query_groups else self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return bool(self.num_moe_experts)

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size if self.moe_ffn_hidden_size else self.ffn

    @property
    def layer_norm_width(self) -> int:
        """Parameters per normalised feature: LayerNorm has a bias, RMSNorm does not."""
        return 2 if self.normalization.lower().startswith("layernorm") else 1

    @property
    def is_hybrid(self) -> bool:
        return bool(self.hybrid_layer_pattern)

    @property
    def mamba_d_inner(self) -> int:
        if self.mamba_num_heads:
            return self.mamba_num_heads * self.mamba_head_dim
        return self.mamba_expand * self.hidden_size

    @property
    def mamba_heads(self) -> int:
        return self.mamba_num_heads or self.mamba_d_inner // self.mamba_head_dim

    def layer_kinds(self) -> tuple[str, ...]:
        """Per decoder layer: 'M' Mamba, '*' attention, '-' MLP, 'E' MoE; 'T' for a plain
        transformer layer (attention + MLP, MoE when the MoE pattern says so)."""
        if self.hybrid_layer_pattern:
            return tuple(hybrid_symbols(self.hybrid_layer_pattern))
        return ("T",) * self.num_layers

    def moe_layers(self) -> tuple[bool, ...]:
        """Per decoder layer: is its MLP a mixture of experts?"""
        if self.hybrid_layer_pattern:
            return tuple(k == "E" for k in self.layer_kinds())
        if not self.is_moe:
            return (False,) * self.num_layers
        if self.moe_layer_pattern is None:
            return (True,) * self.num_layers
        return tuple(bool(x) for x in self.moe_layer_pattern)

    def padded_vocab_size(self, tp: int = 1) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x TP."""
        multiple = max(1, self.make_vocab_size_divisible_by) * max(1, tp)
        return -(-self.vocab_size // multiple) * multiple

    def with_(self, **changes: Any) -> ModelSpec:
        return replace(self, **changes)


HYBRID_SYMBOLS = {"M": "Mamba", "*": "attention", "-": "MLP", "E": "MoE"}


def hybrid_symbols(pattern: str) -> list[str]:
    """Decoder-layer symbols of a hybrid pattern: the part before the MTP separator '/',
    without pipeline-stage separators '|' (Megatron's hybrid_layer_allocation). Raises
    ValueError naming a symbol we do not model (GDN 'G', DSA 'D', MLA '+')."""
    main = str(pattern).split("/")[0].replace("|", "").replace(" ", "").strip("\"'")
    unknown = sorted({c for c in main if c not in HYBRID_SYMBOLS})
    if unknown:
        raise ValueError(
            f"hybrid layer pattern symbol(s) {' '.join(unknown)} not modelled; "
            f"known: {', '.join(f'{k} {v}' for k, v in HYBRID_SYMBOLS.items())}"
        )
    return list(main)


def hybrid_stage_kinds(pattern: str, counts: tuple[int, ...]) -> tuple[str, ...]:
    """Layer symbols on each pipeline stage: from the '|' segments when the pattern has them
    (segment i on stage i mod PP), else contiguous runs of ``counts`` layers."""
    main = str(pattern).split("/")[0]
    pp = len(counts)
    if "|" in main:
        segments = main.split("|")
        if len(segments) % pp == 0:
            stages = tuple("".join(segments[i] for i in range(stage, len(segments), pp)) for stage in range(pp))
            if tuple(len(x) for x in stages) == tuple(counts):
                return stages
        main = main.replace("|", "")  # another split was chosen (e.g. by the planner): contiguous runs
    out, start = [], 0
    for n in counts:
        out.append(main[start : start + n])
        start += n
    return tuple(out)


def model_field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(ModelSpec) if f.name != "extra")


def coerce_model_values(values: Mapping[str, Any], where: str = "model") -> dict[str, Any]:
    """Check and convert field values by their declared type (ValueError names the field).

    Config files carry strings and YAML scalars; arithmetic later must never meet a
    string, so every int/bool/str field is converted here or rejected by name.
    """
    types = {f.name: str(f.type) for f in fields(ModelSpec)}
    out: dict[str, Any] = {}
    for key, value in values.items():
        kind = types.get(key, "")
        if value is None or key == "extra":
            out[key] = value
        elif kind.startswith("int"):
            if isinstance(value, bool) or isinstance(value, (list, tuple, dict)):
                raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
            try:
                number = int(value)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"{where}.{key}: expected an integer, got {value!r}") from None
            if number != value and not isinstance(value, str):
                raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
            out[key] = number
        elif kind == "bool":
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true"
            if not isinstance(value, bool) and value not in (0, 1):
                raise ValueError(f"{where}.{key}: expected true or false, got {value!r}")
            out[key] = bool(value)
        elif kind == "str":
            if isinstance(value, (list, tuple, dict)):
                raise ValueError(f"{where}.{key}: expected a name, got {value!r}")
            out[key] = str(value)
        elif kind.startswith("tuple"):
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(x, (int, bool)) or (isinstance(x, str) and x.isdigit()) for x in value
            ):
                raise ValueError(f"{where}.{key}: expected a list of 0/1 flags, got {value!r}")
            out[key] = tuple(int(x) for x in value)
        else:
            out[key] = value
    return out


def model_from_mapping(values: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a flat mapping of field names (preset files, tests).

    Raises ``ValueError`` naming the missing fields or the unknown ones, so every loader
    reports the same message.
    """
    known = set(model_field_names())
    unknown = sorted(k for k in values if k not in known)
    if unknown:
        raise ValueError(f"unknown model field(s): {', '.join(unknown)}")
    missing = [k for k in REQUIRED_FIELDS if values.get(k) in (None, "")]
    if missing:
        raise ValueError(f"missing model field(s): {', '.join(missing)}")
    kwargs = coerce_model_values(values)
    if name is not None:
        kwargs["name"] = name
    return ModelSpec(**kwargs)


# ---------------------------------------------------------------------- counting
@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, split by how Megatron shards them.

    ``dense`` is sharded by TP (attention, dense MLP, shared expert); ``replicated`` is
    the same on every TP rank (norms, router); ``expert`` holds the routed experts,
    sharded by EP x ETP.
    """

    dense: int
    replicated: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.replicated + self.expert


def attention_params(m: ModelSpec) -> tuple[int, int]:
    """(TP-sharded, replicated) parameters of one self-attention block incl. its input norm."""
    h, a = m.hidden_size, m.num_attention_heads
    norm = m.layer_norm_width
    replicated = norm * h  # input layernorm
    if m.multi_latent_attention:
        q_dim = m.qk_head_dim + m.qk_pos_emb_head_dim
        if m.q_lora_rank:
            sharded = m.q_lora_rank * a * q_dim
            replicated += h * m.q_lora_rank + norm * m.q_lora_rank  # down-proj + its norm
        else:
            sharded = h * a * q_dim
        replicated += h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) + norm * m.kv_lora_rank
        sharded += m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim)
        sharded += a * m.v_head_dim * h
        if m.add_bias_linear:
            replicated += h
        return sharded, replicated
    d, g = m.head_dim, m.query_groups
    qkv_out = (a + 2 * g) * d
    sharded = h * qkv_out + a * d * h
    if m.add_bias_linear or m.add_qkv_bias:
        sharded += qkv_out
    if m.add_bias_linear or m.add_attn_output_bias:
        replicated += h  # row-parallel output bias is not split
    if m.qk_layernorm:
        replicated += 2 * norm * d
    if m.softmax_sinks:
        sharded += a
    return sharded, replicated


def _mlp_params(h: int, ffn: int, gated: bool, bias: bool) -> tuple[int, int]:
    """(column+row weights incl. column bias, row-parallel output bias)."""
    up = ffn * (2 if gated else 1)
    weights = h * up + ffn * h + (up if bias else 0)
    return weights, (h if bias else 0)


def layer_params(m: ModelSpec, moe: bool) -> LayerParams:
    attn_sharded, attn_rep = attention_params(m)
    h = m.hidden_size
    replicated = attn_rep + m.layer_norm_width * h  # pre-MLP norm
    dense = attn_sharded
    expert = 0
    if not moe:
        w, b = _mlp_params(h, m.ffn, m.gated_linear_unit, m.add_bias_linear)
        dense += w
        replicated += b
    else:
        e = m.num_moe_experts or 0
        replicated += h * e + (e if m.moe_router_bias else 0)
        replicated += e if m.moe_router_enable_expert_bias else 0
        # Latent MoE: Megatron's MoELayer projects h -> latent before dispatch and latent -> h
        # after combine (fc1_latent_proj / fc2_latent_proj, TELinear parallel_mode="duplicated":
        # replicated over TP); the routed experts' fc1 input and fc2 output are latent-wide.
        width = m.moe_latent_size or h
        if m.moe_latent_size:
            replicated += 2 * h * m.moe_latent_size + ((m.moe_latent_size + h) if m.add_bias_linear else 0)
        ew, eb = _mlp_params(width, m.expert_ffn, m.gated_linear_unit, m.moe_expert_bias)
        expert = e * (ew + eb)
        if m.moe_shared_expert_intermediate_size:
            sw, sb = _mlp_params(h, m.moe_shared_expert_intermediate_size, m.gated_linear_unit, m.add_bias_linear)
            dense += sw
            replicated += sb + (h if m.moe_shared_expert_gate else 0)
    return LayerParams(dense=dense, replicated=replicated, expert=expert)


def mamba_layer_params(m: ModelSpec) -> LayerParams:
    """One Megatron-Core Mamba layer (MambaMixer, mamba_mixer.py): in_proj h -> z, x, B, C,
    dt (2 d_inner + 2 groups d_state + heads) with its fused input norm, the depthwise causal
    conv over x, B, C (weight x d_conv + bias), dt_bias, A_log and D per head, the gated
    RMSNorm over d_inner and out_proj d_inner -> h; everything but the input norm is
    TP-sharded."""
    h, d_inner, heads = m.hidden_size, m.mamba_d_inner, m.mamba_heads
    groups_state = m.mamba_num_groups * m.mamba_state_dim
    in_proj = h * (2 * d_inner + 2 * groups_state + heads)
    conv_dim = d_inner + 2 * groups_state
    conv = conv_dim * m.mamba_d_conv + conv_dim
    sharded = in_proj + conv + 3 * heads + d_inner + d_inner * h
    return LayerParams(dense=sharded, replicated=m.layer_norm_width * h, expert=0)


def hybrid_layer_params(m: ModelSpec, kind: str) -> LayerParams:
    """Parameters of one layer of a hybrid pattern: each symbol is a whole layer with its
    own pre-norm ('*' attention only, '-' MLP only, 'E' MoE only, 'M' Mamba)."""
    if kind == "M":
        return mamba_layer_params(m)
    if kind == "*":
        sharded, replicated = attention_params(m)
        return LayerParams(dense=sharded, replicated=replicated, expert=0)
    attn_sharded, attn_rep = attention_params(m)
    full = layer_params(m, kind == "E")
    # a transformer layer minus its attention block (which carries the input norm)
    return LayerParams(dense=full.dense - attn_sharded, replicated=full.replicated - attn_rep, expert=full.expert)


def mtp_layer_params(m: ModelSpec) -> LayerParams:
    """One multi-token-prediction module: two norms, the 2h->h projection, a decoder
    layer shaped like the last main layer, and its final norm (embedding and output
    head are shared with the main model)."""
    inner = layer_params(m, m.moe_layers()[-1] if m.num_layers else False)
    h = m.hidden_size
    return LayerParams(
        dense=inner.dense + 2 * h * h,
        replicated=inner.replicated + 3 * m.layer_norm_width * h,
        expert=inner.expert,
    )


def embedding_params(m: ModelSpec, padded_tp: int | None = None) -> int:
    """Input embedding (vocab x hidden, plus learned positions if used)."""
    v = m.vocab_size if padded_tp is None else m.padded_vocab_size(padded_tp)
    pos = m.max_position_embeddings * m.hidden_size if m.position_embedding_type == "learned_absolute" else 0
    return v * m.hidden_size + pos


def output_params(m: ModelSpec, padded_tp: int | None = None) -> int:
    """Separate output projection; 0 when tied to the input embedding."""
    if not m.untie_embeddings_and_output_weights:
        return 0
    v = m.vocab_size if padded_tp is None else m.padded_vocab_size(padded_tp)
    return v * m.hidden_size


@dataclass(frozen=True)
class ParamCount:
    """A model's parameters by part (all integers, exact)."""

    embedding: int
    decoder: int
    final_norm: int
    output: int
    mtp: int
    expert: int  # routed-expert share of decoder + mtp
    active: int  # parameters touched per token (top-k experts only)

    @property
    def total(self) -> int:
        return self.embedding + self.decoder + self.final_norm + self.output + self.mtp


def count_parameters(m: ModelSpec, padded_tp: int | None = None, include_mtp: bool = True) -> ParamCount:
    """Exact parameter count; ``padded_tp`` pads the vocabulary as Megatron does for that TP."""
    dense_layer = layer_params(m, False)
    moe_layer = layer_params(m, True) if m.is_moe else dense_layer
    pattern = m.moe_layers()
    n_moe = sum(pattern)
    n_dense = m.num_layers - n_moe
    if m.is_hybrid:
        kinds = m.layer_kinds()
        decoder = sum(hybrid_layer_params(m, k).total * kinds.count(k) for k in set(kinds))
    else:
        decoder = n_dense * dense_layer.total + n_moe * moe_layer.total
    expert = n_moe * moe_layer.expert
    mtp = 0
    if include_mtp and m.mtp_num_layers:
        mt = mtp_layer_params(m)
        mtp = m.mtp_num_layers * mt.total
        expert += m.mtp_num_layers * mt.expert
    emb = embedding_params(m, padded_tp)
    out = output_params(m, padded_tp)
    final_norm = m.layer_norm_width * m.hidden_size
    total = emb + decoder + final_norm + out + mtp
    active = total
    if m.is_moe and m.num_moe_experts:
        per_expert = expert / (n_moe + (m.mtp_num_layers if include_mtp else 0)) / m.num_moe_experts if expert else 0
        unused = (m.num_moe_experts - min(m.moe_router_topk, m.num_moe_experts)) * per_expert
        active = int(round(total - unused * (n_moe + (m.mtp_num_layers if include_mtp else 0))))
    return ParamCount(
        embedding=emb, decoder=decoder, final_norm=final_norm, output=out, mtp=mtp, expert=expert, active=active
    )


def total_parameters(m: ModelSpec, padded_tp: int | None = None, include_mtp: bool = True) -> int:
    return count_parameters(m, padded_tp, include_mtp).total
