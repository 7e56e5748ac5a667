"""Megatron-LM command-line flags: read them from a launch script or a mapping, and turn
them into a ModelSpec and RunSpec.

Two input shapes are accepted, because that is how Megatron flags live in practice:

* launch text (bash / sbatch / torchrun lines, ``\\`` line continuations, comments,
  ``--flag value``, ``--flag=value``, bare boolean ``--flag``, multi-token values,
  ``$VAR`` from earlier assignments) - read with check_env's shell reader
  (:mod:`memtune.readers.launch`), so the estimator and the checker agree on a script;
* a mapping ``{"--flag": value}`` (YAML or JSON), e.g. the ``MODEL_ARGS`` section of
  Megatron-LM's functional-test ``model_config.yaml``.

Defaults follow Megatron-LM's ``arguments.py`` (dropout 0.1, LayerNorm, learned absolute
positions, tied embeddings, biases on, GPT-2 BPE vocabulary when only a vocab file is
given); each default used is reported as an assumption. Everything here imports only the
standard library (PyYAML lazily, for mapping files).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from memtune.errors import InputError
from memtune.readers.megatron_flags import (
    flag_classes as flag_classes,  # re-exported: the classification callers look up here
)
from memtune.readers.megatron_flags import (
    ignored_flag_notes,
    ignored_flags,
    memory_flags_not_modelled,
    refuse_unmodelled_models,
)
from memtune.readers.megatron_layout import (  # re-exported: callers read layouts through this module
    deepspeed_pipeline_split as deepspeed_pipeline_split,
)
from memtune.readers.megatron_layout import hybrid_pipeline_split as hybrid_pipeline_split
from memtune.readers.megatron_layout import parse_layer_pattern as parse_layer_pattern
from memtune.readers.megatron_layout import parse_pipeline_layout as parse_pipeline_layout
from memtune.readers.tokenizer_vocab import vocab_from_tokenizer

if TYPE_CHECKING:  # imported lazily at run time (module doc)
    from memtune.readers.launch.world import WorldReading
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import RunSpec


def normalize_flag(flag: str) -> str:
    """'--tensor-model-parallel-size' -> 'tensor_model_parallel_size'."""
    return flag.lstrip("-").replace("-", "_").strip()


def _scalar(token: str) -> Any:
    low = token.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return token


def _flag_value(values: tuple[str, ...]) -> Any:
    """Flag words -> True (a switch), one scalar, or a list of scalars."""
    if not values:
        return True
    scalars = [_scalar(v) for v in values]
    return scalars[0] if len(scalars) == 1 else scalars


@dataclass(frozen=True)
class MegatronArgsReading:
    """One source of Megatron-LM flags, read once: the flags, what the shell reader assumed to
    produce each one, and the GPU count the launcher asks for (memtune.readers.launch.world).

    A YAML/JSON mapping of flags has no launcher, so ``assumed`` is empty and ``world`` None.
    """

    flags: dict[str, Any]
    assumed: dict[str, tuple[str, ...]]
    world: WorldReading | None
    source: str
    alloc_conf: tuple[str, str] | None = None  # (variable, value) exported to training (Script.alloc_conf_for)

    @property
    def world_note(self) -> str | None:
        return self.world.note if self.world is not None else None


def read_launch_text(text: str, source: str = "<text>") -> MegatronArgsReading:
    """Every ``--flag`` of a launch script's training command, with its assumptions and the
    world size, from ONE pass of check_env's shell reader (:mod:`memtune.readers.launch`: line
    continuations, comments, ``$VAR`` / ``${VAR:-x}`` expansion, ``srun`` / ``torchrun`` /
    ``deepspeed`` / ``python -m`` launchers), so both helpers see the same flags in the same
    script. The training command is the one check_env names; a file with none (only a list of
    flags, or helper python calls) is read across its commands, later ones winning.
    """
    from memtune.readers.launch.args import split_program_args
    from memtune.readers.launch.commands import parse_text
    from memtune.readers.launch.world import read_world

    script = parse_text(text, source)
    training = script.training_command()
    if training is not None and training.program_args:
        commands: tuple[Any, ...] = (training,)
    else:
        commands = script.python_commands or script.commands
    flags: dict[str, Any] = {}
    assumed: dict[str, tuple[str, ...]] = {}
    for command in commands:
        words = command.program_args if command.is_python else command.words
        parsed, _ = split_program_args(words)
        for name, flag in parsed.items():
            flags["--" + name] = _flag_value(flag.values)
            assumed["--" + name] = flag.assumed
    return MegatronArgsReading(flags, assumed, read_world(script, training), source, script.alloc_conf_for(training))


def parse_launch_text(text: str, source: str = "<text>") -> dict[str, Any]:
    """The flags of :func:`read_launch_text` (for callers that need only those)."""
    return read_launch_text(text, source).flags


def launch_world_size(text: str, source: str = "<text>") -> tuple[int | None, str | None]:
    """(GPU count, note) of :func:`read_launch_text`: None with a loud warning when the count
    is built from values the job only knows at run time."""
    world = read_launch_text(text, source).world
    return (None, None) if world is None else (world.gpus, world.note)


def _mapping_flags(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """Find a {'--flag': value} mapping at the top level or under MODEL_ARGS."""
    if "MODEL_ARGS" in data and isinstance(data["MODEL_ARGS"], Mapping):
        data = data["MODEL_ARGS"]
    if data and all(isinstance(k, str) and k.startswith("-") for k in data):
        return dict(data)
    return None


def read_megatron_args(path: str | Path) -> MegatronArgsReading:
    """Read Megatron flags from a launch script, or a YAML/JSON mapping of flags, once.

    The reader decides which shape the file is (its suffix, or JSON text starting with ``{``),
    so a caller never has to."""
    from memtune.files.textfile import read_text

    p = Path(path)
    text = read_text(p, "a launch script or a YAML/JSON mapping of Megatron flags", strict=False)
    stripped = text.lstrip()
    if p.suffix.lower() in (".json", ".yaml", ".yml") or stripped.startswith("{"):
        data: Any
        try:
            if stripped.startswith("{"):
                data = json.loads(text)
            else:
                from memtune.files import yaml_guard  # lazy: --help must work without PyYAML

                data = yaml_guard.safe_load(text)
        except RecursionError:
            raise InputError(f"{p}: JSON nested too deeply to be a mapping of Megatron flags") from None
        except Exception as exc:  # noqa: BLE001 - any parse failure is bad input
            raise InputError(f"{p}: not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
        if isinstance(data, Mapping):
            flags = _mapping_flags(data)
            if flags is not None:
                return MegatronArgsReading(flags, {}, None, str(p))
        raise InputError(f"{p}: expected a mapping of Megatron flags like {{'--num-layers': 32}} (or MODEL_ARGS: ...)")
    reading = read_launch_text(text, str(p))
    if not reading.flags:
        raise InputError(f"{p}: no --flags found; pass a launch script or a YAML/JSON mapping of flags")
    return reading


def load_megatron_args(path: str | Path) -> dict[str, Any]:
    """The flags of :func:`read_megatron_args`."""
    return read_megatron_args(path).flags


# ---------------------------------------------------------------------- to specs
def _flag(args: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The flag's value, or ``default`` when it is shell text only the job can fill in
    (``$7``, ``${TP}``, ``$(nproc)``); such a flag is recorded on a _ReadFlags mapping so
    the estimate says it assumed the default instead of using it silently."""
    value = args.get(name, default)
    if isinstance(value, str) and ("$" in value or "`" in value):
        if isinstance(args, _ReadFlags):
            args.unresolved.setdefault(name, value)
        return default
    return value


# The typed readers return the default's type: with an int/str/float default the value can
# never be None, which is what lets the callers below build specs without None checks.
@overload
def _int(args: Mapping[str, Any], name: str, default: int) -> int: ...
@overload
def _int(args: Mapping[str, Any], name: str, default: int | None = None) -> int | None: ...
def _int(args: Mapping[str, Any], name: str, default: int | None = None) -> int | None:
    value = _flag(args, name, default)
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(f"--{name.replace('_', '-')}: expected an integer, got a bare flag")
    try:
        number = int(value)
        if isinstance(value, float) and number != value:
            raise ValueError
        return number
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"--{name.replace('_', '-')}: expected an integer, got {value!r}") from None


