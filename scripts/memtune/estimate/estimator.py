"""Per-pipeline-stage peak GPU memory of a Megatron-Core training run.

``estimate(model, run)`` walks every pipeline stage and adds up what the PyTorch caching
allocator will hold on that stage's GPUs at the step's peak:

* **weights** - the stage's parameter shard (bf16/fp16/fp32, or fp8 with fp8 param gather),
  plus TE's cached fp8 copies of its GEMM weights when training in fp8 (not the bf16
  embedding/output layer);
* **gradients** - Megatron's contiguous gradient buffer (fp32 main grads or param dtype);
* **optimizer** - fp32 main params and moments, sharded over DP x CP by the distributed
  optimizer (routed experts over their own expert-DP group);
* **activations** - tensors saved for backward for every micro-batch in flight on the stage
  (1F1B / interleaved schedule), given SP, CP, recompute, attention kernel, MoE routing,
  LoRA and offloading, plus the loss-layer logits and a backward working set.

Runtime overheads that are not PyTorch tensors (CUDA context, NCCL communicators) are a
separate ``overhead`` line: they use GPU memory but never appear in
``torch.cuda.max_memory_allocated``.

Everything here is arithmetic on frozen dataclasses: no I/O, no third-party imports, and
one call takes well under a millisecond, so the planner can call it in a loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from memtune.errors import InputError
from memtune.spec.model_spec import (
    LayerParams,
    ModelSpec,
    ParamCount,
    count_parameters,
    embedding_params,
    hybrid_layer_params,
    hybrid_stage_kinds,
    layer_params,
    mtp_layer_params,
)
from memtune.spec.run_spec import (
    LORA_DEFAULT_TARGETS,
    RunSpec,
    normalize_dtype,
    stage_chunk_layers,
    stage_layer_counts,
    validate,
)
from memtune.units import MIB

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1, "uint8": 1}

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
#: Bytes per parameter of the fp8 weight copy TE caches for a training step: it quantises
#: each weight with ``weight_quantizer.set_usage(rowwise=True, columnwise=is_grad_enabled)``
#: (transformer_engine/pytorch/module/linear.py), i.e. the row-wise data for the forward GEMM
#: and the column-wise (transposed) data for the backward GEMM, 1 B each.
FP8_WEIGHT_CACHE_BYTES = 2
#: With fp8 primary weights (--fp8-param-gather) the parameter is the row-wise data; the
#: column-wise copy for the backward GEMM is the 1 B/param extra.
FP8_TRANSPOSE_BYTES = 1
#: Unfused (``local``) attention keeps per score element (b x heads x sq x sk) what autograd
#: saves between forward and backward, and needs more while one layer's softmax runs backward.
#: See :func:`unfused_score_bytes` and references/memory-model.md (H200 grid, g01-g20).
UNFUSED_SOFTMAX_BYTES = 2
UNFUSED_DROPOUT_BYTES = 3
#: cuBLAS + cuBLASLt workspaces PyTorch allocates through its caching allocator on Hopper
#: (2 x 32 MiB), measured as the 64 MiB that stays allocated after the first step of a
#: Megatron-Core run without Transformer Engine (H200 grid: 0.1875 GiB left after g01 =
#: the 0.125 GiB score buffer + 0.0625 GiB).
TORCH_WORKSPACE_BYTES = 64 * MIB
#: fp32 temporaries of torch.optim.AdamW's foreach path (``_multi_tensor_adamw``:
#: ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)`` over the whole parameter
#: list), 4 bytes per parameter the optimizer steps; measured 4.00 B/param on every H200 grid
#: point (g01 1.161 GiB over 311.4 M parameters, g12 2.629 GiB over 705.7 M, c07 7.726 GiB
#: over 2.07 B).
FOREACH_ADAM_TEMP_BYTES = 4
#: Backward materialises the gradients of one layer's activations while that layer's saved
#: tensors are still alive; we charge one extra layer's activations as working set.
BACKWARD_WORKING_LAYERS = 1.0
#: Fine-grained activation offloading overlaps copies with compute: two layers' offloaded
#: tensors (the one in flight to/from host and the one being computed) stay on the GPU.
OFFLOAD_RESIDENT_LAYERS = 2
#: GEMM workspaces that live in the PyTorch allocator (so they count as allocated): the
#: cuBLAS/cuBLASLt workspace of PyTorch and Transformer Engine's per-stream GEMM workspaces,
#: about 4 x 32 MiB on Hopper.
WORKSPACE_BYTES = 128 * MIB
#: GPU memory outside PyTorch's allocator, measured on one H200 (CUDA 13, PyTorch 2.11,
#: environment_and_probes.json and measured.json): the CUDA context after ``torch.cuda.init``
#: (650,969,088 B used), the first NCCL communicator (1,236,074,496 B used after
#: ``init_process_group``), and the libraries' handles and kernel images loaded on first use
#: during the first training step (device used minus PyTorch reserved after every step:
#: 2,595,028,992 B). A further communicator (the distributed optimizer's group, g17 onwards)
#: added 408,944,640 B.
CUDA_CONTEXT_BYTES = 650_969_088
CUDA_LIBRARIES_BYTES = 2_595_028_992 - 1_236_074_496
NCCL_FIRST_GROUP_BYTES = 1_236_074_496 - 650_969_088
NCCL_BYTES_PER_GROUP = 408_944_640
#: Memory PyTorch's caching allocator reserves above its allocated peak (default allocator):
#: the median of max reserved / max allocated - 1 over the 22 dense H200 runs (7.1%, P90 15.9%);
#: MoE runs hold more (H200 MoE 9.4% and 11.7%; Megatron-LM's DeepSeek-V3 proxy report 12.5-17%).
#: With ``expandable_segments:True`` the dense median is 3.1% and MoE 0.3-1.7%.
ALLOCATOR_RESERVE_FRACTION = 0.071
ALLOCATOR_RESERVE_FRACTION_MOE = 0.12
ALLOCATOR_RESERVE_FRACTION_EXPANDABLE = 0.031
ALLOCATOR_RESERVE_FRACTION_EXPANDABLE_MOE = 0.017


def reserve_fraction(model: ModelSpec, expandable: bool = False) -> float:
    """The allocator's reserve as a share of the allocated step peak (see the constants)."""
    if expandable:
        return ALLOCATOR_RESERVE_FRACTION_EXPANDABLE_MOE if model.is_moe else ALLOCATOR_RESERVE_FRACTION_EXPANDABLE
    return ALLOCATOR_RESERVE_FRACTION_MOE if model.is_moe else ALLOCATOR_RESERVE_FRACTION


