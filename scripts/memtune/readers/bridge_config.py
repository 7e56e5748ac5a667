"""Megatron Bridge ConfigContainer YAML -> ModelSpec and RunSpec.

A Bridge run config has sections ``model`` (the GPTModelProvider / TransformerConfig:
architecture *and* model parallelism, recompute, offloading, fp8), ``train``
(micro/global batch), ``optimizer`` (OptimizerConfig), ``ddp``
(DistributedDataParallelConfig), ``mixed_precision`` (a recipe name such as
``bf16_mixed`` or a mapping), ``peft`` (LoRA settings) and ``dataset`` (``seq_length``).
Field names are Megatron Bridge's own. Anything architectural the YAML leaves out can come
from a ``base`` ModelSpec (a preset or an HF config).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Any

from memtune.errors import InputError
from memtune.files.textfile import read_text, yaml_syntax_error
from memtune.readers.bridge_fields import (
    bool_field,
    config_section,
    float_field,
    int_field,
    is_placeholder,
    launch_only_error,
    module_names,
    names_local_spec,
    str_field,
)
from memtune.readers.bridge_nested import lift_transformer
from memtune.readers.bridge_unmodelled import unmodelled_model_fields
from memtune.spec.model_spec import ModelSpec, coerce_model_values, model_field_names
from memtune.spec.run_spec import (
    CANONICAL_LORA_DEFAULT_TARGETS,
    FSDP_UNSET_STRATEGY,
    LORA_DEFAULT_TARGETS,
    RunSpec,
    class_without_regather,
    normalize_dtype,
    peft_class_name,
    unset_fsdp_strategy_note,
    with_moe_layer_recompute,
)

SECTIONS = ("model", "train", "optimizer", "ddp", "mixed_precision", "peft", "dataset", "checkpoint", "logger")

# Bridge / TransformerConfig name -> ModelSpec name, where they differ.
_MODEL_ALIASES = {
    "moe_layer_freq": "moe_layer_pattern",
    # Megatron Bridge's MambaModelProvider (Nemotron-H) names
    "hybrid_override_pattern": "hybrid_layer_pattern",
    "share_embeddings_and_output_weights": None,  # handled below (inverse)
}

# ``model`` keys the run (not the architecture) is read from: a near miss of one is reported.
_RUN_MODEL_KEYS = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "seq_length",
    "recompute_granularity",
    "recompute_method",
    "recompute_num_layers",
    "recompute_modules",
    "cpu_offloading",
    "cpu_offloading_num_layers",
    "fine_grained_activation_offloading",
    "offload_modules",
    "pipeline_model_parallel_layout",
    "attention_backend",
    "cuda_graph_impl",
    "cuda_graph_scope",
    "cuda_graph_modules",
    "fp8",
    "fp8_recipe",
    "fp4",
)

# Mixed-precision recipe names -> (params dtype, fp8 recipe, grad_reduce_in_fp32, fp8_param_gather),
# as Megatron Bridge's recipe functions set them (src/megatron/bridge/training/mixed_precision.py):
# the BF16 FP8 recipes start from ``bf16_mixed()`` (grad_reduce_in_fp32=True); the delayed,
# current-scaling and MXFP8 recipes set ``fp8_param_gather = True`` (FP8 primary weights), the
# subchannel (blockwise) one ``False``.
_MP_RECIPES = {
    "bf16_mixed": ("bf16", None, True, False),
    "fp16_mixed": ("fp16", None, False, False),
    "bf16_with_fp8_delayed_scaling_mixed": ("bf16", "delayed", True, True),
    "bf16_with_fp8_current_scaling_mixed": ("bf16", "tensorwise", True, True),
    "bf16_with_mxfp8_mixed": ("bf16", "mxfp8", True, True),
    "bf16_with_fp8_subchannel_scaling_mixed": ("bf16", "blockwise", True, False),
}


# Megatron-Core enums a ConfigContainer dump writes as a call ``{_target_: ...AttnBackend, _call_: true,
# _args_: [5]}`` (megatron/core/transformer/enums.py): value -> member name.
_ENUM_CALLS = {"AttnBackend": {1: "flash", 2: "fused", 3: "unfused", 4: "local", 5: "auto"}}
_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")  # ${model.seq_length}; not ${oc.env:USER} (a resolver)


def plain_value(value: Any) -> Any:
    """A dumped object as the plain value it stands for, anything else unchanged.

    ``ConfigContainer.to_yaml()`` writes a non-YAML value as a mapping naming it: a torch dtype
    or function as ``{_target_: torch.bfloat16, _call_: false}`` (the name itself), an enum as
    ``{_target_: ...AttnBackend, _call_: true, _args_: [5]}`` (a call). Nothing is imported or
    called: the dtype becomes its dotted name, a known enum call its member name
    (``AttnBackend.auto``), and any other call stays a mapping (which no field accepts).
    """
    if not isinstance(value, Mapping) or "_target_" not in value:
        return value
    target = str(value["_target_"])
    rest = {k for k in value if k not in ("_target_", "_call_", "_args_")}
    if value.get("_call_") is False and not rest and not value.get("_args_"):
        return target
    members = _ENUM_CALLS.get(target.rsplit(".", 1)[-1])
    args = value.get("_args_")
    if value.get("_call_") and members and not rest and isinstance(args, list) and len(args) == 1:
        name = members.get(args[0]) if isinstance(args[0], int) else None
        if name is not None:
            return f"{target.rsplit('.', 1)[-1]}.{name}"
    return value


def resolve_reference(value: Any, lookup: Callable[[str], Any], depth: int = 8) -> Any:
    """``${a.b}`` references to other keys of the same file replaced by their values.

    OmegaConf-style files point one key at another (``dataset.sequence_length:
    ${model.seq_length}``); the run sees the target's value. Only plain dotted references
    are followed (``lookup`` returns None for a key the file lacks); resolvers such as
    ``${oc.env:USER}`` and launcher placeholders such as ``${TP}`` stay as written, so
    the field reading them can say it is only known at launch.
    """
    if not isinstance(value, str) or "${" not in value or depth <= 0:
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole:
        target = lookup(whole.group(1))
        return value if target is None else resolve_reference(target, lookup, depth - 1)

    def text(match: re.Match[str]) -> str:
        target = resolve_reference(lookup(match.group(1)), lookup, depth - 1)
        if target is None or isinstance(target, (Mapping, list)) or (isinstance(target, str) and "${" in target):
            return match.group(0)
        return str(target)

    return _REFERENCE.sub(text, value)


def _tidy(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with dumped objects made plain and in-file ``${a.b}`` references resolved."""

    def lookup(dotted: str) -> Any:
        node: Any = cfg
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return plain_value(node)

    def walk(node: Any) -> Any:
        node = plain_value(node)
        if isinstance(node, Mapping):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return resolve_reference(node, lookup)

    return {k: walk(v) for k, v in cfg.items()}


