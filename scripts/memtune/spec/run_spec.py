"""How a training run is configured: parallelism, batch, precision, recompute, PEFT, offload.

:class:`RunSpec` is frozen and uses Megatron-Core / Megatron Bridge names where one exists,
so the loaders (Megatron-LM flags, Bridge YAML, Hydra overrides, CLI flags) only translate
spellings. :func:`violations` lists every impossible combination as one-line messages that
the planner can show as "rejected because ..."; :func:`validate` raises the first one as an
``InputError`` (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from memtune.errors import InputError
from memtune.spec.model_spec import ModelSpec
from memtune.spec.names import CROSS_ENTROPY_FUSION_IMPLS, FP8_RECIPES  # noqa: F401  (FP8_RECIPES: re-exported)

RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe_act", "moe", "shared_experts", "mla_up_proj")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
LORA_DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
#: Megatron Bridge's CanonicalLoRA adapts the parts of the fused linears separately (q, k, v of
#: linear_qkv; up and gate of linear_fc1), each with its own adapter on the fused module's input
#: (peft/canonical_lora.py: LoRALinearSplitQKV, LoRALinearSplitFC1UpGate).
CANONICAL_LORA_PARTS = {
    "linear_q": "linear_qkv",
    "linear_k": "linear_qkv",
    "linear_v": "linear_qkv",
    "linear_fc1_up": "linear_fc1",
    "linear_fc1_gate": "linear_fc1",
}
CANONICAL_LORA_DEFAULT_TARGETS = (
    "linear_q",
    "linear_k",
    "linear_v",
    "linear_proj",
    "linear_fc1_up",
    "linear_fc1_gate",
    "linear_fc2",
)


def lora_target_leaf(target: str) -> str:
    """``decoder.layers.*.self_attention.linear_q`` -> ``linear_q``."""
    return target.strip().rsplit(".", 1)[-1].strip("*")


def names_canonical_parts(targets: Any) -> bool:
    """Do the adapter targets name parts of the fused linears (``linear_q``, ``linear_fc1_up``...)?"""
    return any(lora_target_leaf(str(t)) in CANONICAL_LORA_PARTS for t in targets)


def canonical_lora(run: RunSpec) -> bool:
    """Adapters on the parts of the fused linears: Bridge's CanonicalLoRA, which has no
    sequence_parallel_input_regather option (only LoRA has)."""
    return names_canonical_parts(run.lora_target_modules)


def peft_class_name(text: str) -> str:
    """``peft._target_: megatron.bridge.peft.dora.DoRA`` -> ``dora``, ``--peft-scheme canonical_lora``
    -> ``canonical_lora``: the class or scheme name decides what a PEFT setting is, never a package
    on its path."""
    words = str(text).split()
    return words[-1].rsplit(".", 1)[-1].lower() if words else ""


def class_without_regather(peft: str | None, canonical: bool) -> str | None:
    """The Megatron Bridge PEFT class that has no sequence_parallel_input_regather field (only
    ``LoRA`` has one, peft/lora.py; ``DoRA`` and ``CanonicalLoRA`` do not), else None."""
    if peft == "dora":
        return "DoRA"
    return "CanonicalLoRA" if peft and canonical else None


def peft_without_regather(run: RunSpec) -> str | None:
    """:func:`class_without_regather` of a run."""
    return class_without_regather(run.peft, canonical_lora(run))


def lora_base_module(target: str) -> str:
    """The Megatron module an adapter target sits on: ``decoder.layers.*.linear_q`` -> ``linear_qkv``."""
    name = lora_target_leaf(target)
    return CANONICAL_LORA_PARTS.get(name, name)


@dataclass(frozen=True)
class RunSpec:
    """One training run. ``world_size`` is the GPU count; data parallelism is derived."""

    world_size: int = 1
    tp: int = 1
    pp: int = 1
    vpp: int | None = None  # virtual pipeline chunks per rank (None or 1 = not interleaved)
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel; None = same as tp
    mbs: int = 1
    gbs: int | None = None  # None = one micro-batch per DP rank
    seq_length: int = 4096
    sequence_parallel: bool = False
    # --- precision ------------------------------------------------------------------
    params_dtype: str = "bf16"  # bf16 | fp16 | fp32
    fp8: str | None = None  # fp8 recipe name (delayed, tensorwise, mxfp8, blockwise) or None
    fp8_param_gather: bool = False  # weights kept in fp8 (no bf16 copy)
    grad_reduce_in_fp32: bool = True  # main grads fp32 (Megatron-LM default with bf16)
    # --- optimizer / data parallel -------------------------------------------------
    optimizer: str = "adam"  # adam | sgd | muon
    use_distributed_optimizer: bool = False
    num_distributed_optimizer_instances: int = 1
    use_precision_aware_optimizer: bool = False
    main_params_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = 1.0
    use_megatron_fsdp: bool = False
    data_parallel_sharding_strategy: str = "optim_grads_params"  # Megatron-FSDP
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    # --- activations ----------------------------------------------------------------
    recompute_granularity: str | None = None  # None | selective | full
    recompute_method: str | None = None  # uniform | block (full only)
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    attention_backend: str = "auto"  # auto | flash | fused | unfused | local
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    transformer_impl: str = "transformer_engine"  # transformer_engine | local
    # Unfused (local) attention only: softmax in fp32 (--attention-softmax-in-fp32; Megatron-LM's
    # CLI default is off, Megatron-Core's TransformerConfig default on) and the fused
    # scale-mask-softmax kernel (--no-masked-softmax-fusion turns it off). None = the input did
    # not say: estimated as off (Megatron-LM's CLI) and estimate/softmax_dtype.py tells the user
    # what fp32 would give, because on the PyTorch-softmax path the two differ by up to a third.
    attention_softmax_in_fp32: bool | None = None
    masked_softmax_fusion: bool = True
    # Weight gradients written straight into the fp32 main-grad buffer (--no-gradient-accumulation-fusion
    # turns it off: each linear's bf16 weight gradient is materialised, then added).
    gradient_accumulation_fusion: bool = True
    cross_entropy_loss_fusion: bool = False
    cross_entropy_fusion_impl: str = "native"  # native (Megatron's kernel) | te (TE's in-place kernel)
    # Fused bias + SwiGLU/GeGLU kernel. Megatron-LM's --bias-swiglu-fusion defaults on; Megatron
    # Bridge's TransformerConfig default is off and only some model bridges turn it on.
    bias_activation_fusion: bool = True
    defer_embedding_wgrad_compute: bool = False  # keep output-layer inputs/grads for a late wgrad
    wgrad_deferral_limit: int = 0  # 0 = defer for every micro-batch of the step
    moe_token_dispatcher_type: str = "alltoall"
    moe_expert_capacity_factor: float | None = None
    moe_pad_expert_input_to_capacity: bool = False  # every expert gets exactly its capacity (padding)
    moe_router_dtype: str | None = None  # router GEMM output dtype (fp32/fp64); None = the input's (bf16)
    cpu_offloading: bool = False
    cpu_offloading_num_layers: int = 0
    cpu_offloading_activations: bool = True
    cpu_offloading_weights: bool = False
    fine_grained_offload_modules: tuple[str, ...] = ()
    # --- pipeline layout -----------------------------------------------------------
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    stage_layers: tuple[int, ...] | None = None  # explicit decoder layers per PP stage (layout)
    microbatch_group_size_per_vp_stage: int | None = None
    # --- PEFT -----------------------------------------------------------------------
    peft: str | None = None  # None | lora | dora
    lora_dim: int = 32
    lora_target_modules: tuple[str, ...] = LORA_DEFAULT_TARGETS
    sequence_parallel_input_regather: bool = False
    # --- misc ------------------------------------------------------------------------
    cuda_graph_scope: tuple[str, ...] = ()  # non-empty = CUDA graphs captured for these
    cuda_graph_warmup_steps: int = 3  # training steps before capture (Megatron default 3)
    use_nccl_ub: bool = False
    # Megatron-Core's EP all-to-all overlap (combined 1F1B) and shared-expert overlap: read for
    # the start-up checks they take part in (start_refusals) and named in the estimate.
    overlap_moe_expert_parallel_comm: bool = False
    moe_shared_expert_overlap: bool = False
    moe_grouped_gemm: bool | None = None  # None: not stated (the moe_act check then stays quiet)
    # The caching allocator's expandable segments, when the input says (a launch script's export):
    # the device view then uses that allocator's reserve. None: not stated (the default allocator).
    expandable_segments: bool | None = None
    # Memory-relevant features the input declares that no estimator term models (a reader fills
    # it: one short name each, e.g. "Gated DeltaNet linear attention (--experimental-attention-variant
    # gated_delta_net)"). The estimator refuses such a run instead of estimating something else.
    unmodelled: tuple[str, ...] = ()

    # ------------------------------------------------------------ derived quantities
    @cached_property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @cached_property
    def dp(self) -> int:
        return max(1, self.world_size // max(1, self.model_parallel))

    @cached_property
    def expert_tp(self) -> int:
        return self.etp if self.etp else self.tp

    @cached_property
    def expert_dp(self) -> int:
        """Data-parallel replicas of each expert: GPUs per PP stage / (EP x ETP)."""
        per_stage = max(1, self.world_size // max(1, self.pp))
        return max(1, per_stage // max(1, self.ep * self.expert_tp))

    @cached_property
    def vpp_chunks(self) -> int:
        return self.vpp if self.vpp and self.vpp > 1 else 1

    @cached_property
    def global_batch(self) -> int:
        return self.gbs if self.gbs else self.mbs * self.dp

    @cached_property
    def num_microbatches(self) -> int:
        """Micro-batches per DP rank per step (gradient-accumulation steps)."""
        return max(1, self.global_batch // max(1, self.mbs * self.dp))

    @property
    def recompute(self) -> str:
        """Human label, e.g. 'selective [core_attn]', 'full uniform x1', 'none'."""
        if self.recompute_granularity == "selective":
            return f"selective [{', '.join(self.recompute_modules)}]"
        if self.recompute_granularity == "full":
            return f"full {self.recompute_method or 'uniform'} x{self.recompute_num_layers or 1}"
        return "none"

    def with_(self, **changes: Any) -> RunSpec:
        return replace(self, **changes)


#: Storage dtypes of weights, gradients and optimizer states that the byte tables price.
STORAGE_DTYPES = ("fp32", "bf16", "fp16", "fp8")


def normalize_dtype(value: Any) -> str:
    """'torch.bfloat16' / 'bfloat16' / 'bf16' -> 'bf16' (fp32, fp16, fp8 likewise)."""
    text = str(value).replace("torch.", "").lower()
    return {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "uint8": "fp8"}.get(text, text)


def stage_layer_counts(model: ModelSpec, run: RunSpec) -> tuple[int, ...]:
    """Decoder layers on each pipeline stage, first to last (uneven PP honoured).

    Megatron splits evenly unless first/last stage counts are given (the rest split
    evenly) or the embedding/loss are accounted as a layer each. Raises ValueError when
    the split is impossible; :func:`violations` turns that into a message.
    """
    pp, n = run.pp, model.num_layers
    if run.stage_layers is not None:
        if len(run.stage_layers) != pp or sum(run.stage_layers) != n:
            raise ValueError(f"pipeline layout {list(run.stage_layers)} must have {pp} stages summing to {n} layers")
        return tuple(run.stage_layers)
    if pp == 1:
        return (n,)
    first, last = run.num_layers_in_first_pipeline_stage, run.num_layers_in_last_pipeline_stage
    if first is None and last is None:
        virtual = n + int(run.account_for_embedding_in_pipeline_split) + int(run.account_for_loss_in_pipeline_split)
        if virtual % pp:
            raise ValueError(
                f"num_layers {n} is not divisible by pipeline_model_parallel_size {pp}; "
                "set num_layers_in_first/last_pipeline_stage (--first-stage-layers/--last-stage-layers) or change PP"
            )
        per = virtual // pp
        counts = [per] * pp
        if run.account_for_embedding_in_pipeline_split:
            counts[0] -= 1
        if run.account_for_loss_in_pipeline_split:
            counts[-1] -= 1
        return tuple(counts)
    rest = n - (first or 0) - (last or 0)
    middle = pp - (first is not None) - (last is not None)
    if rest < 0 or (middle == 0 and rest != 0) or (middle and rest % middle):
        raise ValueError(
            f"uneven pipeline split impossible: {n} layers, first stage {first}, last stage {last}, "
            f"{middle} other stage(s) must share {rest} layers evenly"
        )
    per = rest // middle if middle else 0
    counts = [per] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def stage_chunk_layers(model: ModelSpec, run: RunSpec, stage: int) -> tuple[int, ...] | None:
    """Decoder layers of each virtual-pipeline chunk of ``stage`` when they are uneven, else None.

    With interleaving and ``account_for_embedding/loss_in_pipeline_split`` Megatron sizes
    every chunk as if the embedding and the loss were layers, then builds one decoder layer
    fewer in the first chunk of the first stage and in the last chunk of the last stage
    (transformer_block.get_num_layers_to_build). Those chunks then hold fewer layers than
    the stage's others, which changes how many layer activations are alive at the peak.
    """
    v = run.vpp_chunks
    emb, loss = run.account_for_embedding_in_pipeline_split, run.account_for_loss_in_pipeline_split
    if v == 1 or run.stage_layers is not None or not (emb or loss):
        return None
    if run.num_layers_in_first_pipeline_stage is not None or run.num_layers_in_last_pipeline_stage is not None:
        return None
    per_chunk = (model.num_layers + int(emb) + int(loss)) // run.pp // v
    chunks = [per_chunk] * v
    if stage == 0 and emb:
        chunks[0] -= 1
    if stage == run.pp - 1 and loss:
        chunks[-1] -= 1
    return tuple(chunks) if len(set(chunks)) > 1 else None


#: Sizes beyond these are typos, not runs (they would also make the arithmetic meaningless).
SIZE_LIMITS = {
    "num_layers": 100_000,
    "world_size": 10_000_000,
    "seq_length": 100_000_000,
    "hidden_size": 1_000_000,
    "num_attention_heads": 100_000,
    "vocab_size": 100_000_000,
}


def model_parallel_problem(world_size: int, tp: int, pp: int, cp: int) -> str | None:
    """Megatron-Core's first start-up check: the GPUs must split into whole TP x PP x CP
    model replicas (shared with check_env's MT022, which has no full ModelSpec)."""
    mp = tp * pp * cp
    if world_size % mp:
        return f"world size {world_size} is not divisible by TP x PP x CP = {tp}x{pp}x{cp} = {mp}"
    return None


def smallest_world(tp: int, pp: int, cp: int, ep: int = 1, etp: int | None = None, moe: bool = False) -> int:
    """The fewest GPUs Megatron-Core accepts for these parallel sizes: whole TP x CP x PP model
    replicas, and (for an MoE model) GPUs per pipeline stage divisible by EP x ETP (ETP
    defaults to TP). The count a reader assumes when a source names none, so an assumed
    count can never be the reason a run is refused."""
    from math import lcm

    dense = tp * cp
    per_stage = lcm(dense, ep * (etp or tp)) if moe else dense
    return per_stage * pp


def assumed_world_note(world: int, tp: int, pp: int, cp: int, ep: int = 1, etp: int | None = None) -> str:
    """The line that says a GPU count was assumed and how it was chosen (shown first)."""
    parts = f"TP x PP x CP = {tp}x{pp}x{cp}"
    if ep > 1 or (etp not in (None, tp)):
        parts += f" with EP x ETP = {ep}x{etp or tp} per pipeline stage"
    return f"GPU count not given: assumed {world}, the smallest world {parts} allows; pass --gpus N for the real count"


def expert_parallel_problem(num_experts: int, ep: int) -> str | None:
    """Each expert-parallel rank holds a whole number of experts (shared with MT023)."""
    if num_experts % ep:
        return f"expert_model_parallel_size {ep} does not divide num_moe_experts {num_experts}"
    return None


def with_moe_layer_recompute(run: RunSpec, where: str) -> RunSpec:
    """``--moe-layer-recompute`` / ``model.moe_layer_recompute``, as Megatron-Core's
    TransformerConfig reads it: selective recompute with ``moe`` added to the modules (after its
    default ``[core_attn]`` was filled in), and a refusal next to full recompute."""
    if run.recompute_granularity == "full":
        raise InputError(
            f'{where} with full recompute: Megatron-Core refuses the pair ("Do not set --moe-layer-recompute '
            'with full recompute granularity."); drop one of them'
        )
    modules = run.recompute_modules if "moe" in run.recompute_modules else (*run.recompute_modules, "moe")
    return run.with_(recompute_granularity="selective", recompute_modules=modules)


#: Megatron-FSDP's strategies, least to most sharded (param_and_grad_buffer.py refuses others).
FSDP_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
#: The sharding strategy Megatron-FSDP runs when a Megatron Bridge config does not name one: the
#: default of Megatron-Core's DistributedDataParallelConfig (megatron-core 0.19.2), which Bridge's
#: Megatron-FSDP v1 path keeps. Under it no FSDP buffer is distributed
#: (megatron_fsdp/param_and_grad_buffer.py), so memory is that of plain DDP.
FSDP_UNSET_STRATEGY = "no_shard"
#: Megatron-LM's --data-parallel-sharding-strategy default since core_v0.18.0 (commit 3499efef,
#: "Modify mfsdp default data-parallel-sharding-strategy"); core_v0.17.0 and older: no_shard.
MEGATRON_LM_FSDP_STRATEGY = "optim_grads_params"
#: The first megatron-core release whose Megatron-LM flag defaults to MEGATRON_LM_FSDP_STRATEGY.
MEGATRON_LM_SHARDED_FSDP_SINCE = (0, 18)


def megatron_lm_fsdp_default(mcore_version: tuple[int, ...] | None) -> str:
    """The strategy Megatron-LM runs when --data-parallel-sharding-strategy is not given, for that
    megatron-core release. An unknown release reads as a current one: the flag's default moved
    once (0.18) and an estimate must pick one; the assumption line says which."""
    if mcore_version is not None and mcore_version < MEGATRON_LM_SHARDED_FSDP_SINCE:
        return FSDP_UNSET_STRATEGY
    return MEGATRON_LM_FSDP_STRATEGY


def unset_fsdp_strategy_note(where: str, strategy: str, mcore_version: tuple[int, ...] | None = None) -> str:
    """The assumption line a reader prints when Megatron-FSDP is on and ``where`` is not given.
    ``mcore_version`` is the megatron-core release a Megatron-LM launch line was read for."""
    release = ".".join(map(str, mcore_version)) if mcore_version else None
    if strategy == MEGATRON_LM_FSDP_STRATEGY:
        if release:
            return f"{where} not given: optim_grads_params, Megatron-LM's default with megatron-core {release}"
        return (
            f"{where} not given: optim_grads_params, Megatron-LM's default since core_v0.18.0; before it the "
            "default was no_shard, which shards nothing (weights, gradients and optimizer states whole on every "
            "GPU, as with plain DDP) - name the strategy, or give --megatron-core-version, to be sure"
        )
    head = (
        f"no_shard, Megatron-LM's default with megatron-core {release} (optim_grads_params only from core_v0.18.0),"
        if release
        else "Megatron-FSDP runs Megatron-Core's default no_shard,"
    )
    return (
        f"{where} not given: {head} which shards nothing (weights, gradients and optimizer states stay whole on "
        "every GPU, as with plain DDP); set optim_grads_params to shard all three"
    )


#: The fields the planner sets to turn Megatron-FSDP on with everything sharded.
FSDP_FULL_SHARD: dict[str, Any] = {
    "use_megatron_fsdp": True,
    "use_distributed_optimizer": True,
    "data_parallel_sharding_strategy": "optim_grads_params",
}


def optimizer_sharded(run: RunSpec) -> bool:
    """Are the optimizer states (and the fp32 main parameters) split over the data-parallel
    ranks? The distributed optimizer does it; with Megatron-FSDP the strategy decides, and its
    no_shard distributes no buffer whatever the distributed-optimizer switch says."""
    if run.use_megatron_fsdp:
        return run.data_parallel_sharding_strategy != "no_shard"
    return run.use_distributed_optimizer


def fsdp_gathers_params(run: RunSpec) -> bool:
    """Megatron-FSDP with its parameters sharded (optim_grads_params): the one strategy that
    gathers each layer's weights every micro-batch, and so the one with parameter traffic."""
    return run.use_megatron_fsdp and run.data_parallel_sharding_strategy == "optim_grads_params"


#: Recompute modules Megatron-Core re-runs through a ``CheckpointWithoutOutput()`` built with its
#: default ``fp8=False``, whose forward then asks Transformer Engine's FP8 state even without FP8
#: (``self.fp8 = fp8 is not None``): without TE installed the first step stops with "NameError:
#: name 'FP8GlobalStateManager' is not defined" (measured for layernorm:
#: tests/data/estimator/h100-mcore/layernorm_recompute_errors.json). mla_up_proj passes
#: ``fp8=config.fp8 or config.fp4`` (None without FP8: no TE call); moe_act's checkpoint lives in
#: TEGroupedMLP, which the local spec never builds.
OUTPUT_DISCARDING_RECOMPUTE = ("layernorm", "gdn_norm_out")


def recompute_needing_te(run: RunSpec) -> tuple[str, ...]:
    """The output-discarding recompute modules of a local-transformer run: the spec people use
    without Transformer Engine, where they stop at the first step (check_env MT028)."""
    if run.transformer_impl != "local" or run.recompute_granularity != "selective":
        return ()
    return tuple(m for m in OUTPUT_DISCARDING_RECOMPUTE if m in run.recompute_modules)


def start_refusals(run: RunSpec) -> list[str]:
    """Settings Megatron-Core's TransformerConfig refuses at start-up together with other
    features of the run - recompute modules against overlaps, CUDA-graph scopes and fp8 recipes,
    EP all-to-all overlap against the layout - one line each in its own words
    (transformer_config.py ``__post_init__``). Kept apart from ``violations`` because the refusal
    depends on the Megatron-Core release: the estimator warns, the planner never proposes them,
    check_env reports them (MT026)."""
    out: list[str] = []
    selective = set(run.recompute_modules) if run.recompute_granularity == "selective" else set()
    if run.overlap_moe_expert_parallel_comm:
        if run.ep <= 1:
            out.append("overlap_moe_expert_parallel_comm needs expert parallelism (EP > 1)")
        if run.pp > 1 and run.vpp_chunks <= 1:
            out.append(
                "overlap_moe_expert_parallel_comm needs virtual pipeline stages when pipeline_model_parallel_size > 1"
            )
        if run.moe_token_dispatcher_type not in ("alltoall", "flex"):
            out.append("overlap_moe_expert_parallel_comm needs the alltoall or flex token dispatcher")
        if run.recompute_granularity == "full":
            out.append("full recompute is refused with overlap_moe_expert_parallel_comm (EP all-to-all overlap)")
        if "moe" in selective:
            out.append("recompute module moe is refused with overlap_moe_expert_parallel_comm (EP all-to-all overlap)")
        if run.moe_shared_expert_overlap:
            out.append("moe_shared_expert_overlap is refused with overlap_moe_expert_parallel_comm")
    if "shared_experts" in selective and run.moe_shared_expert_overlap:
        out.append("recompute module shared_experts is refused with moe_shared_expert_overlap")
    if "moe" in selective and "moe_router" in run.cuda_graph_scope:
        out.append("recompute module moe is refused with the moe_router CUDA-graph scope (Transformer Engine graphs)")
    if "moe_act" in selective and run.moe_grouped_gemm is False:
        out.append("recompute module moe_act is refused without moe_grouped_gemm")
    if run.fp8 == "delayed" and selective & {"moe_act", "layernorm"}:
        out.append("recompute modules moe_act and layernorm are refused with fp8 delayed scaling")
    return out


def violations(model: ModelSpec, run: RunSpec) -> list[str]:
    """Every reason this run cannot start, one line each (empty list = legal)."""
    out: list[str] = []
    sizes = {
        "world_size": run.world_size,
        "tensor_model_parallel_size": run.tp,
        "pipeline_model_parallel_size": run.pp,
        "context_parallel_size": run.cp,
        "expert_model_parallel_size": run.ep,
        "micro_batch_size": run.mbs,
        "seq_length": run.seq_length,
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "vocab_size": model.vocab_size,
    }
    for name, value in (
        ("expert_tensor_parallel_size", run.etp),
        ("virtual_pipeline_model_parallel_size", run.vpp),
        ("global_batch_size", run.gbs),
    ):
        if value is not None:
            sizes[name] = value
    optional = {
        "ffn_hidden_size": model.ffn_hidden_size,
        "num_query_groups": model.num_query_groups,
        "kv_channels": model.kv_channels,
        "num_moe_experts": model.num_moe_experts,
        "moe_ffn_hidden_size": model.moe_ffn_hidden_size,
        "recompute_num_layers": run.recompute_num_layers,
        "lora_dim": run.lora_dim,
        "moe_router_topk": model.moe_router_topk if model.is_moe else None,
        "make_vocab_size_divisible_by": model.make_vocab_size_divisible_by,
    }
    sizes.update({k: v for k, v in optional.items() if v is not None})
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            out.append(f"{name} must be a positive integer, got {value!r}")
        elif value > SIZE_LIMITS.get(name, 1 << 40):
            out.append(f"{name} {value} is beyond any real run (limit {SIZE_LIMITS.get(name, 1 << 40)})")
    for name, value in (
        ("mtp_num_layers", model.mtp_num_layers),
        ("cpu_offloading_num_layers", run.cpu_offloading_num_layers),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= SIZE_LIMITS["num_layers"]:
            out.append(f"{name} must be an integer between 0 and {SIZE_LIMITS['num_layers']}, got {value!r}")
    if run.cross_entropy_fusion_impl not in CROSS_ENTROPY_FUSION_IMPLS:
        out.append(
            f"cross_entropy_fusion_impl must be one of {', '.join(CROSS_ENTROPY_FUSION_IMPLS)}, "
            f"got {run.cross_entropy_fusion_impl!r}"
        )
    if run.use_megatron_fsdp and run.data_parallel_sharding_strategy not in FSDP_STRATEGIES:
        out.append(
            f"data_parallel_sharding_strategy must be one of {', '.join(FSDP_STRATEGIES)} "
            f"(Megatron-FSDP), got {run.data_parallel_sharding_strategy!r}"
        )
    for name, rate in (("attention_dropout", run.attention_dropout), ("hidden_dropout", run.hidden_dropout)):
        if not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            out.append(f"{name} must be in [0, 1), got {rate!r}")
    if model.hybrid_layer_pattern:
        from memtune.spec.model_spec import hybrid_symbols

        try:
            symbols = hybrid_symbols(model.hybrid_layer_pattern)
        except ValueError as exc:
            out.append(str(exc))
        else:
            if len(symbols) != model.num_layers:
                out.append(f"hybrid layer pattern has {len(symbols)} layers for num_layers {model.num_layers}")
            if "E" in symbols and not model.is_moe:
                out.append("hybrid layer pattern has MoE layers (E) but num_moe_experts is not set")
    if model.moe_layer_pattern is not None and len(model.moe_layer_pattern) != model.num_layers:
        out.append(f"MoE layer pattern has {len(model.moe_layer_pattern)} entries for {model.num_layers} layers")
    if out:
        return out
    experts = model.num_moe_experts or 0  # model.is_moe == bool(experts), with the int for the checker
    if experts and model.moe_router_topk > experts:
        out.append(f"moe_router_topk {model.moe_router_topk} exceeds num_moe_experts {experts}")
    out.extend(p for p in (model_parallel_problem(run.world_size, run.tp, run.pp, run.cp),) if p)
    if model.num_attention_heads % run.tp:
        out.append(f"num_attention_heads {model.num_attention_heads} is not divisible by TP {run.tp}")
    if not model.multi_latent_attention and model.query_groups % run.tp:
        out.append(f"num_query_groups {model.query_groups} is not divisible by TP {run.tp}")
    if run.ep > 1 or run.etp not in (None, run.tp):
        if not experts:
            if run.ep > 1:
                out.append(f"expert_model_parallel_size {run.ep} > 1 but the model has no experts")
        elif problem := expert_parallel_problem(experts, run.ep):
            out.append(problem)
        per_stage = run.world_size // run.pp if run.world_size % run.pp == 0 else 0
        if model.is_moe and per_stage and per_stage % (run.ep * run.expert_tp):
            out.append(f"GPUs per pipeline stage {per_stage} is not divisible by EP x ETP = {run.ep}x{run.expert_tp}")
    try:
        counts = stage_layer_counts(model, run)
    except ValueError as exc:
        out.append(str(exc))
        counts = ()
    if run.vpp_chunks > 1:
        if run.pp == 1:
            out.append("virtual pipeline parallelism needs pipeline_model_parallel_size > 1")
        for i, c in enumerate(counts if run.stage_layers is None else ()):
            # Megatron requires every stage's layers to split evenly into VPP chunks; an
            # embedding / loss accounted for in the split counts as one layer of the first /
            # last stage there (transformer_block.get_num_layers_to_build), and that chunk
            # then builds one decoder layer fewer.
            c += int(i == 0 and run.account_for_embedding_in_pipeline_split)
            c += int(i == run.pp - 1 and run.account_for_loss_in_pipeline_split)
            if c % run.vpp_chunks:
                out.append(
                    f"layers on pipeline stage {i} ({c}) not divisible by virtual_pipeline_model_parallel_size {run.vpp_chunks}"
                )
                break
        group = run.microbatch_group_size_per_vp_stage or run.pp
        if run.num_microbatches % group and run.num_microbatches >= group:
            out.append(
                f"interleaved schedule: {run.num_microbatches} micro-batches per step not divisible by "
                f"microbatch_group_size_per_vp_stage {group}"
            )
    if run.gbs is not None and run.gbs % (run.mbs * run.dp):
        out.append(f"global_batch_size {run.gbs} not divisible by micro_batch_size x DP = {run.mbs}x{run.dp}")
    if run.sequence_parallel and run.tp == 1:
        pass  # Megatron silently disables SP at TP=1; not an error.
    if run.cp > 1 and run.seq_length % (2 * run.cp):
        out.append(f"seq_length {run.seq_length} not divisible by 2 x context_parallel_size {run.cp}")
    if run.cpu_offloading and run.cpu_offloading_num_layers >= model.num_layers:
        # Megatron-Core's TransformerConfig wording, with the value that broke it
        out.append(
            f"CPU offloading can be done only for layers less than {model.num_layers} "
            f"(cpu_offloading_num_layers {run.cpu_offloading_num_layers})"
        )
    if run.cpu_offloading and run.pp > 1:
        # Megatron-Core's own wording (TransformerConfig raises it as a ValueError), so a
        # user who searches for the error they saw finds this rejection and vice versa.
        out.append(
            "Currently there is no support for Pipeline parallelism with CPU offloading "
            f"(Megatron-Core refuses cpu_offloading with pipeline_model_parallel_size > 1; here PP {run.pp})"
        )
    if run.fp8 is not None and run.fp8 not in FP8_RECIPES:
        out.append(f"fp8 recipe {run.fp8!r} unknown; Megatron-Core knows {', '.join(FP8_RECIPES)}")
    if run.recompute_granularity not in (None, "selective", "full"):
        out.append(f"recompute_granularity must be selective or full, got {run.recompute_granularity!r}")
    if run.recompute_granularity == "full" and run.recompute_method not in (None, "uniform", "block"):
        out.append(f"recompute_method must be uniform or block, got {run.recompute_method!r}")
    bad_modules = [m for m in run.recompute_modules if m not in RECOMPUTE_MODULES]
    if run.recompute_granularity == "selective" and bad_modules:
        out.append(f"unknown recompute module(s) {', '.join(bad_modules)}; known: {', '.join(RECOMPUTE_MODULES)}")
    for name in ("params_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        value = getattr(run, name)
        if normalize_dtype(value) not in STORAGE_DTYPES:
            # a dtype the byte table does not know would be priced at some guessed width
            out.append(f"{name} {value!r} is not a dtype the estimator knows; use one of {', '.join(STORAGE_DTYPES)}")
    return out


def validate(model: ModelSpec, run: RunSpec) -> None:
    """Raise InputError with the first violated constraint."""
    problems = violations(model, run)
    if problems:
        raise InputError(problems[0])
