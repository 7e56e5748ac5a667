"""Mixture-of-experts activations: the router, routed experts (capacity, latent MoE, unfused
GLU, probability-weighted activations) and the shared expert."""

from __future__ import annotations

from memtune.estimate.attention import sp_divisor
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec

#: Saved tensors of an MoE block, shared experts included: one list, because selective
#: recompute of "moe", the "moe" CUDA-graph scope and a hybrid pattern's 'E' layer must all
#: name the same tensors, and a tensor added to the MoE block must reach each of them.
MOE_TERMS = (
    "router",
    "expert_fc1_in",
    "moe_fc1_out",
    "moe_act_out",
    "moe_act_probs",
    "moe_fc2_out",
    "moe_latent_out",
    "shared_fc1_in",
    "shared_fc1_out",
    "shared_act_out",
    "moe_glu_parts",
    "shared_glu_parts",
)


def expert_load_factor(run: RunSpec) -> float:
    """Token copies the experts process, as a multiple of ``tokens x top-k``.

    Megatron's router with ``--moe-expert-capacity-factor c`` gives each expert a capacity of
    ``ceil(tokens x top-k / experts x c)`` (moe_utils.py, ``get_capacity``). With
    ``--moe-pad-expert-input-to-capacity`` the routing map becomes the capacity mask - every
    expert gets exactly its capacity, padding included: ``c`` times the routed copies. Without
    padding, copies beyond the capacity are dropped (``routing_map AND capacity_mask``): at most
    ``c`` times (c < 1), and never more than the routed copies themselves.
    """
    c = run.moe_expert_capacity_factor
    if not c:
        return 1.0
    return c if run.moe_pad_expert_input_to_capacity else min(1.0, c)


def moe_activation_terms(model: ModelSpec, run: RunSpec, tokens: float, act: int, gemm_in: int) -> dict[str, float]:
    """Tensors an MoE block (router, routed experts, shared expert) saves for backward, one
    micro-batch on one GPU, no recompute (``tokens`` on this GPU before sequence parallelism;
    ``act`` / ``gemm_in``: activation and GEMM-input bytes)."""
    t = max(1, run.tp)
    spt = sp_divisor(run)
    h = model.hidden_size
    gate = 2 if model.gated_linear_unit else 1
    act_out = gemm_in
    unfused_glu = model.gated_linear_unit and not run.bias_activation_fusion
    terms: dict[str, float] = {}
    e = model.num_moe_experts or 1
    local = tokens / spt
    routed = local * model.moe_router_topk  # token copies this GPU's experts see (x ETP rows, / ETP width)
    etp = run.expert_tp
    cap = expert_load_factor(run)
    # RouterGatingLinearFunction saves its (bf16) input and returns logits in the router
    # dtype (--moe-router-dtype, else the input's); the scores are computed in fp32.
    logit_b = {"fp32": 4, "fp64": 8}.get(str(run.moe_router_dtype or "").lower(), act)
    terms["router"] = local * e * (logit_b + 4)
    width = model.moe_latent_size or h  # latent MoE dispatches latent-wide tokens
    terms["expert_fc1_in"] = gemm_in * routed * etp * width * cap
    terms["moe_fc1_out"] = act * routed * gate * model.expert_ffn * cap
    terms["moe_act_out"] = act_out * routed * model.expert_ffn * cap
    terms["moe_fc2_out"] = act * routed * etp * width * cap  # kept for the probability-weighted unpermute
    if model.moe_latent_size:
        # fc2_latent_proj keeps its input, the combined latent output of the local tokens
        # (fc1_latent_proj's input is the pre-MLP norm output, kept anyway).
        terms["moe_latent_out"] = act * local * model.moe_latent_size
    if unfused_glu:
        terms["moe_glu_parts"] = 3 * act * routed * model.expert_ffn * cap
    if not model.gated_linear_unit:
        # The router probabilities scale the activation inside the experts (TEGroupedMLP /
        # SequentialMLP ``bias_act_func``: ``activation_func(fc1_output)`` then
        # ``intermediate_parallel * permuted_probs``). Without a fused weighted kernel -
        # TEGroupedMLP fuses only SwiGLU (``weighted_bias_swiglu_impl``, which keeps just
        # its input and the probabilities), so GeLU/ReLU experts always take this path - the
        # multiply keeps the activation output for the probabilities' gradient: one more
        # expert-width tensor per routed token copy.
        terms["moe_act_probs"] = act * routed * model.expert_ffn * cap
    fs = model.moe_shared_expert_intermediate_size
    if fs:
        if run.moe_shared_expert_overlap and spt > 1:
            # Overlapped with the dispatcher, the shared expert gathers its sequence-parallel input
            # itself and runs its linears with TP communication off (shared_experts.py:
            # parallel_mode None, cached_fc1_input = gather_from_sequence_parallel_region), so
            # linear_fc1 keeps the whole gathered input, not the local shard the norm output is:
            # in bf16 (save_original_input), or as TE's FP8 copy under the delayed recipe, which
            # Megatron-Core leaves to TE's default.
            terms["shared_fc1_in"] = (gemm_in if run.fp8 == "delayed" else act) * tokens * h
        terms["shared_fc1_out"] = act * tokens * gate * fs / t
        terms["shared_act_out"] = act_out * tokens * fs / t
        if unfused_glu:
            terms["shared_glu_parts"] = 2 * act * tokens * fs / t
    return terms
