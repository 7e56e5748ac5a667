"""Static memory: weights, gradient buffers and optimizer states per GPU of a stage, and the
optimizer step's temporaries. Parameter counts come from spec/model_spec.py; this module turns
them into bytes for a run's precision, sharding, PEFT and fp8 settings."""

from __future__ import annotations

from functools import lru_cache

from memtune.estimate.attention import torch_softmax_attention
from memtune.spec.model_spec import LayerParams, ModelSpec, ParamCount, count_parameters, layer_params, mtp_layer_params
from memtune.spec.run_spec import (
    LORA_DEFAULT_TARGETS,
    RunSpec,
    lora_base_module,
    lora_target_leaf,
    normalize_dtype,
    optimizer_sharded,
)

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1, "uint8": 1}
#: Bytes per parameter of the fp8 weight copy TE caches for a training step: it quantises
#: each weight with ``weight_quantizer.set_usage(rowwise=True, columnwise=is_grad_enabled)``
#: (transformer_engine/pytorch/module/linear.py), i.e. the row-wise data for the forward GEMM
#: and the column-wise (transposed) data for the backward GEMM, 1 B each.
FP8_WEIGHT_CACHE_BYTES = 2
#: With fp8 primary weights (--fp8-param-gather) the parameter is the row-wise data; the
#: column-wise copy for the backward GEMM is the 1 B/param extra.
FP8_TRANSPOSE_BYTES = 1
#: fp32 temporaries of torch.optim.AdamW's foreach path (``_multi_tensor_adamw``:
#: ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)`` over the whole parameter
#: list), 4 bytes per parameter the optimizer steps; measured 4.00 B/param on every H200 grid
#: point (g01 1.161 GiB over 311.4 M parameters, g12 2.629 GiB over 705.7 M, c07 7.726 GiB
#: over 2.07 B).
FOREACH_ADAM_TEMP_BYTES = 4


# ---------------------------------------------------------------------- helpers
def dtype_bytes(dtype: str) -> int:
    """Bytes per element; run_spec.violations refuses any dtype outside this table first."""
    return DTYPE_BYTES[normalize_dtype(dtype)]


# ---------------------------------------------------------------------- estimate
@lru_cache(maxsize=512)
def model_facts(
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


def main_param_share(run: RunSpec) -> float:
    total = optimizer_bytes_per_param(run)
    main = (
        0
        if run.params_dtype == "fp32"
        else (dtype_bytes(run.main_params_dtype) if run.use_precision_aware_optimizer else 4)
    )
    return main / total if total else 0.0


def step_grad_copy(run: RunSpec, dense: float, expert: float, grad_b: float, dp_shard: int, edp_shard: int) -> float:
    """fp32 copies of the gradient shard made at the optimizer step.

    With bf16/fp16 gradients, Megatron's mixed-precision optimizers cast each (sharded)
    gradient to fp32 into the main parameters' ``.grad`` before stepping; with fp32 main
    grads the buffer is used in place. By then the step's activations are freed, so this
    only matters when it exceeds them.
    """
    if run.peft is not None or grad_b >= 4 or run.params_dtype == "fp32" or run.optimizer_cpu_offload:
        return 0.0
    if optimizer_sharded(run):
        return 4 * (dense / dp_shard + expert / edp_shard)
    return 4 * (dense + expert)


def optimizer_bytes_per_param(run: RunSpec) -> float:
    """Optimizer-state bytes per trainable parameter before sharding."""
    main = (
        0
        if run.params_dtype == "fp32"
        else (dtype_bytes(run.main_params_dtype) if run.use_precision_aware_optimizer else 4)
    )
    if run.optimizer == "sgd":
        return main + 4
    if run.optimizer == "muon":
        return main + 4  # one momentum buffer
    if run.use_precision_aware_optimizer:
        return main + dtype_bytes(run.exp_avg_dtype) + dtype_bytes(run.exp_avg_sq_dtype)
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
    base = lora_base_module(module)
    if kind not in HYBRID_LORA_MODULES or base not in LORA_DEFAULT_TARGETS:
        return True
    return base in HYBRID_LORA_MODULES[kind]


def lora_params(model: ModelSpec, run: RunSpec, layers: int, kinds: tuple[str, ...] | str = ()) -> float:
    """Adapter parameters per GPU on a stage (A: in x r, B: r x out; one side TP-sharded);
    ``kinds``: the stage's hybrid-pattern layer symbols, each adapted only where it has the module."""
    r, h, t = run.lora_dim, model.hidden_size, run.tp
    shapes = {
        "linear_qkv": (h, (model.num_attention_heads + 2 * model.query_groups) * model.head_dim),
        "linear_proj": (model.num_attention_heads * model.head_dim, h),
        "linear_fc1": (h, model.ffn * (2 if model.gated_linear_unit else 1)),
        "linear_fc2": (model.ffn, h),
        # CanonicalLoRA's separate adapters on the parts of the fused linears
        "linear_q": (h, model.num_attention_heads * model.head_dim),
        "linear_k": (h, model.query_groups * model.head_dim),
        "linear_v": (h, model.query_groups * model.head_dim),
        "linear_fc1_up": (h, model.ffn),
        "linear_fc1_gate": (h, model.ffn),
    }
    total = 0.0
    for target in run.lora_target_modules:
        module = lora_target_leaf(target)
        if module in shapes:
            i, o = shapes[module]
            adapted = sum(lora_adapts(module, k) for k in kinds) if kinds else layers
            total += adapted * ((i * r + r * o) / t if t > 1 else i * r + r * o)
    return total


def static_bytes(
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
        trainable = lora_params(model, run, layers, kinds)
        weights += trainable * dtype_bytes(run.params_dtype)
        grads = trainable * 4
        optim = trainable * (opt_b / dp_shard if optimizer_sharded(run) else opt_b)
        return weights, grads, optim
    grads = (dense + expert) * grad_b
    if run.optimizer == "muon":
        # Muon orthogonalises whole weight matrices, so its states are not sharded by the
        # distributed optimizer; embedding and output matrices are trained with Adam.
        vocab_params = embedding_output_params
        optim = (dense + expert - vocab_params) * opt_b + vocab_params * (opt_b + 4)
    elif optimizer_sharded(run):
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
        optim -= optim * offloaded_optimizer_share(run) * max(0.0, min(1.0, run.optimizer_offload_fraction))
    return weights, grads, optim


def offloaded_optimizer_share(run: RunSpec) -> float:
    """The share of the optimizer state that optimizer CPU offload moves to the host.

    Without the precision-aware optimizer the distributed optimizer still builds its fp32 main
    parameter shard on the GPU (``shard_main_param = shard_model_param.clone().float()``), and
    HybridDeviceOptimizer steps a pinned host *copy* of it, copying the result back: only the
    Adam moments leave (8 of 12 bytes per parameter). With it, the main shard is not built on the
    GPU and everything leaves. Measured (Megatron Bridge's CPU-offloading card, Qwen3-30B-A3B
    TP2 PP2 EP4, 16 x H100, precision-aware optimizer off): 3.8 GB saved per 25% offloaded,
    15.3 GB at 100%, where moving all 12 bytes would have saved 22.9 GB.
    """
    return 1.0 if run.use_precision_aware_optimizer else 1.0 - main_param_share(run)