def device_peak_bytes(model: ModelSpec, est: MemoryEstimate, expandable: bool) -> int:
    """The device view of the most-loaded GPU with (True) or without expandable segments."""
    share = reserve_fraction(model, expandable)
    return max(s.total_bytes - s.reserve + int(share * (s.step_bytes + s.cuda_graphs)) for s in est.stages)


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage (the most-loaded GPU of it), in bytes."""

    stage: int
    layers: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int
    overhead: int
    params: int
    in_flight_microbatches: float
    optimizer_step: int = 0  # fp32 gradient copies at the optimizer step beyond the (freed) activations
    cuda_graphs: int = 0  # activations held in CUDA-graph private pools (reserved, not "allocated")
    capture_bytes: int = 0  # allocated while the CUDA graphs are being captured
    reserve: int = 0  # caching-allocator reserve above the allocated peak (device view only)

    @property
    def step_bytes(self) -> int:
        """Tensors allocated at the training step's peak."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.workspace + self.optimizer_step

    @property
    def allocated_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would report (tensors only): the larger of
        the training-step peak and the CUDA-graph capture peak."""
        return max(self.step_bytes, self.capture_bytes)

    @property
    def total_bytes(self) -> int:
        """The device view (what nvidia-smi shows at the peak): the step's tensors, the
        allocator's reserve above them, CUDA-graph pools and memory outside PyTorch."""
        return self.step_bytes + self.reserve + self.cuda_graphs + self.overhead

    @property
    def model_state_bytes(self) -> int:
        """Weights + gradients + optimizer states: the static part people ask for first."""
        return self.weights + self.gradients + self.optimizer

    def components(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "optimizer_step": self.optimizer_step,
            "workspace": self.workspace,
            "cuda_graphs": self.cuda_graphs,
            "allocator_reserve": self.reserve,
            "overhead": self.overhead,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": self.layers,
            "total_bytes": self.total_bytes,
            "allocated_bytes": self.allocated_bytes,
            "model_state_bytes": self.model_state_bytes,
            "components": self.components(),
            "parameters": self.params,
            "in_flight_microbatches": self.in_flight_microbatches,
        }


@dataclass(frozen=True)
class MemoryEstimate:
    stages: tuple[StageEstimate, ...]
    parameters_total: int
    parameters_per_gpu_max: int
    assumptions: tuple[str, ...]
    gpus_per_stage: int = 1

    @property
    def peak_stage(self) -> int:
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage)).stage

    @property
    def peak_bytes(self) -> int:
        return self.stages[self.peak_stage].total_bytes

    @property
    def peak_allocated_bytes(self) -> int:
        return max(s.allocated_bytes for s in self.stages)

    @property
    def model_state_total_bytes(self) -> int:
        """Weights + gradients + optimizer states summed over every GPU of the run
        (each stage's GPU times the GPUs that hold a copy or a shard like it)."""
        return sum(s.model_state_bytes for s in self.stages) * self.gpus_per_stage

    @property
    def warnings(self) -> tuple[str, ...]:
        """The assumptions that can change the answer (shown first)."""
        return tuple(a for a in self.assumptions if a.startswith("WARNING"))

    @property
    def last_stage(self) -> StageEstimate:
        return self.stages[-1]

    def to_json(self) -> dict[str, Any]:
        """The JSON document of references/json-output.md (extra keys are additive)."""
        return {
            "peak_bytes": self.peak_bytes,
            "peak_stage": self.peak_stage,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "model_state_bytes": self.stages[self.peak_stage].model_state_bytes,
            "model_state_total_bytes": self.model_state_total_bytes,
            "stages": [s.to_json() for s in self.stages],
            "parameters": {"total": self.parameters_total, "per_gpu_max": self.parameters_per_gpu_max},
            "assumptions": list(self.assumptions),
        }


# ---------------------------------------------------------------------- helpers
def _b(dtype: str) -> int:
    """Bytes per element; run_spec.violations refuses any dtype outside this table first."""
    return DTYPE_BYTES[normalize_dtype(dtype)]


def attention_kernel(run: RunSpec) -> str:
    """'flash' (fused/flash kernels: no score matrix kept) or 'unfused'."""
    backend = (run.attention_backend or "auto").lower()
    if backend in ("unfused", "local") or run.transformer_impl == "local":
        return "unfused"
    return "flash"


def _sp_div(run: RunSpec) -> int:
    return run.tp if (run.sequence_parallel and run.tp > 1) else 1


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


#: Saved tensors of an MoE block, shared experts included: one list, because selective
#: recompute of "moe", the "moe" CUDA-graph scope and a hybrid pattern's 'E' layer must all
#: name the same tensors, and a tensor added to the MoE block must reach each of them.
_MOE_TERMS = (
    "router",
    "expert_fc1_in",
    "moe_fc1_out",
    "moe_act_out",
    "moe_act_probs",
    "moe_fc2_out",
    "moe_latent_out",
    "shared_fc1_out",
    "shared_act_out",
    "moe_glu_parts",
    "shared_glu_parts",
)