_PYTHON_TAG = re.compile(r"tag:yaml\.org,2002:(python/[^'\s]*)")


def python_tag(text: str) -> str | None:
    """``!!python/...`` when ``text`` (a node tag or PyYAML's complaint) names one, else None."""
    match = _PYTHON_TAG.search(text)
    return f"!!{match.group(1)}" if match else None


def python_tag_refusal(path: str | Path, line: int, tag: str, key: str | None = None) -> InputError:
    """The one line for a value that only Python code could build (``!!python/object:...``).

    Such a file is valid YAML (``yaml.dump`` of live objects writes it), but reading the value
    would mean importing and calling what the tag names; the helpers only use safe YAML.
    """
    return InputError(
        f"{path}:{line}: {key + ': ' if key else ''}{tag} asks YAML to build a Python object, which memtune never does; write the value "
        "plainly (torch.bfloat16 as bf16, an enum by its name) or save the config with ConfigContainer.to_yaml()"
    )


def parse_bridge_yaml(path: str | Path, parse: Callable[[str], Any]) -> Any:
    """A Megatron Bridge YAML file run through ``parse``, its failures as one-line InputErrors.

    Two readers need the file: for values (``yaml_guard.safe_load``) and for values with their
    lines (``yaml_guard.compose``, check_env's findings point at a line). Both must refuse the
    same files with the same words - a syntax error with its line, an alias bomb or oversized
    document as not a real config - so reading and refusing live here once; ``path`` is shown
    as given.
    """
    text = read_text(path, "a Megatron Bridge YAML config")
    import yaml  # lazy: --help must work without PyYAML

    from memtune.files import yaml_guard

    try:
        return parse(text)
    except yaml.constructor.ConstructorError as exc:
        tag = python_tag(str(exc.problem))
        if tag is None:
            raise yaml_syntax_error(path, exc) from None
        line = exc.problem_mark.line + 1 if exc.problem_mark else 0
        raise python_tag_refusal(path, line, tag) from None
    except yaml.YAMLError as exc:
        raise yaml_syntax_error(path, exc) from None
    except yaml_guard.YamlLimitError as exc:
        raise InputError(f"{path}: the YAML {exc}: not a Megatron Bridge config; pass the real config") from None


