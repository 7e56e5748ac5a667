"""Per-pipeline-stage peak GPU memory of a Megatron-Core training run: the stage assembly.

``estimate(model, run)`` walks every pipeline stage and adds up, per GPU of the stage, the terms
each component module computes - one formula, one hop from its module name:

* ``parameters`` - weights (incl. fp8 copies), gradient buffer, optimizer states, the optimizer
  step's temporaries, LoRA adapters;
* ``activations`` - what one decoder layer saves for backward, after recompute, offloading,
  CUDA graphs and LoRA; the loss layer; unfused attention's backward working set;
* ``attention`` - the attention kernel and its score tensors; ``moe`` - router and experts;
  ``mamba`` - Mamba layers of hybrid patterns; ``mtp`` - multi-token prediction;
* ``schedule`` - micro-batches in flight (1F1B, interleaved), recompute replay, offload, CUDA-graph
  capture;
* ``device`` - workspaces, the allocator's reserve and memory outside PyTorch;
* ``result`` - the returned per-stage numbers and their allocated / device views.

Everything is arithmetic on frozen dataclasses: no I/O, no third-party imports, and one call takes
well under a millisecond, so the planner can call it in a loop. This module also re-exports the
public names of its parts, so ``from memtune.estimate.estimator import ...`` keeps working.
"""

from __future__ import annotations

from dataclasses import replace