@overload
def _float(args: Mapping[str, Any], name: str, default: float) -> float: ...
@overload
def _float(args: Mapping[str, Any], name: str, default: float | None) -> float | None: ...
def _float(args: Mapping[str, Any], name: str, default: float | None) -> float | None:
    value = _flag(args, name, default)
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, (list, tuple)):
        raise InputError(f"--{name.replace('_', '-')}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"--{name.replace('_', '-')}: expected a number, got {value!r}") from None


@overload
def _str(args: Mapping[str, Any], name: str, default: str) -> str: ...
@overload
def _str(args: Mapping[str, Any], name: str, default: str | None) -> str | None: ...
def _str(args: Mapping[str, Any], name: str, default: str | None) -> str | None:
    value = _flag(args, name, default)
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        raise InputError(f"--{name.replace('_', '-')}: expected one value, got {len(value)}")
    return str(value)


def _required_int(args: Mapping[str, Any], name: str) -> int:
    value = _int(args, name)
    if value is None:
        raise InputError(f"Megatron args are missing --{name.replace('_', '-')}")
    return value


def _bool(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = _flag(args, name, None)
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "")
    return bool(value)


def _softmax_in_fp32(args: Mapping[str, Any]) -> bool | None:
    """Whether attention's softmax runs in fp32, or None when the flags do not say.

    ``--attention-softmax-in-fp32`` is a store_true switch (off unless given) and
    ``--apply-query-key-layer-scaling`` turns it on (Megatron-LM arguments.py). Leaving both out
    is the CLI's off, but the same model built from Megatron-Core's ``TransformerConfig`` runs it
    in fp32 (that default is True), so "not said" is kept apart from "said off"."""
    if _bool(args, "apply_query_key_layer_scaling"):
        return True
    if _flag(args, "attention_softmax_in_fp32", None) is None:
        return None
    return _bool(args, "attention_softmax_in_fp32")


def _list(value: Any) -> tuple[str, ...]:
    if value is None or value is True:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(str(v).strip("[],") for v in value if str(v).strip("[],"))
    return tuple(x for x in re.split(r"[\s,\[\]]+", str(value)) if x)


def _largest_batch(a: Mapping[str, Any]) -> int | None:
    """The largest global batch a run reaches: --global-batch-size, or the last (largest)
    entry of a --step-batch-size-schedule such as '0:384 200B:768 400B:1152'."""
    gbs = _int(a, "global_batch_size")
    schedule = _flag(a, "step_batch_size_schedule")
    if gbs is None and schedule not in (None, True):
        items = schedule if isinstance(schedule, (list, tuple)) else str(schedule).split()
        sizes = [int(str(x).rsplit(":", 1)[-1]) for x in items if str(x).rsplit(":", 1)[-1].isdigit()]
        if sizes:
            return max(sizes)
    return gbs


def specs_from_megatron_args(
    flags: Mapping[str, Any],
    world_size: int | None = None,
    assumed: Mapping[str, tuple[str, ...]] | None = None,
    mcore_version: tuple[int, ...] | None = None,
) -> tuple[ModelSpec, RunSpec, list[str]]:
    """(ModelSpec, RunSpec, assumptions) from Megatron-LM flags (either key spelling).

    ``assumed`` maps flags to what the launch-script reader assumed to produce them
    (:func:`launch_flag_assumptions`); those the estimate reads are reported as warnings.
    ``mcore_version`` (the megatron-core release the line runs with, None: unknown) picks the
    defaults that moved between releases: Megatron-FSDP's sharding strategy.
    """
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import (
        RunSpec,
        megatron_lm_fsdp_default,
        normalize_dtype,
        unset_fsdp_strategy_note,
        with_moe_layer_recompute,
    )

    a = _ReadFlags({normalize_flag(k): v for k, v in flags.items()})
    refuse_unmodelled_models(a)
    assumptions: list[str] = []
    pattern = a.get("hybrid_layer_pattern") or a.get("hybrid_override_pattern")
    if pattern is not None and (not isinstance(pattern, str) or pattern.startswith("$")):
        raise InputError(
            f"Megatron args: hybrid layer pattern {pattern!r} is not a literal pattern; give it as e.g. M-M-M*-M-"
        )
    if pattern is None and (_bool(a, "is_hybrid_model") or _flag(a, "hybrid_attention_ratio") is not None):
        raise InputError(
            "Megatron args: a hybrid Mamba model without --hybrid-layer-pattern "
            "(--hybrid-override-pattern); give the pattern (one symbol per layer: M * - E)"
        )
    if pattern is not None:
        from memtune.spec.model_spec import hybrid_symbols

        try:
            symbols = hybrid_symbols(pattern)
        except ValueError as exc:
            raise InputError(f"Megatron args: {exc}") from None
        if _flag(a, "num_layers") is None:
            a["num_layers"] = len(symbols)
    missing = [
        f"--{k.replace('_', '-')}" for k in ("num_layers", "hidden_size", "num_attention_heads") if _flag(a, k) is None
    ]
    from memtune.readers.launch.script import is_branch_guess

    unknown = [f"--{k.replace('_', '-')} {a.unresolved[k]}" for k in a.unresolved]
    unknown += [
        f"--{k.replace('_', '-')} {a[k]} (picked between if/case branches)"
        for k in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")
        if k in a and any(is_branch_guess(note) for note in (assumed or {}).get("--" + k.replace("_", "-"), ()))
    ]
    if unknown:
        raise InputError(
            f"Megatron args: {', '.join(unknown)} only known when the job runs (script arguments or "
            "environment); the model size cannot be read from this script - use --preset or --hf-config "
            "with --tp/--pp/--mbs/--gbs/--seq-length instead"
        )
    if missing:
        raise InputError(f"Megatron args are missing {', '.join(missing)}")
    layers = _required_int(a, "num_layers")
    hidden = _required_int(a, "hidden_size")
    heads = _required_int(a, "num_attention_heads")
    swiglu = _bool(a, "swiglu")
    ffn = _int(a, "ffn_hidden_size")
    if ffn is None:
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if swiglu else 4 * hidden
    vocab = _int(a, "vocab_size") or _int(a, "pad_vocab_size_to")  # the second: Megatron-DeepSpeed (BLOOM)
    if vocab is None:
        vocab, note = vocab_from_tokenizer(a)
        assumptions.append(note)
    gqa = _bool(a, "group_query_attention")
    groups = _int(a, "num_query_groups") if gqa else None
    kv_heads = _int(a, "num_key_value_heads")  # Megatron-DeepSpeed's spelling of grouped-query attention
    if groups is None and kv_heads is not None and kv_heads != heads:
        groups = kv_heads
    experts = _int(a, "num_experts")
    mla = _bool(a, "multi_latent_attention")
    mtp = _int(a, "mtp_num_layers", 0) or 0
    model = ModelSpec(
        name=str(_flag(a, "model_name", "megatron-args")),
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        vocab_size=vocab,
        ffn_hidden_size=ffn,
        num_query_groups=groups,
        kv_channels=_int(a, "kv_channels"),
        gated_linear_unit=swiglu,
        activation="swiglu" if swiglu else ("squared_relu" if _bool(a, "squared_relu") else "gelu"),
        normalization=_str(a, "normalization", "LayerNorm"),
        add_bias_linear=not _bool(a, "disable_bias_linear"),
        add_qkv_bias=_bool(a, "add_qkv_bias"),
        qk_layernorm=_bool(a, "qk_layernorm"),
        untie_embeddings_and_output_weights=_bool(a, "untie_embeddings_and_output_weights"),
        position_embedding_type=_str(a, "position_embedding_type", "learned_absolute"),
        max_position_embeddings=_int(a, "max_position_embeddings", _int(a, "seq_length", 4096)) or 4096,
        make_vocab_size_divisible_by=_int(a, "make_vocab_size_divisible_by", 128) or 128,
        num_moe_experts=experts,
        moe_router_topk=_int(a, "moe_router_topk", 2) or 2,
        moe_ffn_hidden_size=_int(a, "moe_ffn_hidden_size"),
        moe_shared_expert_intermediate_size=_int(a, "moe_shared_expert_intermediate_size"),
        moe_latent_size=_int(a, "moe_latent_size"),
        moe_layer_pattern=parse_layer_pattern(_flag(a, "moe_layer_freq"), layers) if experts else None,
        moe_router_enable_expert_bias=_bool(a, "moe_router_enable_expert_bias"),
        multi_latent_attention=mla,
        q_lora_rank=_int(a, "q_lora_rank"),
        kv_lora_rank=_int(a, "kv_lora_rank", 512) or 512,
        qk_head_dim=_int(a, "qk_head_dim", 128) or 128,
        qk_pos_emb_head_dim=_int(a, "qk_pos_emb_head_dim", 64) or 64,
        v_head_dim=_int(a, "v_head_dim", 128) or 128,
        mtp_num_layers=mtp,
        hybrid_layer_pattern=str(pattern).split("/")[0] if pattern is not None else None,
        mamba_state_dim=_int(a, "mamba_state_dim", 128) or 128,
        mamba_head_dim=_int(a, "mamba_head_dim", 64) or 64,
        mamba_num_groups=_int(a, "mamba_num_groups", 8) or 8,
        mamba_num_heads=_int(a, "mamba_num_heads"),
    )
    tp = _int(a, "tensor_model_parallel_size", 1) or 1
    pp = _int(a, "pipeline_model_parallel_size", 1) or 1
    vpp = _int(a, "num_virtual_stages_per_pipeline_rank")
    per_vstage = _int(a, "num_layers_per_virtual_pipeline_stage")
    if vpp is None and per_vstage:
        # Megatron counts the embedding / loss as a layer each when they are accounted for
        # in the pipeline split (transformer_block.get_num_layers_to_build).
        virtual = (
            layers
            + int(_bool(a, "account_for_embedding_in_pipeline_split"))
            + int(_bool(a, "account_for_loss_in_pipeline_split"))
        )
        vpp = max(1, virtual // pp // per_vstage)
    stage_layers = deepspeed_pipeline_split(
        _flag(a, "pp_partition_method"), layers, pp, tied=not _bool(a, "untie_embeddings_and_output_weights")
    )
    layout = _flag(a, "pipeline_model_parallel_layout")
    if layout:
        stage_layers, vpp = parse_pipeline_layout(str(layout), pp)
    elif model.hybrid_layer_pattern and "|" in model.hybrid_layer_pattern:
        stage_layers, vpp = hybrid_pipeline_split(model.hybrid_layer_pattern, pp)
    if world_size is None:
        world_size = _int(a, "world_size")
    world_note = None
    if world_size is None:
        from memtune.spec.run_spec import assumed_world_note, smallest_world

        cp_size = _int(a, "context_parallel_size", 1) or 1
        ep_size = _int(a, "expert_model_parallel_size", 1) or 1
        etp_size = _int(a, "expert_tensor_parallel_size")
        world_size = smallest_world(tp, pp, cp_size, ep_size, etp_size, moe=bool(experts))
        world_note = assumed_world_note(world_size, tp, pp, cp_size, ep_size, etp_size)
    # Megatron-DeepSpeed: --checkpoint-activations is full recompute of every
    # --checkpoint-num-layers layers; ZeRO stage 1 shards the optimizer state over DP as the
    # distributed optimizer does (stages 2 and 3 also shard gradients / weights: warned below)
    legacy_full = _bool(a, "checkpoint_activations")
    zero_stage = _int(a, "zero_stage", 0) or 0
    # DeepSpeed trains bf16 at ZeRO stage 0 with its BF16_Optimizer, which partitions the fp32
    # master weights and Adam state over data-parallel ranks like stage 1 (BigScience's BLOOM
    # scripts: "bf16 must use z0! it implements its own zero stage 1 equivalent")
    ds_bf16_sharded = _bool(a, "deepspeed") and _bool(a, "bf16") and zero_stage == 0
    fp16 = _bool(a, "fp16")
    bf16 = _bool(a, "bf16")
    params_dtype = "fp16" if fp16 else ("bf16" if bf16 else "fp32")
    recompute_modules = _list(_flag(a, "recompute_modules")) or ("core_attn",)
    cuda_graph: tuple[str, ...] = ()
    if _flag(a, "cuda_graph_impl") not in (None, "none") or _bool(a, "enable_cuda_graph"):
        cuda_graph = _list(_flag(a, "cuda_graph_scope")) or _list(_flag(a, "cuda_graph_modules")) or ("full",)
    offload_modules = _list(_flag(a, "offload_modules")) if _bool(a, "fine_grained_activation_offloading") else ()
    run = RunSpec(
        world_size=world_size,
        tp=tp,
        pp=pp,
        vpp=vpp,
        cp=_int(a, "context_parallel_size", 1) or 1,
        ep=_int(a, "expert_model_parallel_size", 1) or 1,
        etp=_int(a, "expert_tensor_parallel_size"),
        mbs=_int(a, "micro_batch_size", 1) or 1,
        gbs=_largest_batch(a),
        seq_length=_int(a, "seq_length", 4096) or 4096,
        sequence_parallel=_bool(a, "sequence_parallel"),
        params_dtype=params_dtype,
        fp8=_str(a, "fp8_recipe", "delayed") if _flag(a, "fp8_format") else None,
        fp8_param_gather=_bool(a, "fp8_param_gather"),
        # Megatron-LM forces fp32 gradient accumulation/all-reduce with bf16.
        # (unless --grad-reduce-in-bf16 keeps the gradient buffer in bf16).
        grad_reduce_in_fp32=(bf16 and not _bool(a, "grad_reduce_in_bf16"))
        or _bool(a, "accumulate_allreduce_grads_in_fp32"),
        optimizer=_str(a, "optimizer", "adam"),
        use_distributed_optimizer=_bool(a, "use_distributed_optimizer") or zero_stage >= 1 or ds_bf16_sharded,
        num_distributed_optimizer_instances=_int(a, "num_distributed_optimizer_instances", 1) or 1,
        use_precision_aware_optimizer=_bool(a, "use_precision_aware_optimizer"),
        main_params_dtype=normalize_dtype(_flag(a, "main_params_dtype", "fp32")),
        exp_avg_dtype=normalize_dtype(_flag(a, "exp_avg_dtype", "fp32")),
        exp_avg_sq_dtype=normalize_dtype(_flag(a, "exp_avg_sq_dtype", "fp32")),
        optimizer_cpu_offload=_bool(a, "optimizer_cpu_offload"),
        optimizer_offload_fraction=_float(a, "optimizer_offload_fraction", 1.0),
        use_megatron_fsdp=_bool(a, "use_megatron_fsdp"),
        data_parallel_sharding_strategy=_str(
            a, "data_parallel_sharding_strategy", megatron_lm_fsdp_default(mcore_version)
        ),
        overlap_grad_reduce=_bool(a, "overlap_grad_reduce"),
        overlap_param_gather=_bool(a, "overlap_param_gather"),
        # --recompute-activations is Megatron's older spelling of selective (core-attention) recompute.
        recompute_granularity=_str(
            a,
            "recompute_granularity",
            "full" if legacy_full else ("selective" if _bool(a, "recompute_activations") else None),
        ),
        recompute_method=_str(a, "recompute_method", "uniform" if legacy_full else None),
        recompute_num_layers=_int(
            a, "recompute_num_layers", _int(a, "checkpoint_num_layers", 1) if legacy_full else None
        ),
        recompute_modules=recompute_modules,
        attention_backend=_str(a, "attention_backend", "auto"),
        attention_dropout=_float(a, "attention_dropout", 0.1),
        hidden_dropout=_float(a, "hidden_dropout", 0.1),
        transformer_impl=_str(a, "transformer_impl", "transformer_engine"),
        attention_softmax_in_fp32=_softmax_in_fp32(a),
        masked_softmax_fusion=_bool(a, "masked_softmax_fusion", True) and not _bool(a, "no_masked_softmax_fusion"),
        gradient_accumulation_fusion=_bool(a, "gradient_accumulation_fusion", True)
        and not _bool(a, "no_gradient_accumulation_fusion"),
        cross_entropy_loss_fusion=_bool(a, "cross_entropy_loss_fusion"),
        cross_entropy_fusion_impl=_str(a, "cross_entropy_fusion_impl", "native"),
        moe_grouped_gemm=_bool(a, "moe_grouped_gemm"),  # store_true: off unless given
        # --bias-swiglu-fusion is on unless --no-bias-swiglu-fusion (Megatron-LM arguments.py);
        # an arguments dump spells it bias_swiglu_fusion: False.
        bias_activation_fusion=_bool(a, "bias_swiglu_fusion", True) and not _bool(a, "no_bias_swiglu_fusion"),
        defer_embedding_wgrad_compute=_bool(a, "defer_embedding_wgrad_compute"),
        wgrad_deferral_limit=_int(a, "wgrad_deferral_limit", 0) or 0,
        moe_token_dispatcher_type=_str(a, "moe_token_dispatcher_type", "allgather"),
        moe_expert_capacity_factor=_float(a, "moe_expert_capacity_factor", None),
        moe_pad_expert_input_to_capacity=_bool(a, "moe_pad_expert_input_to_capacity"),
        moe_router_dtype=_str(a, "moe_router_dtype", None),
        cpu_offloading=_bool(a, "cpu_offloading"),
        cpu_offloading_num_layers=_int(a, "cpu_offloading_num_layers", 0) or 0,
        fine_grained_offload_modules=offload_modules,
        num_layers_in_first_pipeline_stage=_int(a, "decoder_first_pipeline_num_layers"),
        num_layers_in_last_pipeline_stage=_int(a, "decoder_last_pipeline_num_layers"),
        account_for_embedding_in_pipeline_split=_bool(a, "account_for_embedding_in_pipeline_split"),
        account_for_loss_in_pipeline_split=_bool(a, "account_for_loss_in_pipeline_split"),
        stage_layers=stage_layers,
        microbatch_group_size_per_vp_stage=_int(a, "microbatch_group_size_per_virtual_pipeline_stage"),
        cuda_graph_scope=cuda_graph,
        cuda_graph_warmup_steps=_int(a, "cuda_graph_warmup_steps", 3),
        use_nccl_ub=_bool(a, "use_nccl_ub"),
        overlap_moe_expert_parallel_comm=_bool(a, "overlap_moe_expert_parallel_comm"),
        moe_shared_expert_overlap=_bool(a, "moe_shared_expert_overlap"),
        unmodelled=unmodelled_features(a),
    )
    if "attention_dropout" not in a or "hidden_dropout" not in a:
        assumptions.append("dropout defaults 0.1 (Megatron-LM) where not given")
    if _bool(a, "recompute_activations") and _flag(a, "recompute_granularity") is None:
        assumptions.append("--recompute-activations = selective recompute of core attention (Megatron-LM)")
    if _int(a, "global_batch_size") is None and run.gbs is not None:
        assumptions.append(f"global batch {run.gbs}: the largest step of --step-batch-size-schedule")
    if _flag(a, "rampup_batch_size") is not None:
        assumptions.append(
            f"--rampup-batch-size: the batch ramps up to --global-batch-size {run.gbs}; "
            "the estimate is for that final (largest) batch"
        )
    if _bool(a, "moe_layer_recompute"):  # deprecated spelling of the moe recompute module
        run = with_moe_layer_recompute(run, "--moe-layer-recompute")
    if run.use_megatron_fsdp and _flag(a, "data_parallel_sharding_strategy") is None:
        assumptions.append(
            unset_fsdp_strategy_note(
                "--data-parallel-sharding-strategy", megatron_lm_fsdp_default(mcore_version), mcore_version
            )
        )
    if _bool(a, "use_legacy_models"):
        assumptions.append(
            "WARNING: --use-legacy-models builds Megatron-LM's legacy GPT model, not Megatron-Core; "
            "the estimate is for the Megatron-Core model with the same flags"
        )
    guessed = _guess_warnings(a, assumed or {})
    assumptions[:0] = guessed
    if world_note:
        assumptions.insert(0, world_note)
    unmodelled = memory_flags_not_modelled(a)
    if zero_stage >= 2:
        unmodelled.append(
            (
                "zero_stage",
                f"ZeRO stage {zero_stage} also shards gradients{' and weights' if zero_stage >= 3 else ''} over DP; the estimate shards only the optimizer state (stage 1), so it is high",
            )
        )
    if ds_bf16_sharded:
        assumptions.append(
            "DeepSpeed bf16 at ZeRO stage 0 runs its BF16_Optimizer, which shards the fp32 master weights and "
            "optimizer state over data-parallel ranks like stage 1: modelled as the distributed optimizer"
        )
    if _flag(a, "deepspeed_config") is not None or _flag(a, "deepspeed_config_dict") is not None:
        assumptions.append(
            "DeepSpeed JSON config not read: its ZeRO stage and batch sizes count only when also given as flags "
            "(--zero-stage, --micro-batch-size, --global-batch-size)"
        )
    if unmodelled:
        assumptions.insert(
            0,
            "WARNING: flags that change memory are not modelled; the estimate is for the run without them: "
            + "; ".join(f"--{f.replace('_', '-')} ({why})" for f, why in unmodelled),
        )
    assumptions += ignored_flag_notes(ignored_flags(a))
    return model, run, assumptions


def unmodelled_features(a: Mapping[str, Any]) -> tuple[str, ...]:
    """Memory-relevant Megatron-LM features the estimator has no term for (it refuses them).

    Linear-attention variants replace softmax attention in most layers with a recurrent mixer
    (Gated DeltaNet: q/k/v/gate projections, a short convolution and a chunked delta-rule scan)
    whose saved tensors differ from attention's; estimating them as plain attention measured
    -70.9% on a Qwen3-Next run.
    """
    out: list[str] = []
    variant = _flag(a, "experimental_attention_variant")
    if variant is not None:
        out.append(f"attention variant {variant} (--experimental-attention-variant)")
    elif _flag(a, "linear_attention_freq") is not None:
        out.append("linear attention layers (--linear-attention-freq)")
    return tuple(out)


def _guess_warnings(a: _ReadFlags, assumed: Mapping[str, tuple[str, ...]]) -> list[str]:
    """WARNING lines for the flags the estimate read whose value was unresolved shell text
    (the default was used) or came from a reader's assumption (an unset variable's default,
    a branch the reader could not decide)."""
    out = [
        f"WARNING: --{name.replace('_', '-')} {text} is only known when the job runs; the estimate "
        "used Megatron's default - pass the real value (--tp, --pp, --mbs, --gbs, --seq-length ...)"
        for name, text in a.unresolved.items()
    ]
    notes: list[str] = []
    for flag, flag_notes in assumed.items():
        if normalize_flag(flag) in a.read and normalize_flag(flag) in a:
            notes.extend(f"{flag} {a[normalize_flag(flag)]}: {note}" for note in flag_notes)
    notes = list(dict.fromkeys(notes))
    if notes:
        shown = "; ".join(notes[:6]) + (f"; and {len(notes) - 6} more" if len(notes) > 6 else "")
        out.append(f"WARNING: values the estimate used were assumed while reading the script: {shown}")
    return out


class _ReadFlags(dict[str, Any]):
    """A flag mapping that remembers which flags were looked up, so the flags the estimator
    never read can be listed instead of silently dropped."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()
        self.unresolved: dict[str, str] = {}  # flag -> the shell text standing for its value

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)