def load_bridge_yaml(path: str | Path) -> dict[str, Any]:
    from memtune.files import yaml_guard
    from memtune.readers.bridge_recipe import refuse_python_recipe

    p = Path(path)
    refuse_python_recipe(p)
    data = parse_bridge_yaml(p, yaml_guard.safe_load)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping with sections like model:, train:, optimizer:, ddp:")
    return lift_transformer(data)


_LINEAR_VARIANTS = ("gdn", "gdn2", "gated_delta_net")


def _refuse_linear_attention(model: Mapping[str, Any]) -> None:
    """A linear-attention hybrid (Gated DeltaNet layers, Qwen3-Next) is not modelled and an
    estimate of it as a transformer would be far off: refuse in one line, as the Megatron-args
    and HF-config readers do."""
    variant = str(model.get("experimental_attention_variant") or "").strip().lower()
    target = str(model.get("_target_") or "")
    found = None
    if variant in _LINEAR_VARIANTS:
        found = f"model.experimental_attention_variant {variant}"
    elif model.get("linear_attention_freq") not in (None, "", False):
        found = f"model.linear_attention_freq {model['linear_attention_freq']}"
    elif "Qwen3Next" in target:
        found = f"model._target_ {target}"
    if found:
        raise InputError(
            f"{found}: a linear-attention hybrid (Gated DeltaNet layers, as in Qwen3-Next) is not modelled and an "
            "estimate would be far off; no estimate is made - measure one step with torch.cuda.max_memory_allocated()"
        )


def model_from_bridge(model: Mapping[str, Any], base: ModelSpec | None = None) -> ModelSpec:
    """Architecture from the ``model`` section (on top of ``base`` when given)."""
    _refuse_linear_attention(model)
    known = set(model_field_names())
    values: dict[str, Any] = {}
    if base is not None:
        values.update({f.name: getattr(base, f.name) for f in dc_fields(base) if f.name != "extra"})
    for key, value in model.items():
        target = _MODEL_ALIASES.get(key, key)
        if target in known and value is not None:
            if is_placeholder(value):
                raise launch_only_error(f"model.{key}", value)
            values[target] = value
    if "share_embeddings_and_output_weights" in model and model["share_embeddings_and_output_weights"] is not None:
        values["untie_embeddings_and_output_weights"] = not bool_field(
            model, "share_embeddings_and_output_weights", "model"
        )
    if "padded_vocab_size" in model and "vocab_size" not in values:
        values["vocab_size"] = model["padded_vocab_size"]
    act = str(model.get("activation_func", "")).lower()
    if "squared_relu" in act or "relu2" in act:
        values["gated_linear_unit"] = False
        values["activation"] = "squared_relu"
    missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size") if values.get(k) is None]
    if missing:
        raise InputError(
            f"config model section is missing {', '.join('model.' + m for m in missing)} "
            "(add them, or pass --preset / --hf-config for the architecture)"
        )
    try:
        values = coerce_model_values({k: v for k, v in values.items() if k != "moe_layer_pattern"}, "model") | {
            "moe_layer_pattern": values.get("moe_layer_pattern")
        }
    except ValueError as exc:
        raise InputError(str(exc)) from None
    pattern = values.get("moe_layer_pattern")
    if pattern is not None:
        from memtune.readers.megatron_layout import parse_layer_pattern

        values["moe_layer_pattern"] = parse_layer_pattern(pattern, values["num_layers"])
    return ModelSpec(**values)


