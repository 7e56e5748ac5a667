"""Megatron-LM's theoretical memory formula, re-implemented for comparison only.

This follows the arithmetic of ``megatron/training/theoretical_memory_usage.py`` (NVIDIA
Megatron-LM, main branch) as written there, so our estimator can be compared with it on the
same measured runs. It is not used by the skill itself. What it does, in short:

* weights + optimizer: parameters of the most-loaded shard (1/PP of the transformer block,
  the whole MTP block and one embedding matrix, all over TP; plus the output matrix when
  untied and PP == 1) times 18 bytes, or 6 + 12/DP with the distributed optimizer;
* activations with SP and selective recompute: Korthikanti et al. Table 2,
  ``s*b*h*(18 + 4*ffn/h)`` per layer for all layers, plus embedding terms, the interleaving
  penalty ``1 + (pp-1)/(pp*v)``, a ``min(1, m/pp)`` discount without interleaving, and the
  output layer term ``4*s*b*h*(1 + V/h)`` only when PP == 1; everything over TP;
* otherwise: ``s*b*h*(10 + 24/tp)`` per layer, the same embedding and schedule terms, the
  logits ``2*(s*b*V/tp + s*b*h)`` when PP == 1, and a flat 5% allowance.

The formula describes the *first* (most-loaded) stage; it has no notion of which rank was
measured, of recompute other than selective, of flash attention or of PEFT.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReferenceInputs:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    ffn_hidden_size: int
    padded_vocab_size: int
    swiglu: bool
    normalization: str
    untie_embeddings: bool
    num_experts: int | None
    moe_ffn_hidden_size: int | None
    moe_shared_expert_intermediate_size: int | None
    moe_layer_pattern: tuple[int, ...] | None
    mtp_num_layers: int | None
    multi_latent_attention: bool
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_emb_head_dim: int
    v_head_dim: int
    tp: int
    pp: int
    vpp: int | None
    dp: int
    seq_length: int
    micro_batch_size: int
    num_microbatches: int
    sequence_parallel: bool
    recompute_granularity: str | None
    use_distributed_optimizer: bool


def weight_and_optimizer_bytes(a: ReferenceInputs) -> float:
    norm = 1 if a.normalization == "RMSNorm" else 2
    gated = 1.5 if a.swiglu else 1.0
    experts = a.num_experts or 1
    if a.num_experts:
        pattern = list(a.moe_layer_pattern) if a.moe_layer_pattern else [1] * a.num_layers
        if len(pattern) != a.num_layers:
            raise ValueError("moe layer pattern length differs from num_layers")
        n_moe = sum(pattern)
        moe_ffn = a.moe_ffn_hidden_size or a.ffn_hidden_size
    else:
        pattern = [0] * a.num_layers
        n_moe = 0
        moe_ffn = 0
    n_dense = a.num_layers - n_moe
    mtp_moe = pattern[-1] * (a.mtp_num_layers or 0)
    mtp_dense = (1 - pattern[-1]) * (a.mtp_num_layers or 0)
    h = a.hidden_size
    if a.multi_latent_attention:
        qd = a.qk_head_dim + a.qk_pos_emb_head_dim
        if a.q_lora_rank is None:
            q = h * a.num_attention_heads * qd
        else:
            q = a.q_lora_rank * (h + a.num_attention_heads * qd + norm)
        attn = (
            q
            + a.kv_lora_rank * (h + a.num_attention_heads * (a.qk_head_dim + a.v_head_dim) + norm)
            + h * a.qk_pos_emb_head_dim
            + a.num_attention_heads * a.v_head_dim * h
        )
    else:
        ratio = a.kv_channels * a.num_attention_heads / h
        attn = 2 * h * h * ((1 + a.num_query_groups / a.num_attention_heads) * ratio)
    shared = a.moe_shared_expert_intermediate_size or 0
    dense_layer = 2 * h * (a.ffn_hidden_size * gated + norm) + attn
    moe_layer = 2 * h * (moe_ffn * experts * gated + shared * gated + norm) + attn
    embedding = h * a.padded_vocab_size
    block = dense_layer * n_dense + moe_layer * n_moe + norm * h
    mtp = dense_layer * mtp_dense + moe_layer * mtp_moe
    shard = (block / a.pp + mtp + embedding) / a.tp
    if a.untie_embeddings and a.pp == 1:
        shard += embedding / a.tp
    per_param = 18 if not a.use_distributed_optimizer else 6 + 12 / a.dp
    return shard * per_param


def _schedule(a: ReferenceInputs, act: float) -> float:
    if a.vpp is not None and a.vpp > 1:
        act *= 1 + (a.pp - 1) / (a.pp * a.vpp)
    elif a.pp > 1:
        act *= min(1, a.num_microbatches / a.pp)
    return act


def activation_bytes(a: ReferenceInputs) -> float:
    s, b, h = a.seq_length, a.micro_batch_size, a.hidden_size
    if a.sequence_parallel and a.recompute_granularity == "selective":
        act = s * b * h * (18 + 4 * a.ffn_hidden_size / h) * a.num_layers
        act += 8 * s * b * a.pp + s * b * h * a.pp
        act = _schedule(a, act)
        if a.pp == 1:
            act += s * b * h * 4 * (1 + a.padded_vocab_size / h)
        return act / a.tp
    act = s * b * h * (10 + 24 / a.tp) * a.num_layers
    act += 8 * s * b * a.pp + s * b * h * a.pp
    act = _schedule(a, act)
    if a.pp == 1:
        act += (s * b * a.padded_vocab_size / a.tp + s * b * h) * 2
    return act * 1.05


def reference_total_bytes(a: ReferenceInputs) -> float:
    return weight_and_optimizer_bytes(a) + activation_bytes(a)


def inputs_from_specs(model, run) -> ReferenceInputs:
    """Feed the reference the same run our estimator sees (Megatron argument semantics)."""
    return ReferenceInputs(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.query_groups,
        kv_channels=model.head_dim,
        ffn_hidden_size=model.ffn,
        padded_vocab_size=model.padded_vocab_size(run.tp),
        swiglu=model.gated_linear_unit,
        normalization=model.normalization,
        untie_embeddings=model.untie_embeddings_and_output_weights,
        num_experts=model.num_moe_experts,
        moe_ffn_hidden_size=model.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=model.moe_shared_expert_intermediate_size,
        moe_layer_pattern=model.moe_layer_pattern,
        mtp_num_layers=model.mtp_num_layers or None,
        multi_latent_attention=model.multi_latent_attention,
        q_lora_rank=model.q_lora_rank,
        kv_lora_rank=model.kv_lora_rank,
        qk_head_dim=model.qk_head_dim,
        qk_pos_emb_head_dim=model.qk_pos_emb_head_dim,
        v_head_dim=model.v_head_dim,
        tp=run.tp,
        pp=run.pp,
        vpp=run.vpp if run.vpp and run.vpp > 1 else None,
        dp=run.dp,
        seq_length=run.seq_length,
        micro_batch_size=run.mbs,
        num_microbatches=run.num_microbatches,
        sequence_parallel=run.sequence_parallel,
        recompute_granularity=run.recompute_granularity,
        use_distributed_optimizer=run.use_distributed_optimizer,
    )