#: Which saved tensors each selective-recompute module discards (Megatron-Core names).
RECOMPUTE_DROPS = {
    "core_attn": ("core_attn",),
    "layernorm": ("attn_norm_out", "mlp_norm_out"),
    "mlp": ("mlp_fc1_out", "mlp_act_out", "mlp_glu_parts"),
    "moe_act": ("moe_act_out", "moe_act_probs", "moe_glu_parts"),
    "moe": _MOE_TERMS,
    "shared_experts": ("shared_fc1_out", "shared_act_out", "shared_glu_parts"),
    "mla_up_proj": ("qkv",),
}
#: Saved tensors that live inside each CUDA-graph scope (Megatron ``cuda_graph_scope``).
CUDA_GRAPH_TERMS = {
    "attn": ("attn_norm_out", "mla_latent", "qkv", "qk_norm_in", "core_attn", "proj_in", "attn_dropout"),
    "mlp": ("mlp_norm_out", "mlp_fc1_out", "mlp_act_out", "mlp_glu_parts", "mlp_dropout"),
    "moe_router": ("router",),
    "moe": (*_MOE_TERMS, "mlp_norm_out", "mlp_dropout"),
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
    spt = _sp_div(run)
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
            terms["shared_fc1_out"] = act * tokens * gate * fs / t
            terms["shared_act_out"] = act_out * tokens * fs / t
            if unfused_glu:
                terms["shared_glu_parts"] = 2 * act * tokens * fs / t
    terms["mlp_dropout"] = drop_h * tokens * h / spt
    return terms


def score_elements(model: ModelSpec, run: RunSpec) -> float:
    """Attention-score elements of one layer on one GPU: micro-batch x local heads x sq x sk."""
    return run.mbs * (model.num_attention_heads / max(1, run.tp)) * (run.seq_length / max(1, run.cp)) * run.seq_length


def torch_softmax_attention(run: RunSpec) -> bool:
    """Megatron-Core's local attention with the softmax in PyTorch (``--no-masked-softmax-fusion``):
    the path the H200 grid measured term by term. With the fused scale-mask-softmax kernel the
    constants calibrated on the Megatron-LM goldens (which run it) stay in force."""
    return run.transformer_impl == "local" and attention_kernel(run) == "unfused" and not run.masked_softmax_fusion


def unfused_score_bytes(run: RunSpec) -> tuple[float, float]:
    """(bytes saved per score element until backward, extra bytes per element while one
    layer's attention runs backward) for unfused attention.

    Megatron-Core's ``FusedScaleMaskSoftmax`` without its fused kernel
    (``forward_torch_softmax``) casts the bf16 scores to fp32 when softmax runs in fp32,
    masks, runs ``torch.nn.Softmax`` (which saves its fp32 output) and casts the
    probabilities back to bf16, which the probabilities-times-value ``bmm`` saves: 4 + 2 bytes.
    In backward the softmax holds its saved fp32 output, the fp32 gradient coming in and the
    fp32 gradient it writes, while the bf16 probabilities' gradient is still alive: the
    measured peak is 10 bytes per element above the saved 6 (H200 grid: g06 - g01 and
    g04 - g05 give 9.9 and 10.4). With softmax in bf16 the softmax output is the tensor both
    keep (2 bytes) and backward adds its gradient and the gradient it writes (4); the fused
    scale-mask-softmax kernel writes its gradient in place (2).

    Attention dropout (``torch.nn.Dropout`` in training) keeps a 1-byte mask; its output
    replaces the bf16 probabilities as what ``bmm`` saves, so on the fp32 path the probabilities
    are freed and only the mask is new (g08 - g01: +0.21 GiB measured, 4 layers x 1 byte x
    67.1 M elements = 0.25 GiB less the mask of the layer already in backward). On the bf16 paths
    the softmax still keeps its output, so the dropout output (2) is new as well.
    """
    dropout = run.attention_dropout > 0
    if run.masked_softmax_fusion:
        # The kernel reads bf16 scores, computes in fp32 internally and returns bf16.
        return (2.0 + (3 if dropout else 0), 2.0 - (1 if dropout else 0))
    if run.attention_softmax_in_fp32:
        return (6.0 + (1 if dropout else 0), 10.0 - (1 if dropout else 0))
    return (2.0 + (3 if dropout else 0), 4.0 - (1 if dropout else 0))


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


#: Saved tensors of a hybrid pattern's attention-only ('*') and MLP/MoE-only ('-', 'E') layers.
_ATTN_TERMS = (
    "attn_norm_in",
    "attn_norm_out",
    "mla_latent",
    "qkv",
    "qk_norm_in",
    "proj_in",
    "core_attn",
    "attn_dropout",
)
_MLP_TERMS = (
    "mlp_norm_in",
    "mlp_norm_out",
    "mlp_fc1_out",
    "mlp_act_out",
    *_MOE_TERMS,
    "mlp_glu_parts",
    "mlp_dropout",
)


def mamba_activation_terms(model: ModelSpec, run: RunSpec) -> dict[str, float]:
    """Tensors one Mamba layer saves for backward (one micro-batch, one GPU), no recompute.

    Megatron-Core trains Mamba through mamba_ssm's ``mamba_split_conv1d_scan_combined``
    (MambaMixer with the memory-efficient path), whose autograd function keeps
    ``ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias,
    initial_states, seq_idx, rmsnorm_weight, rstd, ...)``: the in_proj output z|x|B|C|dt and
    the scan output before the gated norm (``out_x``, d_inner), with per-group fp32 ``rstd``;
    conv and scan states are recomputed in backward. Around it, the fused-norm in_proj keeps
    its input and normalised input (as an attention block's QKV does) and out_proj keeps its
    d_inner input; the residual dropout keeps its mask.
    """
    t = max(1, run.tp)
    spt = _sp_div(run)
    tokens = run.seq_length / max(1, run.cp) * run.mbs
    h, d_inner = model.hidden_size, model.mamba_d_inner
    act = 2 if run.params_dtype != "fp32" else 4
    gemm_in = 1 if run.fp8 else act
    zxbcdt = 2 * d_inner + 2 * model.mamba_num_groups * model.mamba_state_dim + model.mamba_heads
    return {
        "mamba_norm_in": act * tokens * h / spt,
        "mamba_norm_out": gemm_in * tokens * h / spt,
        "mamba_zxbcdt": act * tokens * zxbcdt / t,
        "mamba_out_x": act * tokens * d_inner / t,
        "mamba_rstd": 4 * tokens * model.mamba_num_groups / t,
        "mamba_out_proj_in": gemm_in * tokens * d_inner / t,
        "mamba_dropout": (1 if run.hidden_dropout > 0 else 0) * tokens * h / spt,
    }


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
            keep = _ATTN_TERMS if kind == "*" else _MLP_TERMS
            terms = {k: v for k, v in terms.items() if k in keep}
    dropped: set[str] = set()
    if run.recompute_granularity == "selective":
        for module in run.recompute_modules:
            dropped.update(RECOMPUTE_DROPS.get(module, ()))
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
    spt = _sp_div(run)
    act = 2 if run.params_dtype != "fp32" else 4
    lora = 0.0
    saving = 0.0
    if run.peft is not None:
        r = run.lora_dim
        h = model.hidden_size
        for module in run.lora_target_modules:
            if not lora_adapts(module, kind):
                continue
            lora += 2 * act * tokens * r  # adapter A output and B input
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
    adapted = {target.strip().rsplit(".", 1)[-1].strip("*") for target in run.lora_target_modules}
    unsaved: set[str] = set()
    if "linear_qkv" not in adapted and not model.multi_latent_attention:
        unsaved.add("attn_norm_out")
    if "linear_fc1" not in adapted:
        unsaved.add("expert_fc1_in" if moe else "mlp_norm_out")
    if "linear_fc2" not in adapted:
        unsaved.update(("moe_act_out", "shared_act_out") if moe else ("mlp_act_out",))
    return frozenset(unsaved)


def regather_eligible(run: RunSpec, module: str) -> bool:
    """Megatron Bridge falls back to the gathered path in these cases (seed page)."""
    if run.tp <= 1 or not run.sequence_parallel or run.cuda_graph_scope or run.cpu_offloading:
        return False
    if run.recompute_granularity == "full":
        return False
    if run.recompute_granularity == "selective" and module == "linear_fc1" and "mlp" in run.recompute_modules:
        return False
    return True


def regather_saving_bytes(model: ModelSpec, run: RunSpec) -> int:
    """Activation bytes per GPU that LoRA ``sequence_parallel_input_regather`` saves.

    For every eligible column-parallel adapter (linear_qkv, and linear_fc1 of dense
    layers) the LoRA-A input is kept as the sequence-local shard instead of the
    all-gathered sequence, on every micro-batch in flight. Returned for the stage where
    it matters most (the difference between the two estimates, so it always agrees with
    ``estimate``); 0 when the run is ineligible (TP=1, SP off, CUDA graphs, ...).
    """
    if run.peft is None:
        run = run.with_(peft="lora")
    without = estimate(model, run.with_(sequence_parallel_input_regather=False))
    with_ = estimate(model, run.with_(sequence_parallel_input_regather=True))
    return max(a.activations - b.activations for a, b in zip(without.stages, with_.stages, strict=True))


def interleaved_peak_layer_sets(run: RunSpec, stage: int, chunk_layers: tuple[int, ...]) -> float:
    """Peak layer x micro-batch activation sets on one stage of the interleaved 1F1B schedule
    whose chunks hold different numbers of layers, found by replaying the schedule.

    Megatron's order (schedules.py, forward_backward_pipelining_with_interleaving): forward
    number ``k`` runs chunk ``(k mod (g v)) div g`` (``g`` = micro-batches per virtual-stage
    group), backward number ``k`` runs the mirrored chunk ``v - 1 - that``; the stage first
    runs ``2 (pp - stage - 1) + (v - 1) g`` warm-up forwards, then alternates one forward and
    one backward. The alive set is periodic after one cycle of ``g v`` forwards, so replaying
    three groups per chunk finds the same peak as the whole step.
    """
    v, pp = len(chunk_layers), run.pp
    g = run.microbatch_group_size_per_vp_stage or pp
    m = min(run.num_microbatches, 3 * g + pp)
    total = m * v
    warmup = min(total, 2 * (pp - stage - 1) + (v - 1) * g)

    def chunk(k: int, forward: bool) -> int:
        c = (k % (g * v)) // g
        return c if forward else v - 1 - c

    alive = peak = 0.0
    backward = 0
    for k in range(total):
        alive += chunk_layers[chunk(k, True)]
        peak = max(peak, alive)
        if k >= warmup:
            alive -= chunk_layers[chunk(backward, False)]
            backward += 1
    return peak


def in_flight_layer_microbatches(
    run: RunSpec, stage: int, layers: int, chunk_layers: tuple[int, ...] | None = None
) -> float:
    """Layer x micro-batch activation sets alive at this stage's peak.

    1F1B: stage ``i`` runs ``pp - i - 1`` warm-up forwards before its first backward,
    so ``pp - i`` micro-batches are alive (fewer if the step has fewer micro-batches).
    Interleaved with ``v`` chunks of ``layers / v`` layers: Megatron warms up
    ``2(pp - i - 1) + (v - 1) * group`` chunk-forwards (group = micro-batches per
    virtual-stage group, default pp); the peak is that plus one, capped at all chunks.
    """
    pp, m = run.pp, run.num_microbatches
    if pp == 1:
        return float(layers)
    v = run.vpp_chunks
    if v == 1:
        return float(layers * min(pp - stage, m))
    if chunk_layers is not None and len(chunk_layers) == v:
        return interleaved_peak_layer_sets(run, stage, chunk_layers)
    group = run.microbatch_group_size_per_vp_stage or pp
    warmup = 2 * (pp - stage - 1) + (v - 1) * group
    chunks = min(warmup + 1, m * v)
    return layers / v * chunks


def _microbatches_in_flight(run: RunSpec, stage: int) -> float:
    if run.pp == 1:
        return 1.0
    if run.vpp_chunks == 1:
        return float(min(run.pp - stage, run.num_microbatches))
    return in_flight_layer_microbatches(run, stage, run.vpp_chunks) / run.vpp_chunks


# ---------------------------------------------------------------------- estimate
@lru_cache(maxsize=512)
def _model_facts(
    model: ModelSpec, tp: int
) -> tuple[tuple[int, ...], LayerParams, LayerParams, ParamCount, LayerParams | None]:
    """Per-model arithmetic reused across the planner's thousands of calls (ModelSpec is
    frozen and hashable): MoE-layer prefix sums, per-layer parameters, totals, MTP layer."""
    pattern = model.moe_layers()
    prefix = [0]
    for is_moe in pattern:
        prefix.append(prefix[-1] + int(is_moe))
    dense_layer = layer_params(model, False)
    moe_layer = layer_params(model, True) if model.is_moe else dense_layer
    mtp = mtp_layer_params(model) if model.mtp_num_layers else None
    return tuple(prefix), dense_layer, moe_layer, count_parameters(model, padded_tp=tp), mtp


def estimate(model: ModelSpec, run: RunSpec) -> MemoryEstimate:
    """Peak memory per pipeline stage, first to last. Raises InputError on impossible runs
    and on runs that declare a memory-relevant feature no term models (never a silent guess)."""
    validate(model, run)
    if run.unmodelled:
        raise InputError(
            f"not modelled: {'; '.join(run.unmodelled)} - the estimator has no term for it and will not estimate "
            "the run as something else; measure one step instead (runtime_memory.py) or remove the feature"
        )
    assumptions: list[str] = list(known_gaps(model, run))
    t, pp = run.tp, run.pp
    counts = stage_layer_counts(model, run)
    moe_prefix, dense_layer, moe_layer, pcount, mtp = _model_facts(model, t)
    vocab = model.padded_vocab_size(t)
    h = model.hidden_size
    emb = pcount.embedding
    out = vocab * h  # the last stage always holds an output matrix (a copy when tied and pp > 1)

    act_dense = layer_activations(model, run, False)
    act_moe = layer_activations(model, run, True) if model.is_moe else act_dense
    hybrid = model.is_hybrid
    kinds = model.layer_kinds() if hybrid else ()
    hybrid_params = {k: hybrid_layer_params(model, k) for k in set(kinds)}
    hybrid_acts = {k: hybrid_layer_activations(model, run, k) for k in set(kinds)}
    stage_kind_lists = hybrid_stage_kinds(model.hybrid_layer_pattern or "", counts) if hybrid else ()
    param_b = 1 if run.fp8_param_gather else _b(run.params_dtype)
    grad_b = 4 if (run.grad_reduce_in_fp32 or run.params_dtype == "fp32") else _b(run.params_dtype)
    opt_b = _optimizer_bytes_per_param(run)
    dp_shard = max(1, run.dp * run.cp // max(1, run.num_distributed_optimizer_instances))
    edp_shard = max(1, run.expert_dp // max(1, run.num_distributed_optimizer_instances))
    overhead = (
        CUDA_CONTEXT_BYTES
        + CUDA_LIBRARIES_BYTES
        + NCCL_FIRST_GROUP_BYTES
        + NCCL_BYTES_PER_GROUP * (_process_groups(run) - 1)
    )
    reserve_share = reserve_fraction(model)
    local_attention = torch_softmax_attention(run)
    workspace = WORKSPACE_BYTES
    if local_attention:
        # PyTorch's own cuBLAS workspaces, and the baddbmm input of Megatron-Core's local
        # DotProductAttention (one layer's bf16 scores, used with beta=0) that the global memory
        # buffer keeps for the run (H200 grid: 0.125 GiB after g01, 0.375 GiB more after g04 at
        # twice the sequence).
        workspace = TORCH_WORKSPACE_BYTES + int(score_elements(model, run) * (2 if run.params_dtype != "fp32" else 4))

    stages: list[StageEstimate] = []
    start = 0
    for stage, n in enumerate(counts):
        is_first, is_last = stage == 0, stage == pp - 1
        moe_n = moe_prefix[start + n] - moe_prefix[start]
        dense_n = n - moe_n
        stage_kinds = stage_kind_lists[stage] if hybrid else ()
        start += n
        dense_params = dense_n * (dense_layer.dense / t + dense_layer.replicated + dense_layer.expert) + moe_n * (
            moe_layer.dense / t + moe_layer.replicated
        )
        expert_params = moe_n * moe_layer.expert / max(1, run.ep * run.expert_tp)
        if hybrid:
            dense_params = sum(
                stage_kinds.count(k) * (hybrid_params[k].dense / t + hybrid_params[k].replicated)
                for k in set(stage_kinds)
            )
        if is_first:
            dense_params += emb / t
        if is_last:
            dense_params += (out if (pp > 1 or model.untie_embeddings_and_output_weights) else 0) / t
            dense_params += model.layer_norm_width * h
            if mtp is not None:
                dense_params += model.mtp_num_layers * (mtp.dense / t + mtp.replicated)
                expert_params += model.mtp_num_layers * mtp.expert / max(1, run.ep * run.expert_tp)
        mtp_embedding = mtp_stage_embedding(model, run, stage)
        dense_params += mtp_embedding
        stage_params = dense_params + expert_params

        vocab_params = (emb / t if is_first else 0.0) + (out / t if is_last else 0.0) + mtp_embedding
        fp8_cached = 0.0
        if run.fp8 and not run.fp8_param_gather:
            # TE caches an fp8 copy of each GEMM weight for the step, row-wise and column-wise
            # (FP8_WEIGHT_CACHE_BYTES). The embedding and the output layer are Megatron (not TE)
            # modules that run in bf16: no copy.
            # Weights inside TE CUDA graphs are cached too: Megatron-Core's graph helper passes
            # ``kwargs['fp8_weight_caching'] = True`` to ``make_graphed_callables`` for every
            # scope (transformer/cuda_graphs.py since the 2025-09 graph refactor, 98b6f0e; before
            # it only when attention was captured).
            fp8_cached = FP8_WEIGHT_CACHE_BYTES * max(0.0, stage_params - vocab_params)
        elif run.fp8 and run.fp8_param_gather:
            # fp8 primary weights hold the row-wise data (the 1 B/param of ``param_b``); TE adds
            # the column-wise (transposed) copy for the backward GEMM. The bf16 embedding and
            # output layer are kept in bf16: 1 more byte each than ``param_b`` charged.
            fp8_cached = FP8_TRANSPOSE_BYTES * max(0.0, stage_params - vocab_params) + vocab_params
        weights, grads, optim = _static_bytes(
            run,
            model,
            dense_params,
            expert_params,
            n,
            param_b,
            grad_b,
            opt_b,
            dp_shard,
            edp_shard,
            vocab_params,
            fp8_cached,
            kinds=stage_kinds,
        )
        step_copy = _step_grad_copy(run, dense_params, expert_params, grad_b, dp_shard, edp_shard)

        # activations
        inflight_layers = in_flight_layer_microbatches(run, stage, n, stage_chunk_layers(model, run, stage))
        per_layer_stored = (act_dense.stored * dense_n + act_moe.stored * moe_n) / max(1, n)
        per_layer_full = max(act_dense.full, act_moe.full if moe_n else 0.0)
        if hybrid and n:
            per_layer_stored = sum(hybrid_acts[k].stored for k in stage_kinds) / n
            per_layer_full = max(hybrid_acts[k].full for k in stage_kinds)
        ckpt = act_dense.checkpoint_input
        layer_acts = _recompute_layers(run, n, inflight_layers, per_layer_stored, ckpt)
        if hybrid:
            stage_acts = [hybrid_acts[k] for k in set(stage_kinds)]
        else:
            stage_acts = ([act_dense] if dense_n else []) + ([act_moe] if moe_n else [])
        replay = _recompute_replay(run, n, per_layer_full, ckpt, stage_acts)
        graph_pool = 0.0
        if run.cuda_graph_scope and run.recompute_granularity != "full" and n:
            per_layer_graphed = (act_dense.graphed * dense_n + act_moe.graphed * moe_n) / n
            if hybrid:
                per_layer_graphed = sum(hybrid_acts[k].graphed for k in stage_kinds) / n
            graph_pool = inflight_layers * per_layer_graphed
            layer_acts -= graph_pool
        mb = _microbatches_in_flight(run, stage)
        tokens = run.seq_length / max(1, run.cp) * run.mbs
        spt = _sp_div(run)
        extra = 0.0
        loss_peak = 0.0
        if is_first:
            extra += mb * (8 * tokens + (tokens * h / spt if run.hidden_dropout > 0 else 0))
        if is_last:
            ce = CE_FUSED_BYTES_PER_LOGIT if run.cross_entropy_loss_fusion else CE_BYTES_PER_LOGIT
            if run.cross_entropy_loss_fusion and run.cross_entropy_fusion_impl == "te":
                ce = CE_TE_BYTES_PER_LOGIT
            logits = tokens * vocab / t
            loss_peak = logits * ce
            extra += 2 * 2 * tokens * h / spt  # final norm input and output
            if run.defer_embedding_wgrad_compute:
                # The output layer's weight gradient waits: its bf16 output gradient and its input
                # stay alive for each deferred micro-batch. The input is ColumnParallelLinear's
                # ``input_parallel`` (``embedding_activation_buffer.append(input_parallel)``):
                # the sequence-local shard under SP, gathered again only when the wgrad drains.
                deferred = min(run.wgrad_deferral_limit or run.num_microbatches, run.num_microbatches)
                extra += deferred * (2 * logits + 2 * tokens * h / spt)
            if model.mtp_num_layers:
                extra += model.mtp_num_layers * (
                    mtp_layer_activations(run, act_moe.stored, tokens * h / spt) + logits * 4
                )
        working = BACKWARD_WORKING_LAYERS * per_layer_full + replay if n else 0.0
        if n and not hybrid and local_attention:
            working = unfused_working_set(model, run, act_moe if moe_n else act_dense, replay)
        if is_first and is_last and not model.untie_embeddings_and_output_weights:
            working += tied_output_grad_bytes(model, run)
        # The loss peak (logits + fp32 softmax) and a decoder layer's backward working set
        # (its gradients and what recompute re-materialises for it) are never alive together:
        # cross entropy's backward turns the saved softmax into the logits gradient, the output
        # layer's backward turns that into a T x h gradient and frees it, and only then does
        # the last decoder layer's backward (and its recompute) start.
        working = max(working, loss_peak)
        if act_dense.offloaded or act_moe.offloaded:
            # Offload copies are asynchronous: the layer being computed and the one being
            # copied out (forward) or prefetched (backward) keep their tensors on the GPU.
            extra += OFFLOAD_RESIDENT_LAYERS * max(act_dense.offloaded, act_moe.offloaded if moe_n else 0.0)
        activations = layer_acts + extra + working
        activations = _apply_offload(run, activations, layer_acts, n)

        stage_estimate = StageEstimate(
            stage=stage,
            layers=n,
            weights=int(weights),
            gradients=int(grads),
            optimizer=int(optim),
            activations=int(activations),
            workspace=workspace,
            overhead=int(overhead),
            params=int(stage_params),
            optimizer_step=int(max(0.0, step_copy + foreach_adam_bytes(run, optim, opt_b) - activations)),
            cuda_graphs=int(graph_pool),
            capture_bytes=int(_capture_bytes(run, weights, grads, optim, graph_pool)),
            in_flight_microbatches=round(inflight_layers / n, 3) if n else float(mb),
        )
        pooled = stage_estimate.step_bytes + stage_estimate.cuda_graphs  # both live in allocator segments
        stages.append(replace(stage_estimate, reserve=int(reserve_share * pooled)))

    assumptions.extend(_describe(model, run, vocab))
    return MemoryEstimate(
        stages=tuple(stages),
        parameters_total=pcount.total,
        parameters_per_gpu_max=max(s.params for s in stages),
        assumptions=tuple(assumptions),
        gpus_per_stage=max(1, run.world_size // max(1, pp)),
    )


#: Measured gaps that are not modelled yet, each shown as a leading WARNING when it applies.
#: The figures come from the external measured points named in references/memory-model.md.
def known_gaps(model: ModelSpec, run: RunSpec) -> list[str]:
    """WARNING lines for settings where measurements disagree with the model by more than its
    usual spread: the estimate is still printed, with the measured size of the gap."""
    out: list[str] = []
    if run.fp8 == "blockwise":
        out.append(
            "WARNING: fp8 blockwise recipe: on both external FP8-blockwise runs the static memory "
            "(weights, their fp8 copies, gradients, optimizer) measured about 1.8 GiB per GPU above this "
            "estimate (blockwise-scaled weight copies not modelled); add about 1.8 GiB"
        )
    if run.recompute_granularity == "selective" and "moe_act" in run.recompute_modules and model.is_moe:
        out.append(
            "WARNING: selective recompute of moe_act: on the one external run measured, it saved about 2.5 GiB "
            "where this model removes 6.4 GiB; read the saving as an upper bound"
        )
    if model.is_moe and run.ep >= 8:
        out.append(
            f"WARNING: MoE at EP {run.ep}: on two external EP-8 runs the MoE activations measured 15-18% above "
            "this model (alltoall -14.7%, allgather -17.8%; uneven routing and dispatcher buffers are not "
            "modelled); keep that much headroom"
        )
    return out


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
    mlp_saved = sum(v for k, v in last.terms if k in _MLP_TERMS)
    transient = score_elements(model, run) * unfused_score_bytes(run)[1]
    return max(0.0, replay + transient + 2 * act * tokens * model.hidden_size / _sp_div(run) - mlp_saved)


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


def foreach_adam_bytes(run: RunSpec, optim: float, opt_b: float) -> float:
    """fp32 temporaries of torch's foreach AdamW at the step (4 bytes per parameter it steps).

    Megatron-Core falls back to ``torch.optim.AdamW`` when neither Transformer Engine nor apex is
    installed (optimizer/__init__.py). The launch line cannot say what is installed; the local
    transformer with the softmax in PyTorch (:func:`torch_softmax_attention`) is the H200 grid's
    such environment, and is taken as the sign of it (an assumption line says so). TE's and
    apex's fused Adam update in place.
    """
    if not torch_softmax_attention(run) or run.optimizer != "adam" or run.use_precision_aware_optimizer or not opt_b:
        return 0.0
    return FOREACH_ADAM_TEMP_BYTES * optim / opt_b


def mtp_layer_activations(run: RunSpec, layer_stored: float, hidden_elems: float) -> float:
    """What one MTP depth keeps for backward (bytes), its logits and loss aside.

    Without recompute: its transformer layer plus the two bf16 inputs of ``eh_proj``'s concat
    (``hidden_elems`` = tokens x hidden on this GPU). Under full recompute Megatron-Core
    checkpoints the depth (multi_token_prediction.py, MultiTokenPredictionLayer.forward:
    ``if self.config.recompute_granularity == 'full' and self.training:
    self._checkpointed_forward(...)``), which with ``recompute_method == 'uniform'`` keeps only
    the checkpoint's inputs ``hidden_states`` and ``decoder_input``; with ``'block'`` it warns
    "not supported for MTP yet. Skipping recompute." and keeps everything.
    """
    inputs = 2 * hidden_elems * 2
    if run.recompute_granularity == "full" and (run.recompute_method or "uniform") == "uniform":
        return inputs
    return layer_stored + inputs


def mtp_stage_embedding(model: ModelSpec, run: RunSpec, stage: int) -> float:
    """Embedding parameters (per GPU) that the multi-token-prediction stage builds for itself.

    The MTP modules embed the shifted input tokens again, so the stage that holds them (the
    last one) builds its own ``LanguageModelEmbedding`` (gpt_model.py: ``if self.pre_process or
    self.mtp_process: self.embedding = ...``) next to its output layer - "both embedding
    layer and output layer in the mtp process stage" (language_module.py,
    ``shared_embedding_or_output_weight``), tied or not. On the first stage (PP 1) it is the
    decoder's own embedding: nothing extra.
    """
    if not model.mtp_num_layers or run.pp == 1 or stage != run.pp - 1:
        return 0.0
    return embedding_params(model, max(1, run.tp)) / max(1, run.tp)


def _capture_bytes(run: RunSpec, weights: float, grads: float, optim: float, graph_pool: float) -> float:
    """Allocated bytes while CUDA graphs are captured (0 without graphs).

    Capture runs the graphed modules in the pipeline order of one step, so their saved
    tensors for all in-flight micro-batches are live allocations then; afterwards they belong
    to the graph's private pool (reserved, not counted as allocated). Capturing after
    ``cuda_graph_warmup_steps`` training steps means the optimizer states already exist;
    capturing at step 0 means only the fp32 main parameters (created with the optimizer) do.
    """
    if not graph_pool:
        return 0.0
    states = optim if run.cuda_graph_warmup_steps > 0 else optim * _main_param_share(run)
    return weights + grads + states + WORKSPACE_BYTES + graph_pool


def _main_param_share(run: RunSpec) -> float:
    total = _optimizer_bytes_per_param(run)
    main = 0 if run.params_dtype == "fp32" else (_b(run.main_params_dtype) if run.use_precision_aware_optimizer else 4)
    return main / total if total else 0.0


def _step_grad_copy(run: RunSpec, dense: float, expert: float, grad_b: float, dp_shard: int, edp_shard: int) -> float:
    """fp32 copies of the gradient shard made at the optimizer step.

    With bf16/fp16 gradients, Megatron's mixed-precision optimizers cast each (sharded)
    gradient to fp32 into the main parameters' ``.grad`` before stepping; with fp32 main
    grads the buffer is used in place. By then the step's activations are freed, so this
    only matters when it exceeds them.
    """
    if run.peft is not None or grad_b >= 4 or run.params_dtype == "fp32" or run.optimizer_cpu_offload:
        return 0.0
    if run.use_distributed_optimizer or run.use_megatron_fsdp:
        return 4 * (dense / dp_shard + expert / edp_shard)
    return 4 * (dense + expert)


def _optimizer_bytes_per_param(run: RunSpec) -> float:
    """Optimizer-state bytes per trainable parameter before sharding."""
    main = 0 if run.params_dtype == "fp32" else (_b(run.main_params_dtype) if run.use_precision_aware_optimizer else 4)
    if run.optimizer == "sgd":
        return main + 4
    if run.optimizer == "muon":
        return main + 4  # one momentum buffer
    if run.use_precision_aware_optimizer:
        return main + _b(run.exp_avg_dtype) + _b(run.exp_avg_sq_dtype)
    return main + 8  # Adam: fp32 exp_avg + exp_avg_sq


#: The LoRA target modules each hybrid-pattern layer builds: an attention-only layer ('*') has
#: no MLP linears, an MLP/MoE-only layer ('-', 'E') no attention linears, and a Mamba layer
#: ('M') none of the four (its linears are ``in_proj`` / ``out_proj``, mamba_mixer.py), so
#: Bridge's default targets put no adapter there.
HYBRID_LORA_MODULES: dict[str, tuple[str, ...]] = {
    "*": ("linear_qkv", "linear_proj"),
    "-": ("linear_fc1", "linear_fc2"),
    "E": ("linear_fc1", "linear_fc2"),
    "M": (),
}


def lora_adapts(module: str, kind: str | None) -> bool:
    """Does a layer of this hybrid-pattern ``kind`` (None: a full transformer layer) have the
    target ``module``? Names other than the four standard linears are left as targeted."""
    if kind not in HYBRID_LORA_MODULES or module not in LORA_DEFAULT_TARGETS:
        return True
    return module in HYBRID_LORA_MODULES[kind]


def _lora_params(model: ModelSpec, run: RunSpec, layers: int, kinds: tuple[str, ...] | str = ()) -> float:
    """Adapter parameters per GPU on a stage (A: in x r, B: r x out; one side TP-sharded);
    ``kinds``: the stage's hybrid-pattern layer symbols, each adapted only where it has the module."""
    r, h, t = run.lora_dim, model.hidden_size, run.tp
    shapes = {
        "linear_qkv": (h, (model.num_attention_heads + 2 * model.query_groups) * model.head_dim),
        "linear_proj": (model.num_attention_heads * model.head_dim, h),
        "linear_fc1": (h, model.ffn * (2 if model.gated_linear_unit else 1)),
        "linear_fc2": (model.ffn, h),
    }
    total = 0.0
    for module in run.lora_target_modules:
        if module in shapes:
            i, o = shapes[module]
            adapted = sum(lora_adapts(module, k) for k in kinds) if kinds else layers
            total += adapted * ((i * r + r * o) / t if t > 1 else i * r + r * o)
    return total


def _static_bytes(
    run: RunSpec,
    model: ModelSpec,
    dense: float,
    expert: float,
    layers: int,
    param_b: float,
    grad_b: float,
    opt_b: float,
    dp_shard: int,
    edp_shard: int,
    embedding_output_params: float = 0.0,
    fp8_cached_params: float = 0.0,
    kinds: tuple[str, ...] | str = (),
) -> tuple[float, float, float]:
    """Weights, gradient buffer and optimizer states of one GPU of a stage
    (``fp8_cached_params``: bytes of the fp8 weight copies TE keeps for the step; ``kinds``:
    the stage's hybrid-pattern layer symbols, which decide where LoRA adapters exist)."""
    weights = (dense + expert) * param_b + fp8_cached_params
    if run.peft is not None:
        trainable = _lora_params(model, run, layers, kinds)
        weights += trainable * _b(run.params_dtype)
        grads = trainable * 4
        optim = trainable * (opt_b / dp_shard if run.use_distributed_optimizer else opt_b)
        return weights, grads, optim
    grads = (dense + expert) * grad_b
    if run.optimizer == "muon":
        # Muon orthogonalises whole weight matrices, so its states are not sharded by the
        # distributed optimizer; embedding and output matrices are trained with Adam.
        vocab_params = embedding_output_params
        optim = (dense + expert - vocab_params) * opt_b + vocab_params * (opt_b + 4)
    elif run.use_distributed_optimizer or run.use_megatron_fsdp:
        optim = dense * opt_b / dp_shard + expert * opt_b / edp_shard
    else:
        optim = (dense + expert) * opt_b
    if run.use_megatron_fsdp:
        strategy = run.data_parallel_sharding_strategy
        if strategy in ("optim_grads", "optim_grads_params"):
            grads = dense * grad_b / dp_shard + expert * grad_b / edp_shard
        if strategy == "optim_grads_params":
            # Parameters sharded; two layers' worth gathered at a time (current + prefetch).
            per_layer = (dense + expert) / max(1, layers)
            weights = dense * param_b / dp_shard + expert * param_b / edp_shard + 2 * per_layer * param_b
    if run.optimizer_cpu_offload:
        optim *= 1 - max(0.0, min(1.0, run.optimizer_offload_fraction))
    return weights, grads, optim


def _recompute_layers(run: RunSpec, n: int, inflight_layers: float, stored: float, ckpt: float) -> float:
    """Activations the stage's decoder layers keep saved between forward and backward.

    Under full recompute a checkpointed group of ``recompute_num_layers`` keeps only its
    input (the uniform method checkpoints every group, the block method the first ``k``
    layers of each chunk and stores the rest in full). What a recompute re-materialises in
    backward is :func:`_recompute_replay`, part of the backward working set.
    """
    if n == 0:
        return 0.0
    if run.recompute_granularity != "full":
        return inflight_layers * stored
    chunk_layers = n / run.vpp_chunks
    k = max(1, run.recompute_num_layers or 1)
    mbs_chunks = inflight_layers / chunk_layers  # chunk-micro-batches alive
    if (run.recompute_method or "uniform") == "uniform":
        return mbs_chunks * math.ceil(chunk_layers / k) * ckpt
    recomputed = min(k, chunk_layers)
    return mbs_chunks * (recomputed * ckpt + (chunk_layers - recomputed) * stored)


def _recompute_replay(run: RunSpec, n: int, full: float, ckpt: float, stage_acts: list[LayerActivations]) -> float:
    """Bytes a recompute re-materialises for the layer(s) whose backward runs.

    Full recompute re-runs one checkpointed group (``k`` layers, uniform; one layer, block)
    and holds its full activations again. The re-run starts from the saved input itself
    (tensor_parallel/random.py, ``CheckpointFunction.backward``: ``detached_inputs =
    detach_variable(inputs)``, which shares the storage), so the group's input is not a
    second copy: ``k x full - ckpt``. Selective recompute likewise re-runs the checkpointed
    modules of the layer in backward and holds their outputs again
    (``CheckpointWithoutOutput._recompute``); offloaded tensors are not recomputed (their
    prefetch is charged as resident layers). Without this a stage of one layer and one
    micro-batch in flight would look cheaper under recompute than without it.
    """
    if n == 0:
        return 0.0
    if run.recompute_granularity == "full":
        chunk_layers = n / run.vpp_chunks
        k = max(1, run.recompute_num_layers or 1)
        layers = min(k, chunk_layers) if (run.recompute_method or "uniform") == "uniform" else min(1, k)
        return max(0.0, layers * full - ckpt)
    if run.recompute_granularity == "selective":
        return max((max(0.0, a.full - a.stored - a.offloaded) for a in stage_acts), default=0.0)
    return 0.0


def _apply_offload(run: RunSpec, activations: float, layer_acts: float, n: int) -> float:
    if run.cpu_offloading and run.cpu_offloading_activations and n:
        share = min(n, run.cpu_offloading_num_layers) / n
        # Offloaded layers leave the GPU; one layer stays resident as the copy buffer.
        return activations - layer_acts * share + layer_acts / n
    return activations


def _process_groups(run: RunSpec) -> int:
    groups = 1  # data parallel
    for size in (run.tp, run.pp, run.cp, run.ep):
        if size > 1:
            groups += 1
    return groups


def _describe(model: ModelSpec, run: RunSpec, vocab: int) -> list[str]:
    out = [
        f"parallelism TP{run.tp} PP{run.pp}"
        + (f" VPP{run.vpp_chunks}" if run.vpp_chunks > 1 else "")
        + f" CP{run.cp} EP{run.ep} ETP{run.expert_tp} DP{run.dp} on {run.world_size} GPUs",
        f"micro-batch {run.mbs}, global batch {run.global_batch}, {run.num_microbatches} "
        f"micro-batch{'es' if run.num_microbatches != 1 else ''} per step per DP rank, sequence {run.seq_length}",
        f"sequence parallel {'on' if _sp_div(run) > 1 else 'off'}; recompute {run.recompute}; attention kernel {attention_kernel(run)}",
        f"params {('fp8 (fp8 param gather)' if run.fp8_param_gather else run.params_dtype)}"
        + (f" with fp8 {run.fp8} GEMMs" if run.fp8 else "")
        + f", main grads {'fp32' if run.grad_reduce_in_fp32 else run.params_dtype}, optimizer {run.optimizer}"
        + (" (distributed over DP x CP)" if run.use_distributed_optimizer else " (replicated)")
        + (", Megatron-FSDP " + run.data_parallel_sharding_strategy if run.use_megatron_fsdp else ""),
        f"vocabulary padded to {vocab} (multiple of {model.make_vocab_size_divisible_by} x TP); logits and cross entropy in fp32 on the last stage",
        "device view (total) = allocated peak + allocator reserve "
        f"({reserve_fraction(model):.1%} of it, default allocator; {reserve_fraction(model, True):.1%} with "
        "expandable_segments:True) + memory outside PyTorch (CUDA context, libraries, NCCL); "
        "peak_allocated_bytes is what torch.cuda.max_memory_allocated reports",
    ]
    if torch_softmax_attention(run):
        saved, transient = unfused_score_bytes(run)
        out.append(
            f"local attention with the softmax in PyTorch ({'fp32' if run.attention_softmax_in_fp32 else 'bf16'}): "
            f"{saved:g} B per score element kept per layer, {transient:g} B more while a layer runs backward, and a "
            "one-layer score buffer kept for the run; torch AdamW's foreach temporaries (+4 B per parameter at the "
            "step) assumed - Megatron-Core's fallback without Transformer Engine or apex"
        )
    if model.gated_linear_unit and not run.bias_activation_fusion:
        out.append("gated MLP unfused (bias_activation_fusion off): activation output and linear half kept too")
    if run.cross_entropy_loss_fusion and run.cross_entropy_fusion_impl == "te":
        out.append("Transformer Engine cross entropy: the logits gradient overwrites the bf16 logits in place")
    if run.peft:
        out.append(
            f"PEFT {run.peft} rank {run.lora_dim} on {', '.join(run.lora_target_modules)}: base weights frozen, "
            f"input re-gather {'on' if run.sequence_parallel_input_regather else 'off'}"
            + ("; frozen linears without an adapter keep no input" if frozen_unsaved_terms(model, run, False) else "")
        )
    if run.cpu_offloading:
        out.append(f"CPU offloading of {run.cpu_offloading_num_layers} layers' activations")
    return out