def _precision_over_ddp(
    mp: Mapping[str, Any],
    ddp: Mapping[str, Any],
    model_s: Mapping[str, Any],
    recipe_grad_fp32: bool,
    recipe_param_gather: bool,
) -> tuple[bool, bool]:
    """(grad_reduce_in_fp32, fp8_param_gather) as the run will use them.

    Megatron Bridge applies the mixed-precision config last: ``runtime_config_update`` calls
    ``cfg.mixed_precision.setup(cfg.model, cfg.optimizer, cfg.ddp)`` (training/config.py), and
    ``update_config_with_precision_overrides`` copies every MixedPrecisionConfig field the target
    also has onto it (training/mixed_precision.py). So when a ``mixed_precision`` section exists,
    its value - the field written there, else the named recipe's, else the dataclass default
    (``grad_reduce_in_fp32 = True``, ``fp8_param_gather = False``; ``fp8_param`` is kept in sync
    with it) - replaces whatever ``ddp`` says. Only without one do the DDP fields stand.
    """
    if mp:
        grad = bool_field(mp, "grad_reduce_in_fp32", "mixed_precision", recipe_grad_fp32)
        key = "fp8_param_gather" if "fp8_param_gather" in mp else "fp8_param"
        gather = bool_field(mp, key, "mixed_precision", recipe_param_gather)
        return grad, bool(gather)
    grad = bool_field(ddp, "grad_reduce_in_fp32", "ddp", recipe_grad_fp32)
    gather = any(bool_field(sec, "fp8_param_gather", name, False) for sec, name in ((model_s, "model"), (ddp, "ddp")))
    # TransformerConfig.fp8_param keeps the GEMM weights in fp8: Megatron-LM sets it from
    # --fp8-param-gather, Bridge's mixed-precision setup keeps the two in sync
    return grad, gather or bool_field(model_s, "fp8_param", "model", False)


def _layer_spec_target(model_s: Mapping[str, Any]) -> str:
    """The function a dumped ``model.transformer_layer_spec`` names (``{_target_: ...}``), or ''."""
    spec = model_s.get("transformer_layer_spec")
    target = spec.get("_target_") if isinstance(spec, Mapping) else spec
    return target if isinstance(target, str) else ""


def _sequence_length(model_s: Mapping[str, Any], dataset: Mapping[str, Any], assumptions: list[str]) -> tuple[str, Any]:
    """(key it came from, value) of the tokens per sample the run trains on.

    The data loader decides the activations' length: the dataset's ``seq_length``
    (finetuning configs) or ``sequence_length`` (GPTDatasetConfig), before ``model.seq_length``
    (a provider built from an HF config keeps the model's maximum, 131072 for Llama 3.1/3.2,
    while the run trains on 1024-token samples). When both are given and differ, say so:
    Bridge's own validation refuses that pairing for GPT and finetuning datasets.
    """
    data = [(f"dataset.{key}", dataset[key]) for key in ("seq_length", "sequence_length") if dataset.get(key)]
    model = [("model.seq_length", model_s["seq_length"])] if model_s.get("seq_length") else []
    if not data and not model:
        assumptions.append("seq_length not given: assumed 4096")
        return "seq_length", 4096
    where, value = (data or model)[0]
    if data and model and str(model[0][1]) != str(value):
        assumptions.append(
            f"WARNING: model.seq_length {model[0][1]} and {where} {value} differ: estimated with the data's {value} "
            "tokens per sample (recent Megatron Bridge releases refuse the mismatch for GPT/finetuning datasets; make them equal)"
        )
    return where, value


def _misspelt_model_keys(model_s: Mapping[str, Any], forced: frozenset[str] = frozenset()) -> list[str]:
    """A note per ``model`` key that misspells a field the reader uses (``sequence_parallelism``).

    A full dump holds a few hundred provider fields the estimator does not need, so unknown
    keys in general are not reported; but one a letter or a word away from a field it does
    read would otherwise be dropped while the run the user meant has the field set.
    """
    from memtune.spec.overrides import typo_of

    used = set(model_field_names()) | set(_MODEL_ALIASES) | set(_RUN_MODEL_KEYS)
    notes: list[str] = []
    for key in model_s:
        if f"model.{key}" in forced or key in used or str(key).startswith("_"):
            continue
        near = sorted(name for name in used if typo_of(str(key), name))
        if near:
            raise InputError(
                f"model.{key} is not a Megatron Bridge field (did you mean model.{near[0]}?); Bridge refuses "
                "an unknown key (or the run trains without the setting meant): fix the key"
            )
    return notes


