"""Tensors one decoder layer saves for backward, and what recompute, offloading, CUDA graphs
and LoRA change about them; the backward working set of unfused attention; the loss layer's
bytes per logit."""

from __future__ import annotations

from dataclasses import dataclass

from memtune.estimate.attention import (
    attention_kernel,
    score_elements,
    sp_divisor,
    torch_softmax_attention,
    unfused_score_bytes,
)
from memtune.estimate.mamba import mamba_activation_terms
from memtune.estimate.moe import MOE_TERMS, moe_activation_terms
from memtune.estimate.parameters import lora_adapts
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec, lora_base_module

# ---- documented global constants (physical meaning, not fitted per case) ---------------
#: Bytes kept per logit by Megatron's unfused vocab-parallel cross entropy at its peak:
#: the bf16 logits (2) and the fp32 copy that becomes the saved softmax (4).
CE_BYTES_PER_LOGIT = 6
#: The fused cross-entropy kernel computes the logits gradient already in the forward pass
#: and keeps it (fp32, 4) next to the bf16 logits (2) and the fp32 softmax (4).
CE_FUSED_BYTES_PER_LOGIT = 10
#: Transformer Engine's cross entropy (``cross_entropy_fusion_impl='te'``) writes the logits
#: gradient into the bf16 logits in place and saves that one tensor
#: (transformer_engine/pytorch/cross_entropy.py: ``loss, inp = cross_entropy_forward(...)``,
#: ``ctx.save_for_backward(inp.detach())``; the kernel's other buffers are per token).
CE_TE_BYTES_PER_LOGIT = 2
#: Backward materialises the gradients of one layer's activations while that layer's saved
#: tensors are still alive; we charge one extra layer's activations as working set.
BACKWARD_WORKING_LAYERS = 1.0


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one decoder layer keeps for backward, per micro-batch, per GPU."""

    stored: float  # kept from forward until this layer's backward (after recompute/offload)
    full: float  # what it would keep with no recompute or offload at all
    checkpoint_input: float  # the layer input (all that full recompute keeps)
    lora_regather_saving: float  # bytes sequence_parallel_input_regather removes
    offloaded: float = 0.0  # bytes fine-grained offloading moves to host memory
    graphed: float = 0.0  # part of ``stored`` saved inside CUDA-graph-captured modules
    terms: tuple[tuple[str, float], ...] = ()  # named saved tensors (before recompute/offload)


#: Which saved tensors each selective-recompute module discards (Megatron-Core names).
RECOMPUTE_DROPS = {
    "core_attn": ("core_attn",),
    "layernorm": ("attn_norm_out", "mlp_norm_out"),
    "mlp": ("mlp_fc1_out", "mlp_act_out", "mlp_glu_parts"),
    "moe_act": ("moe_act_out", "moe_act_probs", "moe_glu_parts"),
    "moe": MOE_TERMS,
    "shared_experts": ("shared_fc1_in", "shared_fc1_out", "shared_act_out", "shared_glu_parts"),
    "mla_up_proj": ("qkv",),
}
#: Saved tensors that live inside each CUDA-graph scope (Megatron ``cuda_graph_scope``).
CUDA_GRAPH_TERMS = {
    "attn": ("attn_norm_out", "mla_latent", "qkv", "qk_norm_in", "core_attn", "proj_in", "attn_dropout"),
    "mlp": ("mlp_norm_out", "mlp_fc1_out", "mlp_act_out", "mlp_glu_parts", "mlp_dropout"),
    "moe_router": ("router",),
    "moe": (*MOE_TERMS, "mlp_norm_out", "mlp_dropout"),
}

#: Which saved tensors each fine-grained activation-offload module moves to host memory.
OFFLOAD_TERMS = {
    "attn_norm": ("attn_norm_in",),
    "qkv_linear": ("attn_norm_out",),
    "core_attn": ("qkv", "core_attn"),
    "attn_proj": ("proj_in",),
    "mlp_norm": ("mlp_norm_in",),
    "expert_fc1": ("expert_fc1_in",),
    "moe_act": ("moe_fc1_out",),
}


def layer_activation_terms(model: ModelSpec, run: RunSpec, moe: bool) -> dict[str, float]:
    """Named tensors one layer saves for backward (one micro-batch, one GPU), no recompute.

    Sizes follow Korthikanti et al. (2022) generalised to GQA/MLA, gated MLPs, MoE and
    fp8: residual-stream tensors are split by TP only under sequence parallelism, tensors
    inside attention/MLP always by TP; GEMM inputs are fp8 copies in fp8 training. Frozen
    (PEFT) base linears are charged the same saved inputs: the seed's measured LoRA re-gather
    saving (4.73 GB, Qwen3-8B TP2 seq 8192) equals the whole gathered LoRA-A input, which
    only holds if the sequence-local norm output is retained by the base layer anyway.
    """
    t = max(1, run.tp)
    spt = sp_divisor(run)
    tokens = run.seq_length / max(1, run.cp) * run.mbs
    h = model.hidden_size
    a = model.num_attention_heads
    act = 2 if run.params_dtype != "fp32" else 4
    gemm_in = 1 if run.fp8 else act
    drop_h = 1 if run.hidden_dropout > 0 else 0
    terms: dict[str, float] = {}
    terms["attn_norm_in"] = act * tokens * h / spt
    terms["attn_norm_out"] = gemm_in * tokens * h / spt
    if model.multi_latent_attention:
        q_dim = model.qk_head_dim + model.qk_pos_emb_head_dim
        terms["mla_latent"] = act * tokens * ((model.q_lora_rank or 0) + model.kv_lora_rank + model.qk_pos_emb_head_dim)
        # The up-projection outputs are split, rotated and concatenated into new Q/K/V
        # tensors; only the latents (up-proj inputs) and Q/K/V themselves are kept.
        terms["qkv"] = act * tokens * a * (2 * q_dim + model.v_head_dim) / t
        ctx_dim = a * model.v_head_dim
    else:
        d, g = model.head_dim, model.query_groups
        terms["qkv"] = act * tokens * (a + 2 * g) * d / t
        if model.qk_layernorm:
            # Megatron-Core normalises Q and K per head after splitting the QKV output
            # (attention.py, get_query_key_value_tensors: ``query = query.reshape(...)`` then
            # ``query = self.q_layernorm(query)``, ``key = self.k_layernorm(key)``). The norm
            # keeps its input for backward: the reshaped query copy (a heads) and the key
            # (g groups), both before rotary embedding - separate from the rotated Q/K
            # that the attention kernel keeps.
            terms["qk_norm_in"] = act * tokens * (a + g) * d / t
        ctx_dim = a * d
    terms["proj_in"] = gemm_in * tokens * ctx_dim / t
    if attention_kernel(run) == "flash":
        core = 4 * tokens * a / t  # softmax statistics (LSE), fp32
        if run.fp8:
            core += act * tokens * ctx_dim / t  # the kernel keeps its bf16 output; proj keeps an fp8 copy
    else:
        core = score_elements(model, run) * unfused_score_bytes(run)[0]
        if not model.multi_latent_attention and torch_softmax_attention(run):
            # DotProductAttention (local) multiplies full-head tensors: the rotated query (a new
            # tensor from the unfused rotary embedding) and the key and value expanded to every
            # head (``key.repeat_interleave(heads // groups, dim=2)``) are what baddbmm and bmm save,
            # a x d each, in place of the grouped Q/K/V.
            terms["qkv"] = act * tokens * 3 * a * model.head_dim / t
    terms["core_attn"] = core
    terms["attn_dropout"] = drop_h * tokens * h / spt
    terms["mlp_norm_in"] = act * tokens * h / spt
    terms["mlp_norm_out"] = gemm_in * tokens * h / spt
    gate = 2 if model.gated_linear_unit else 1
    act_out = gemm_in
    # Without the fused kernel Megatron-Core's gated MLP runs ``glu(x)``:
    # ``activation_func(x_glu) * (x_linear + glu_linear_offset)`` (mlp.py; experts.py likewise).
    # The multiply keeps both of its operands - the activation output and the new tensor that
    # adding the (default 0.0) offset makes - while the activation keeps its input, a view of the
    # FC1 output: two more FFN-wide tensors per token than the fused kernel, which keeps only its
    # input (``bias_swiglu_impl``). Routed experts then scale by the router probabilities
    # (``intermediate_parallel * permuted_probs``), which keeps the product as well: three.
    unfused_glu = model.gated_linear_unit and not run.bias_activation_fusion
    if not moe:
        terms["mlp_fc1_out"] = act * tokens * gate * model.ffn / t
        terms["mlp_act_out"] = act_out * tokens * model.ffn / t
        if unfused_glu:
            terms["mlp_glu_parts"] = 2 * act * tokens * model.ffn / t
    else:
        terms.update(moe_activation_terms(model, run, tokens, act, gemm_in))
    terms["mlp_dropout"] = drop_h * tokens * h / spt
    return terms


#: Saved tensors of a hybrid pattern's attention-only ('*') and MLP/MoE-only ('-', 'E') layers.
ATTN_TERMS = (
    "attn_norm_in",
    "attn_norm_out",
    "mla_latent",
    "qkv",
    "qk_norm_in",
    "proj_in",
    "core_attn",
    "attn_dropout",
)
MLP_TERMS = (
    "mlp_norm_in",
    "mlp_norm_out",
    "mlp_fc1_out",
    "mlp_act_out",
    *MOE_TERMS,
    "mlp_glu_parts",
    "mlp_dropout",
)


def hybrid_layer_activations(model: ModelSpec, run: RunSpec, kind: str) -> LayerActivations:
    """Saved-tensor bytes of one layer of a hybrid pattern ('M', '*', '-', 'E')."""
    return layer_activations(model, run, kind == "E", kind=kind)


def layer_activations(model: ModelSpec, run: RunSpec, moe: bool, kind: str | None = None) -> LayerActivations:
    """Saved-tensor bytes of one layer for one micro-batch after recompute, offload and LoRA
    (``kind``: a hybrid-pattern symbol, for the part of a layer that symbol builds)."""
    if kind == "M":
        terms = mamba_activation_terms(model, run)
    else:
        terms = layer_activation_terms(model, run, moe)
        unsaved = frozen_unsaved_terms(model, run, moe)
        terms = {k: v for k, v in terms.items() if k not in unsaved}
        if kind in ("*", "-", "E"):
            keep = ATTN_TERMS if kind == "*" else MLP_TERMS
            terms = {k: v for k, v in terms.items() if k in keep}
    dropped: set[str] = set()
    if run.recompute_granularity == "selective":
        fused = fused_norm_outputs(model, run, moe)
        for module in run.recompute_modules:
            if module == "moe_act" and run.transformer_impl == "local":
                continue  # its checkpoint lives in TEGroupedMLP; the local spec builds SequentialMLP
            drops = RECOMPUTE_DROPS.get(module, ())
            dropped.update(d for d in drops if module != "layernorm" or d not in fused)
        if "mlp" in run.recompute_modules and not moe and run.transformer_impl == "transformer_engine":
            # Megatron checkpoints ``self.mlp`` with the pre-MLP norm output as its only saved
            # input. With TE the norm is fused into linear_fc1 (pre_mlp_layernorm is an
            # IdentityOp), so that input is the residual stream (``mlp_norm_in``, kept anyway)
            # and the fused norm's output is recomputed too. The local spec keeps the norm
            # outside the checkpoint: its output stays as the checkpoint input.
            dropped.add("mlp_norm_out")
    offload: set[str] = set()
    for module in run.fine_grained_offload_modules:
        offload.update(OFFLOAD_TERMS.get(module, ()))
    offload -= dropped
    dropped |= offload
    tokens = run.seq_length / max(1, run.cp) * run.mbs
    spt = sp_divisor(run)
    act = 2 if run.params_dtype != "fp32" else 4
    lora = 0.0
    saving = 0.0
    if run.peft is not None:
        r = run.lora_dim
        h = model.hidden_size
        gathered_for: set[str] = set()
        for target in run.lora_target_modules:
            if not lora_adapts(target, kind):
                continue
            module = lora_base_module(target)  # CanonicalLoRA's q/k/v, up/gate: one adapter each
            lora += 2 * act * tokens * r  # adapter A output and B input
            if module in gathered_for:
                # CanonicalLoRA's part adapters all take the one gathered norm output TE's fused
                # linear returns (Bridge peft/utils.py): kept once per fused module
                continue
            gathered_for.add(module)
            if spt > 1 and (module == "linear_qkv" or (module == "linear_fc1" and not moe)):
                # Column-parallel adapter under SP: LoRA-A keeps the all-gathered sequence.
                # Re-gather keeps the sequence-local shard instead - the same tensor the base
                # layer already holds - and all-gathers it again in backward.
                gathered = act * tokens * h
                if regather_eligible(run, module):
                    saving += gathered
                    lora += 0.0 if run.sequence_parallel_input_regather else gathered
                else:
                    lora += gathered
            # Other adapters see the base layer's (TP-local) input: no extra copy.
    full = sum(terms.values()) + lora
    stored = sum(v for k, v in terms.items() if k not in dropped) + lora
    graphed_terms: set[str] = set()
    for scope in run.cuda_graph_scope:
        if scope in ("full", "full_iteration", "transformer_layer"):
            graphed_terms.update(terms)
        else:
            graphed_terms.update(CUDA_GRAPH_TERMS.get(scope, ()))
    graphed = sum(v for k, v in terms.items() if k in graphed_terms and k not in dropped)
    return LayerActivations(
        stored=stored,
        full=full,
        checkpoint_input=terms.get("attn_norm_in", terms.get("mlp_norm_in", terms.get("mamba_norm_in", 0.0))),
        lora_regather_saving=saving,
        offloaded=sum(terms[k] for k in offload if k in terms),
        graphed=graphed,
        terms=tuple(terms.items()),
    )


def fused_norm_outputs(model: ModelSpec, run: RunSpec, moe: bool) -> frozenset[str]:
    """Norm outputs that selective ``layernorm`` recompute leaves alone because the norm is
    fused into the GEMM after it.

    Megatron-Core recomputes a norm only when it is a module of its own
    (transformer_layer.py: ``if not isinstance(self.input_layernorm, IdentityOp):
    self.recompute_input_layernorm = True``, the same for ``pre_mlp_layernorm``). The
    Transformer Engine layer spec fuses the input norm into ``linear_qkv``
    (``TELayerNormColumnParallelLinear``) and the pre-MLP norm into a dense MLP's
    ``linear_fc1``, leaving ``IdentityOp`` in their place; only multi-latent attention
    (``input_layernorm=TENorm``) and MoE layers (``pre_mlp_layernorm=TENorm``) keep a separate
    norm, and the local spec keeps both. Measured: Llama3-70B (TE, dense) peaked at 59.6 GB
    with ``[core_attn, layernorm]`` against 58.8 GB with ``[core_attn]`` (Megatron Bridge's
    activation-recompute skill), no saving.
    """
    if run.transformer_impl != "transformer_engine":
        return frozenset()
    fused: set[str] = set()
    if not model.multi_latent_attention:
        fused.add("attn_norm_out")
    if not moe:
        fused.add("mlp_norm_out")
    return frozenset(fused)


def layernorm_recompute_acts(model: ModelSpec, run: RunSpec) -> bool:
    """Whether selective ``layernorm`` recompute finds any norm of its own to re-run in this
    model: some layer keeps a norm output that fused_norm_outputs does not fuse (with the TE spec
    only MLA or MoE layers have one)."""
    return len(fused_norm_outputs(model, run, model.is_moe)) < len(RECOMPUTE_DROPS["layernorm"])


def frozen_unsaved_terms(model: ModelSpec, run: RunSpec, moe: bool) -> frozenset[str]:
    """GEMM inputs nobody saves under PEFT because their frozen base linear has no adapter.

    Transformer Engine keeps a linear's input only for its weight gradient
    (linear.py: ``backward_needs_input = is_grad_enabled and weight.requires_grad``; grouped_linear.py:
    ``inputmats = [None] * num_gemms`` when the weights are frozen), and a frozen fused-norm linear
    frees its norm output unless an adapter asked for it (layernorm_linear.py: ``if not
    weight.requires_grad and not return_layernorm_output: clear_tensor_data(ln_out, ln_out_total)``).
    An adapter's LoRA-A keeps the same input, so only linears left out of
    ``peft.target_modules`` lose it - Megatron Bridge's Qwen3-30B-A3B recipe adapts just
    ``linear_qkv`` and ``linear_proj``. The output projection's input is the attention output,
    which the attention kernel keeps anyway, and the pre-MLP norm output of a MoE layer is the
    router's saved input, so neither is dropped.
    """
    if run.peft is None:
        return frozenset()
    adapted = {lora_base_module(target) for target in run.lora_target_modules}
    unsaved: set[str] = set()
    if "linear_qkv" not in adapted and not model.multi_latent_attention:
        unsaved.add("attn_norm_out")
    if "linear_fc1" not in adapted:
        unsaved.add("expert_fc1_in" if moe else "mlp_norm_out")
    if "linear_fc2" not in adapted:
        unsaved.update(("moe_act_out", "shared_act_out") if moe else ("mlp_act_out",))
    return frozenset(unsaved)


def regather_eligible(run: RunSpec, module: str) -> bool:
    """Megatron Bridge falls back to the gathered path in these cases (seed page); DoRA and
    CanonicalLoRA have no re-gather at all."""
    from memtune.spec.run_spec import peft_without_regather

    if peft_without_regather(run):
        return False
    if run.tp <= 1 or not run.sequence_parallel or run.cuda_graph_scope or run.cpu_offloading:
        return False
    if run.recompute_granularity == "full":
        return False
    if run.recompute_granularity == "selective" and module == "linear_fc1" and "mlp" in run.recompute_modules:
        return False
    return True


def unfused_working_set(model: ModelSpec, run: RunSpec, last: LayerActivations, replay: float) -> float:
    """What the last decoder layer's backward adds to the saved activations under unfused attention.

    Backward runs the layer's MLP first, which frees the MLP's saved tensors; its attention then
    re-materialises what recompute dropped (``replay``) and the softmax backward needs its
    transient (:func:`unfused_score_bytes`) next to the gradients of the attention output and of
    the residual stream (two hidden-sized tensors). Read by difference on the H200 grid: the
    peak is (layers x saved layer) + 10 bytes x scores - the MLP's saved tensors, within 2% on
    g01-g20 (references/memory-model.md).
    """
    tokens = run.seq_length / max(1, run.cp) * run.mbs
    act = 2 if run.params_dtype != "fp32" else 4
    mlp_saved = sum(v for k, v in last.terms if k in MLP_TERMS)
    transient = score_elements(model, run) * unfused_score_bytes(run)[1]
    return max(0.0, replay + transient + 2 * act * tokens * model.hidden_size / sp_divisor(run) - mlp_saved)


def tied_output_grad_bytes(model: ModelSpec, run: RunSpec) -> float:
    """The output layer's weight gradient held through the whole backward with tied embeddings.

    Without gradient-accumulation fusion the output layer returns its bf16 weight gradient to
    autograd; the tied weight's single AccumulateGrad node waits for the embedding's gradient,
    which comes last, so the first one stays in its input buffer until then (H200 grid: g13 tied
    +0.122 GiB over g01 = 32000 x 2048 x 2 bytes).
    """
    if run.gradient_accumulation_fusion or run.pp > 1:
        return 0.0
    return (
        (2 if run.params_dtype != "fp32" else 4) * model.padded_vocab_size(run.tp) * model.hidden_size / max(1, run.tp)
    )