from memtune.errors import InputError
from memtune.estimate.activations import (
    BACKWARD_WORKING_LAYERS,
    CE_BYTES_PER_LOGIT,
    CE_FUSED_BYTES_PER_LOGIT,
    CE_TE_BYTES_PER_LOGIT,
    LayerActivations,
    frozen_unsaved_terms,
    hybrid_layer_activations,
    layer_activations,
    layernorm_recompute_acts,
    regather_eligible,
    tied_output_grad_bytes,
    unfused_working_set,
)
from memtune.estimate.attention import (
    attention_kernel,
    score_elements,
    sp_divisor,
    torch_softmax_attention,
    unfused_score_bytes,
)
from memtune.estimate.device import (
    CUDA_CONTEXT_BYTES,
    CUDA_LIBRARIES_BYTES,
    NCCL_BYTES_PER_GROUP,
    NCCL_FIRST_GROUP_BYTES,
    TE_GROUPED_GEMM_WORKSPACE_BYTES,
    TORCH_WORKSPACE_BYTES,
    WORKSPACE_BYTES,
    device_peak_bytes,
    process_groups,
    reserve_fraction,
    uses_te_grouped_gemm,
)
from memtune.estimate.mtp import mtp_layer_activations, mtp_stage_embedding
from memtune.estimate.parameters import (
    FP8_TRANSPOSE_BYTES,
    FP8_WEIGHT_CACHE_BYTES,
    dtype_bytes,
    foreach_adam_bytes,
    model_facts,
    optimizer_bytes_per_param,
    static_bytes,
    step_grad_copy,
)
from memtune.estimate.result import MemoryEstimate, StageEstimate
from memtune.estimate.schedule import (
    OFFLOAD_RESIDENT_LAYERS,
    apply_offload,
    capture_bytes,
    in_flight_layer_microbatches,
    interleaved_peak_layer_sets,
    microbatches_in_flight,
    recompute_layers,
    recompute_replay,
)
from memtune.spec.model_spec import ModelSpec, hybrid_layer_params, hybrid_stage_kinds
from memtune.spec.run_spec import (
    RunSpec,
    optimizer_sharded,
    recompute_needing_te,
    stage_chunk_layers,
    stage_layer_counts,
    start_refusals,
    validate,
)
from memtune.units import GIB, MIB


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
    moe_prefix, dense_layer, moe_layer, pcount, mtp = model_facts(model, t)
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
    param_b = 1 if run.fp8_param_gather else dtype_bytes(run.params_dtype)
    grad_b = 4 if (run.grad_reduce_in_fp32 or run.params_dtype == "fp32") else dtype_bytes(run.params_dtype)
    opt_b = optimizer_bytes_per_param(run)
    dp_shard = max(1, run.dp * run.cp // max(1, run.num_distributed_optimizer_instances))
    edp_shard = max(1, run.expert_dp // max(1, run.num_distributed_optimizer_instances))
    overhead = (
        CUDA_CONTEXT_BYTES
        + CUDA_LIBRARIES_BYTES
        + NCCL_FIRST_GROUP_BYTES
        + NCCL_BYTES_PER_GROUP * (process_groups(run) - 1)
    )
    reserve_share = reserve_fraction(model, run.expandable_segments is True)
    local_attention = torch_softmax_attention(run)
    workspace = WORKSPACE_BYTES
    if local_attention:
        # PyTorch's own cuBLAS workspaces, and the baddbmm input of Megatron-Core's local
        # DotProductAttention (one layer's bf16 scores, used with beta=0) that the global memory
        # buffer keeps for the run (H200 grid: 0.125 GiB after g01, 0.375 GiB more after g04 at
        # twice the sequence).
        workspace = TORCH_WORKSPACE_BYTES + int(score_elements(model, run) * (2 if run.params_dtype != "fp32" else 4))
    # TE's grouped-GEMM workspaces exist on a GPU whose stage runs an MoE layer's experts
    grouped_workspace = TE_GROUPED_GEMM_WORKSPACE_BYTES if uses_te_grouped_gemm(model, run) else 0

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
        mtp_experts = False
        if is_first:
            dense_params += emb / t
        if is_last:
            dense_params += (out if (pp > 1 or model.untie_embeddings_and_output_weights) else 0) / t
            dense_params += model.layer_norm_width * h
            if mtp is not None:
                mtp_experts = bool(model.mtp_num_layers and mtp.expert)  # MTP layers copy the last layer's spec
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
        weights, grads, optim = static_bytes(
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
        step_copy = step_grad_copy(run, dense_params, expert_params, grad_b, dp_shard, edp_shard)

        # activations
        inflight_layers = in_flight_layer_microbatches(run, stage, n, stage_chunk_layers(model, run, stage))
        per_layer_stored = (act_dense.stored * dense_n + act_moe.stored * moe_n) / max(1, n)
        per_layer_full = max(act_dense.full, act_moe.full if moe_n else 0.0)
        if hybrid and n:
            per_layer_stored = sum(hybrid_acts[k].stored for k in stage_kinds) / n
            per_layer_full = max(hybrid_acts[k].full for k in stage_kinds)
        ckpt = act_dense.checkpoint_input
        layer_acts = recompute_layers(run, n, inflight_layers, per_layer_stored, ckpt)
        if hybrid:
            stage_acts = [hybrid_acts[k] for k in set(stage_kinds)]
        else:
            stage_acts = ([act_dense] if dense_n else []) + ([act_moe] if moe_n else [])
        replay = recompute_replay(run, n, per_layer_full, ckpt, stage_acts)
        graph_pool = 0.0
        if run.cuda_graph_scope and run.recompute_granularity != "full" and n:
            per_layer_graphed = (act_dense.graphed * dense_n + act_moe.graphed * moe_n) / n
            if hybrid:
                per_layer_graphed = sum(hybrid_acts[k].graphed for k in stage_kinds) / n
            graph_pool = inflight_layers * per_layer_graphed
            layer_acts -= graph_pool
        mb = microbatches_in_flight(run, stage)
        tokens = run.seq_length / max(1, run.cp) * run.mbs
        spt = sp_divisor(run)
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
        activations = apply_offload(run, activations, layer_acts, n)

        stage_estimate = StageEstimate(
            stage=stage,
            layers=n,
            weights=int(weights),
            gradients=int(grads),
            optimizer=int(optim),
            activations=int(activations),
            workspace=workspace + (grouped_workspace if moe_n or mtp_experts else 0),
            overhead=int(overhead),
            params=int(stage_params),
            optimizer_step=int(max(0.0, step_copy + foreach_adam_bytes(run, optim, opt_b) - activations)),
            cuda_graphs=int(graph_pool),
            capture_bytes=int(capture_bytes(run, weights, grads, optim, graph_pool)),
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
    out: list[str] = [
        f"WARNING: Megatron-Core refuses to start this run: {refusal}; the figures below are for a run that "
        "cannot start"
        for refusal in start_refusals(run)
    ]
    needing_te = recompute_needing_te(run)
    if needing_te:
        out.append(
            f"WARNING: recompute {', '.join(needing_te)} on the local transformer: without Transformer Engine "
            "installed Megatron-Core stops at the first step with \"NameError: name 'FP8GlobalStateManager' is "
            "not defined\" (its CheckpointWithoutOutput asks TE's FP8 state even without FP8; measured on "
            "megatron-core 0.19.2); drop the module or install Transformer Engine (check_env MT028)"
        )
    if run.fp8 == "blockwise":
        out.append(
            "WARNING: fp8 blockwise recipe: on two external FP8-blockwise runs the static memory "
            "(weights, their fp8 copies, gradients, optimizer) measured about 1.8 GiB per GPU above this "
            "estimate, and a third run's per-GPU note (Qwen3-14B, TP 4, fp8 param gather) was 9% above the "
            "device view while its bf16 twin was 6% below (blockwise-scaled weight copies and the "
            "quantisation's allocator churn are not modelled); keep about 10% headroom"
        )
    if run.recompute_granularity == "selective" and "moe_act" in run.recompute_modules and model.is_moe:
        out.append(
            "WARNING: selective recompute of moe_act: on three external runs it saved 40-75% of what this model "
            "removes (about 2.5 GiB against 6.4 GiB; 4.2 GB against about 8.4 GB on Nemotron 3 Nano; 0.68 GB "
            "against 0.90 GB on Moonlight-16B-A3B); read the saving as an upper bound"
        )
    if model.is_moe and run.ep >= 8:
        out.append(
            f"WARNING: MoE at EP {run.ep}: on two external EP-8 runs the MoE activations measured 15-18% above "
            "this model (alltoall -14.7%, allgather -17.8%; uneven routing and dispatcher buffers are not "
            "modelled); keep that much headroom"
        )
    return out


def _describe(model: ModelSpec, run: RunSpec, vocab: int) -> list[str]:
    out = [
        f"parallelism TP{run.tp} PP{run.pp}"
        + (f" VPP{run.vpp_chunks}" if run.vpp_chunks > 1 else "")
        + f" CP{run.cp} EP{run.ep} ETP{run.expert_tp} DP{run.dp} on {run.world_size} GPUs",
        f"micro-batch {run.mbs}, global batch {run.global_batch}, {run.num_microbatches} "
        f"micro-batch{'es' if run.num_microbatches != 1 else ''} per step per DP rank, sequence {run.seq_length}",
        f"sequence parallel {'on' if sp_divisor(run) > 1 else 'off'}; recompute {run.recompute}; attention kernel {attention_kernel(run)}",
        f"params {('fp8 (fp8 param gather)' if run.fp8_param_gather else run.params_dtype)}"
        + (f" with fp8 {run.fp8} GEMMs" if run.fp8 else "")
        + f", main grads {'fp32' if run.grad_reduce_in_fp32 else run.params_dtype}, optimizer {run.optimizer}"
        + (" (distributed over DP x CP)" if optimizer_sharded(run) else " (replicated)")
        + (", Megatron-FSDP " + run.data_parallel_sharding_strategy if run.use_megatron_fsdp else ""),
        f"vocabulary padded to {vocab} (multiple of {model.make_vocab_size_divisible_by} x TP); logits and cross entropy in fp32 on the last stage",
        "device view (total) = allocated peak + allocator reserve "
        + (
            f"({reserve_fraction(model, True):.1%} of it: expandable_segments:True, as the launch script sets; "
            f"{reserve_fraction(model):.1%} with the default allocator)"
            if run.expandable_segments
            else f"({reserve_fraction(model):.1%} of it, default allocator; {reserve_fraction(model, True):.1%} with "
            "expandable_segments:True)"
        )
        + " + memory outside PyTorch (CUDA context, libraries, NCCL); "
        "peak_allocated_bytes is what torch.cuda.max_memory_allocated reports",
    ]
    if run.world_size > 1:
        out.append(
            "memory outside PyTorch was measured in a one-GPU run; NCCL's buffers grow with the ranks each "
            "communicator joins: an 8 x H100 Megatron Bridge run (DP 8) showed about 3.9 GiB outside PyTorch on "
            "GPUs 1-7 and 6.1 GiB on GPU 0, where this view counts "
            f"{(CUDA_CONTEXT_BYTES + CUDA_LIBRARIES_BYTES + NCCL_FIRST_GROUP_BYTES) / GIB:.2f} GiB for one group"
        )
    if torch_softmax_attention(run):
        saved, transient = unfused_score_bytes(run)
        out.append(
            "local attention with the softmax in PyTorch ("
            + ("fp32" if run.attention_softmax_in_fp32 else "bf16")
            + (", not stated: Megatron-LM's CLI default" if run.attention_softmax_in_fp32 is None else "")
            + "): "
            f"{saved:g} B per score element kept per layer, {transient:g} B more while a layer runs backward, and a "
            "one-layer score buffer kept for the run; torch AdamW's foreach temporaries (+4 B per parameter at the "
            "step) assumed - Megatron-Core's fallback without Transformer Engine or apex"
        )
    if (
        run.recompute_granularity == "selective"
        and "layernorm" in run.recompute_modules
        and not layernorm_recompute_acts(model, run)
    ):
        out.append(
            "recompute layernorm does nothing here: on the Transformer Engine spec the norms are fused into "
            "linear_qkv and linear_fc1, and Megatron-Core re-runs only a norm that is a module of its own "
            "(MLA and MoE layers, or the local spec)"
        )
    grouped = uses_te_grouped_gemm(model, run)
    if grouped:
        out.append(
            "MoE grouped GEMM on Transformer Engine: its own set of 4 cuBLAS workspaces kept for the run "
            f"({TE_GROUPED_GEMM_WORKSPACE_BYTES / MIB:.0f} MiB on Hopper and newer, 16 MiB before), in workspace"
        )
    elif grouped is None:
        out.append(
            "moe_grouped_gemm not stated: Megatron-Core's default (off) assumed; Megatron Bridge's MoE model bridges "
            "turn it on, and then Transformer Engine keeps 4 more cuBLAS workspaces on each GPU with experts "
            f"(+{TE_GROUPED_GEMM_WORKSPACE_BYTES / MIB:.0f} MiB on Hopper)"
        )
    if run.overlap_moe_expert_parallel_comm:
        out.append(
            "EP all-to-all overlap (combined 1F1B: one micro-batch's forward runs beside another's backward, "
            "layer by layer) is given no extra memory"
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


__all__ = [
    "LayerActivations",
    "MemoryEstimate",
    "StageEstimate",
    "device_peak_bytes",
    "estimate",
    "foreach_adam_bytes",
    "frozen_unsaved_terms",
    "in_flight_layer_microbatches",
    "interleaved_peak_layer_sets",
    "known_gaps",
    "layer_activations",
    "mtp_layer_activations",
    "mtp_stage_embedding",
    "regather_eligible",
    "regather_saving_bytes",
    "reserve_fraction",
    "torch_softmax_attention",
    "unfused_score_bytes",
]