def _refuse_misspelt_sections(cfg: Mapping[str, Any], forced: frozenset[str] = frozenset()) -> None:
    """Raise InputError for a key outside ``model`` that misspells a field of its section
    (``train.micro_batch_sizes``), as check_env's MT025 reports it."""
    from memtune.readers.run_view import misspelt_config_keys

    flat: dict[str, tuple[Any, str, str]] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(value, dotted + ".")
            else:
                flat[dotted] = (value, "config", f"{dotted}: ")

    walk({k: v for k, v in cfg.items() if k != "model"}, "")
    for key, meant, _ in misspelt_config_keys(flat):
        if key in forced:
            continue
        raise InputError(
            f"{key} is not a Megatron Bridge field (did you mean {meant}?); Bridge refuses an unknown key "
            "(or the run trains without the setting meant): fix the key"
        )


def specs_from_bridge(
    cfg: Mapping[str, Any],
    world_size: int | None = None,
    base: ModelSpec | None = None,
    forced: frozenset[str] = frozenset(),
) -> tuple[ModelSpec, RunSpec, list[str]]:
    """(ModelSpec, RunSpec, assumptions) from a ConfigContainer mapping. A key that misspells a
    field of its section is refused (as Bridge refuses it) unless ``forced`` names it (a
    ``+key=`` / ``++key=`` override: the user added it on purpose)."""
    assumptions: list[str] = []
    cfg = _tidy(lift_transformer(cfg))
    unknown = [k for k in cfg if k not in SECTIONS and not str(k).startswith("_")]
    model_s = config_section(cfg, "model")
    if not model_s and base is None and unknown:
        if "perf_matrix" in cfg:
            raise InputError(
                "config is a Megatron Bridge perf-script file (ConfigContainer: overrides plus a perf_matrix: of "
                "layouts per GPU type and count), not one run; pass the run's own config (config.yaml / "
                "run_config.yaml) or --preset with the layout's flags"
            )
        raise InputError(f"config has no model section (top-level keys: {', '.join(map(str, unknown[:6]))})")
    # the layout first: a launcher placeholder there (${TP}) is the first thing to fill in
    tp = int_field(model_s, "tensor_model_parallel_size", "model", 1)
    pp = int_field(model_s, "pipeline_model_parallel_size", "model", 1)
    cp = int_field(model_s, "context_parallel_size", "model", 1)
    train = config_section(cfg, "train")
    optim = config_section(cfg, "optimizer")
    ddp = config_section(cfg, "ddp")
    fsdp = bool_field(ddp, "use_megatron_fsdp", "ddp") or bool_field(
        config_section(cfg, "dist"), "use_megatron_fsdp", "dist"
    )
    if bool_field(optim, "optimizer_cpu_offload", "optimizer") and optim.get("optimizer_offload_fraction") is None:
        assumptions.append(
            "optimizer.optimizer_offload_fraction not given: 0.0, the config class's default, so nothing is "
            "offloaded (Megatron-LM's --optimizer-offload-fraction defaults to 1.0); set the share to move"
        )
    # Bridge's Megatron-FSDP v2 path sets optim_grads_params itself (ConfigContainer.validate);
    # v1, the default, keeps the DDP config's value, whose default is no_shard
    fsdp_strategy = str_field(ddp, "data_parallel_sharding_strategy", "ddp", FSDP_UNSET_STRATEGY)
    if fsdp and int_field(ddp, "megatron_fsdp_version", "ddp", 1) == 2:
        fsdp_strategy = "optim_grads_params"
    elif fsdp and ddp.get("data_parallel_sharding_strategy") is None:
        assumptions.append(unset_fsdp_strategy_note("ddp.data_parallel_sharding_strategy", FSDP_UNSET_STRATEGY))
    mp = config_section(cfg, "mixed_precision")
    peft = config_section(cfg, "peft")
    dataset = config_section(cfg, "dataset")
    comm = config_section(cfg, "comm_overlap")
    model = model_from_bridge(model_s, base)
    assumptions.extend(_misspelt_model_keys(model_s, forced))
    assumptions.extend(unmodelled_model_fields(model_s, comm, mp))
    _refuse_misspelt_sections(cfg, forced)

    ep_size = int_field(model_s, "expert_model_parallel_size", "model", 1)
    etp_size = int_field(model_s, "expert_tensor_parallel_size", "model")
    if etp_size is None and ep_size > 1 and model.is_moe:
        # Megatron Bridge's finalize() sets an unset ETP to 1 when EP > 1
        # (_set_moe_expert_tensor_parallel_default); Megatron-Core alone would make it TP.
        etp_size = 1
        if tp > 1:
            assumptions.append(
                f"model.expert_tensor_parallel_size not given: 1, as Megatron Bridge sets it when EP > 1 "
                f"(Megatron-Core alone, and older Bridge releases, make it TP = {tp})"
            )
    if world_size is None:
        from memtune.spec.run_spec import assumed_world_note, smallest_world

        world_size = smallest_world(tp, pp, cp, ep_size, etp_size, moe=model.is_moe)
        assumptions.insert(0, assumed_world_note(world_size, tp, pp, cp, ep_size, etp_size))

    params_dtype, fp8, grad_fp32, recipe_param_gather = "bf16", None, True, False
    if "_name" in mp:
        name = str(mp["_name"])
        if name not in _MP_RECIPES:
            raise InputError(f"mixed_precision {name!r} unknown; known: {', '.join(_MP_RECIPES)}")
        params_dtype, fp8, grad_fp32, recipe_param_gather = _MP_RECIPES[name]
    else:
        if mp.get("fp16") or model_s.get("fp16"):
            params_dtype = "fp16"
        elif mp.get("bf16") is False and model_s.get("bf16") is False:
            params_dtype = "fp32"
        elif not mp and model_s.get("bf16") is None:
            assumptions.append(
                "no mixed_precision section and no model.bf16: assumed bf16 (Bridge's recipes set bf16_mixed); "
                "a ConfigContainer without a mixed-precision setting trains in fp32, about twice the weights and "
                "activations"
            )
        if mp.get("fp8") or model_s.get("fp8"):
            fp8 = str(mp.get("fp8_recipe") or model_s.get("fp8_recipe") or "delayed")
    grad_fp32, param_gather = _precision_over_ddp(mp, ddp, model_s, grad_fp32, recipe_param_gather)
    for where, section in (("mixed_precision", mp), ("model", model_s)):
        if section.get("fp4"):
            # NVFP4 GEMMs keep FP4 copies of weights and inputs; the estimator has no FP4 model
            recipe = section.get("fp4_recipe") or "nvfp4"
            assumptions.append(
                f"WARNING: {where}.fp4 {section['fp4']} ({recipe} recipe) is not modelled: weights and activations "
                f"are estimated as {fp8 or params_dtype} (FP4 copies and scales are not counted)"
            )
            break

    peft_kind = None
    lora_dim, regather = 32, False
    targets: tuple[str, ...] = LORA_DEFAULT_TARGETS
    if peft:
        target = peft_class_name(str(peft.get("_target_", peft.get("_name", "lora"))))
        peft_kind = "dora" if target.endswith("dora") else "lora"
        lora_dim = int_field(peft, "dim", "peft", 32)
        canonical = "canonical" in target
        targets = module_names(peft.get("target_modules"), "peft.target_modules") or (
            CANONICAL_LORA_DEFAULT_TARGETS if canonical else LORA_DEFAULT_TARGETS
        )
        regather = bool_field(peft, "sequence_parallel_input_regather", "peft", False)
        lacking = class_without_regather(peft_kind, canonical)
        if regather and lacking:
            # Bridge drops a key its PEFT class does not have (with a warning; a CLI override of it
            # is refused), so the run keeps the gathered inputs.
            assumptions.append(
                f"WARNING: peft.sequence_parallel_input_regather is set but {lacking} has no such field (only "
                "LoRA has it): Megatron Bridge drops the key from a config file and refuses it as a command-line "
                "override; estimated without re-gather"
            )
            regather = False

    seq_where, seq = _sequence_length(model_s, dataset, assumptions)
    if model.gated_linear_unit and model_s.get("bias_activation_fusion") is None:
        # TransformerConfig defaults it off; LlamaBridge, GptOssBridge, DeepSeek bridges turn it on,
        # the Qwen3 bridges do not. Saved config.yaml files carry the value.
        assumptions.append(
            "model.bias_activation_fusion not given: assumed True (fused SwiGLU); with it off (Megatron-Core's "
            "default, e.g. Bridge's Qwen3 providers) each gated MLP keeps two more FFN-wide tensors per token"
        )
    if train.get("micro_batch_size") is None:
        # Activations scale with it: say so rather than assume silently (PEFT tables often omit it).
        assumptions.append("train.micro_batch_size not given: assumed 1 (activations scale with it); pass --mbs")
    cuda_graph: tuple[str, ...] = ()
    if model_s.get("enable_cuda_graph") or (model_s.get("cuda_graph_impl") not in (None, "none")):
        # cuda_graph_modules is Megatron-Core's newer name for the scope (an empty list: whole layers)
        cuda_graph = (
            module_names(model_s.get("cuda_graph_scope"), "model.cuda_graph_scope")
            or module_names(model_s.get("cuda_graph_modules"), "model.cuda_graph_modules")
            or ("full",)
        )
    vpp = model_s.get("virtual_pipeline_model_parallel_size")
    stage_layers = None
    layout = model_s.get("pipeline_model_parallel_layout")
    if isinstance(layout, str) and layout:
        from memtune.readers.megatron_layout import parse_pipeline_layout

        stage_layers, vpp = parse_pipeline_layout(layout, pp)

    def overlap_switch(key: str) -> bool:
        """CommOverlapConfig copies these onto the model config (comm_overlap.py): either may carry them."""
        return bool_field(comm, key, "comm_overlap", bool_field(model_s, key, "model", False))

    run = RunSpec(
        world_size=int(world_size),
        tp=tp,
        pp=pp,
        vpp=int_field(
            {"model.virtual_pipeline_model_parallel_size": vpp}, "model.virtual_pipeline_model_parallel_size", ""
        ),
        cp=cp,
        ep=ep_size,
        etp=etp_size,
        mbs=int_field(train, "micro_batch_size", "train", 1),
        gbs=int_field(train, "global_batch_size", "train"),
        seq_length=int_field({seq_where: seq}, seq_where, "", 4096),  # seq is set by now: the 4096 is never used
        sequence_parallel=bool_field(model_s, "sequence_parallel", "model", False),
        params_dtype=params_dtype,
        fp8=fp8,
        # Megatron-Core refuses fp8 weights without fp8 GEMMs ("fp8_param must be used together with fp8 mode")
        fp8_param_gather=param_gather and fp8 is not None,
        grad_reduce_in_fp32=grad_fp32,
        optimizer=str_field(optim, "optimizer", "optimizer", "adam"),
        # ConfigContainer.validate(): either section's flag turns the distributed optimizer on for
        # both, and Megatron-FSDP (ddp or dist) turns it on too
        use_distributed_optimizer=fsdp
        or bool_field(ddp, "use_distributed_optimizer", "ddp")
        or bool_field(optim, "use_distributed_optimizer", "optimizer"),
        num_distributed_optimizer_instances=int_field(ddp, "num_distributed_optimizer_instances", "ddp", 1),
        use_precision_aware_optimizer=bool_field(optim, "use_precision_aware_optimizer", "optimizer", False),
        main_params_dtype=normalize_dtype(optim.get("main_params_dtype", "fp32")),
        exp_avg_dtype=normalize_dtype(optim.get("exp_avg_dtype", "fp32")),
        exp_avg_sq_dtype=normalize_dtype(optim.get("exp_avg_sq_dtype", "fp32")),
        optimizer_cpu_offload=bool_field(optim, "optimizer_cpu_offload", "optimizer", False),
        optimizer_offload_fraction=float_field(optim, "optimizer_offload_fraction", "optimizer", 0.0),
        use_megatron_fsdp=fsdp,
        data_parallel_sharding_strategy=fsdp_strategy,
        overlap_grad_reduce=bool_field(ddp, "overlap_grad_reduce", "ddp", False),
        overlap_param_gather=bool_field(ddp, "overlap_param_gather", "ddp", False),
        recompute_granularity=str_field(model_s, "recompute_granularity", "model", None),
        recompute_method=str_field(model_s, "recompute_method", "model", None),
        recompute_num_layers=int_field(model_s, "recompute_num_layers", "model"),
        # Megatron-Core's default [core_attn] applies only when the field is unset: an explicit
        # empty list (a no-recompute control under selective granularity) stays empty.
        recompute_modules=(
            ("core_attn",)
            if model_s.get("recompute_modules") is None
            else module_names(model_s.get("recompute_modules"), "model.recompute_modules")
        ),
        attention_backend=(str_field(model_s, "attention_backend", "model", "auto") or "auto").split(".")[-1],
        attention_dropout=float_field(model_s, "attention_dropout", "model", 0.0),
        hidden_dropout=float_field(model_s, "hidden_dropout", "model", 0.0),
        # Megatron Bridge's GPTModelProvider (and MambaModelProvider) default to the fused loss.
        cross_entropy_loss_fusion=bool_field(model_s, "cross_entropy_loss_fusion", "model", True),
        cross_entropy_fusion_impl=str_field(model_s, "cross_entropy_fusion_impl", "model", "native"),
        bias_activation_fusion=bool_field(model_s, "bias_activation_fusion", "model", True),
        # Bridge's GPTModelProvider overrides Megatron-Core's True with False (gpt_provider.py,
        # ``attention_softmax_in_fp32: bool = False``); saved configs write the value out.
        attention_softmax_in_fp32=bool_field(model_s, "attention_softmax_in_fp32", "model", False),
        # Bridge picks the layer spec with the provider's transformer_layer_spec, not transformer_impl
        transformer_impl="local" if names_local_spec(_layer_spec_target(model_s)) else "transformer_engine",
        defer_embedding_wgrad_compute=overlap_switch("defer_embedding_wgrad_compute"),
        wgrad_deferral_limit=int_field(
            comm, "wgrad_deferral_limit", "comm_overlap", int_field(model_s, "wgrad_deferral_limit", "model", 0)
        ),
        moe_token_dispatcher_type=str_field(model_s, "moe_token_dispatcher_type", "model", "alltoall"),
        moe_expert_capacity_factor=float_field(model_s, "moe_expert_capacity_factor", "model", 0.0) or None,
        moe_pad_expert_input_to_capacity=bool_field(model_s, "moe_pad_expert_input_to_capacity", "model", False),
        moe_router_dtype=str_field(model_s, "moe_router_dtype", "model", None),
        cpu_offloading=bool_field(model_s, "cpu_offloading", "model", False),
        cpu_offloading_num_layers=int_field(model_s, "cpu_offloading_num_layers", "model", 0),
        cpu_offloading_activations=bool_field(model_s, "cpu_offloading_activations", "model", True),
        cpu_offloading_weights=bool_field(model_s, "cpu_offloading_weights", "model", False),
        fine_grained_offload_modules=(
            module_names(model_s.get("offload_modules"), "model.offload_modules")
            if bool_field(model_s, "fine_grained_activation_offloading", "model", False)
            else ()
        ),
        num_layers_in_first_pipeline_stage=int_field(model_s, "num_layers_in_first_pipeline_stage", "model"),
        num_layers_in_last_pipeline_stage=int_field(model_s, "num_layers_in_last_pipeline_stage", "model"),
        account_for_embedding_in_pipeline_split=bool_field(
            model_s, "account_for_embedding_in_pipeline_split", "model", False
        ),
        account_for_loss_in_pipeline_split=bool_field(model_s, "account_for_loss_in_pipeline_split", "model", False),
        stage_layers=stage_layers,
        microbatch_group_size_per_vp_stage=int_field(model_s, "microbatch_group_size_per_vp_stage", "model"),
        peft=peft_kind,
        lora_dim=lora_dim,
        lora_target_modules=targets,
        sequence_parallel_input_regather=regather,
        cuda_graph_scope=cuda_graph,
        cuda_graph_warmup_steps=int_field(model_s, "cuda_graph_warmup_steps", "model", 3),
        use_nccl_ub=bool_field(ddp, "nccl_ub", "ddp", False),
        overlap_moe_expert_parallel_comm=overlap_switch("overlap_moe_expert_parallel_comm"),
        moe_shared_expert_overlap=bool_field(model_s, "moe_shared_expert_overlap", "model", False),
        # Bridge's MoE providers choose it per model; a config that does not say is left unknown.
        moe_grouped_gemm=(
            None if model_s.get("moe_grouped_gemm") is None else bool_field(model_s, "moe_grouped_gemm", "model", False)
        ),
    )
    if bool_field(model_s, "moe_layer_recompute", "model", False):  # deprecated spelling of the moe module
        run = with_moe_layer_recompute(run, "model.moe_layer_recompute")
    return model, run, assumptions
