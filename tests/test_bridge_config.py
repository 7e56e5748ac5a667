"""Megatron Bridge ConfigContainer YAML (real field names) -> specs."""

from __future__ import annotations

import pytest

from memtune.errors import InputError
from memtune.files.paths import DATA_DIR
from memtune.readers.bridge_config import load_bridge_yaml, specs_from_bridge
from memtune.spec.overrides import apply_overrides
from memtune.spec.presets import load_preset

EXAMPLE = DATA_DIR / "examples" / "llama3-70b-sft-32gpu.yaml"


def test_example_config_maps_every_section():
    cfg = load_bridge_yaml(EXAMPLE)
    cfg.pop("_memtune")
    model, run, _ = specs_from_bridge(cfg, world_size=32, base=load_preset("llama3-70b"))
    assert (run.tp, run.pp, run.vpp, run.cp, run.dp) == (4, 4, 5, 1, 2)
    assert run.sequence_parallel and run.use_distributed_optimizer and not run.grad_reduce_in_fp32
    assert run.recompute_granularity == "selective" and run.recompute_modules == ("core_attn",)
    assert run.fp8 == "tensorwise" and run.cuda_graph_scope == ("mlp",)
    assert run.mbs == 1 and run.gbs == 32 and run.seq_length == 4096 and model.num_layers == 80


def test_overrides_change_the_run():
    cfg = apply_overrides(
        load_bridge_yaml(EXAMPLE),
        ["model.pipeline_model_parallel_size=8", "+peft.dim=16", "++peft.sequence_parallel_input_regather=true"],
    )
    cfg.pop("_memtune")
    _, run, _ = specs_from_bridge(cfg, world_size=32, base=load_preset("llama3-70b"))
    assert run.pp == 8 and run.dp == 1 and run.peft == "lora" and run.lora_dim == 16
    assert run.sequence_parallel_input_regather


def test_missing_model_fields_named():
    with pytest.raises(InputError, match="model.num_layers, model.hidden_size"):
        specs_from_bridge({"model": {"num_attention_heads": 8, "vocab_size": 100}})


def test_bad_types_and_yaml(tmp_path):
    with pytest.raises(InputError, match="train.micro_batch_size"):
        specs_from_bridge({"train": {"micro_batch_size": "two"}}, base=load_preset("llama3-8b"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {tensor_model_parallel_size: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_bridge_yaml(bad)
    with pytest.raises(InputError, match="mixed_precision 'bf17'"):
        specs_from_bridge({"mixed_precision": "bf17"}, base=load_preset("llama3-8b"))


@pytest.mark.parametrize(
    "recipe, fp8, param_gather",
    [
        ("bf16_with_fp8_current_scaling_mixed", "tensorwise", True),
        ("bf16_with_fp8_delayed_scaling_mixed", "delayed", True),
        ("bf16_with_mxfp8_mixed", "mxfp8", True),
        ("bf16_with_fp8_subchannel_scaling_mixed", "blockwise", False),
        ("bf16_mixed", None, False),
    ],
)
def test_named_precision_recipes_follow_bridge(recipe, fp8, param_gather):
    """mixed_precision.py in Megatron Bridge: the FP8 recipes start from bf16_mixed()
    (grad_reduce_in_fp32=True) and all but subchannel set fp8_param_gather=True."""
    cfg = {"model": {"tensor_model_parallel_size": 1}, "mixed_precision": recipe}
    _, run, _ = specs_from_bridge(cfg, world_size=8, base=load_preset("llama3-8b"))
    assert (run.fp8, run.fp8_param_gather, run.grad_reduce_in_fp32) == (fp8, param_gather, True)
    # a field written in the mixed-precision section wins over the recipe
    cfg["mixed_precision"] = {"_name": recipe, "fp8_param_gather": False, "grad_reduce_in_fp32": False}
    _, run, _ = specs_from_bridge(cfg, world_size=8, base=load_preset("llama3-8b"))
    assert not run.fp8_param_gather and not run.grad_reduce_in_fp32


def test_mixed_precision_overwrites_ddp_as_bridge_setup_does():
    """Bridge's runtime_config_update runs ``cfg.mixed_precision.setup(cfg.model, cfg.optimizer,
    cfg.ddp)``, which copies each MixedPrecisionConfig field onto the DDP config: a ddp value
    that disagrees with the mixed-precision one is overwritten, not obeyed."""
    base = load_preset("llama3-8b")
    ddp_says_bf16 = {"grad_reduce_in_fp32": False, "fp8_param_gather": True}
    for mp in ("bf16_mixed", {"_name": "bf16_mixed"}, {"bf16": True}):
        cfg = {"model": {}, "ddp": ddp_says_bf16, "mixed_precision": mp}
        _, run, _ = specs_from_bridge(cfg, world_size=8, base=base)
        assert run.grad_reduce_in_fp32 and not run.fp8_param_gather, mp
    # fp8_param is kept in sync with fp8_param_gather by MixedPrecisionConfig.__setattr__
    cfg = {"model": {}, "mixed_precision": {"_name": "bf16_with_fp8_current_scaling_mixed", "fp8_param": False}}
    assert not specs_from_bridge(cfg, world_size=8, base=base)[1].fp8_param_gather
    # the Llama3-70B perf recipe writes grad_reduce_in_fp32 = False on both configs
    cfg = {
        "model": {},
        "ddp": {"grad_reduce_in_fp32": False},
        "mixed_precision": {"_name": "bf16_with_fp8_current_scaling_mixed", "grad_reduce_in_fp32": False},
    }
    assert not specs_from_bridge(cfg, world_size=8, base=base)[1].grad_reduce_in_fp32
    # without a mixed-precision section nothing overwrites the DDP config
    _, run, _ = specs_from_bridge({"model": {"fp8": "hybrid"}, "ddp": ddp_says_bf16}, world_size=8, base=base)
    assert not run.grad_reduce_in_fp32 and run.fp8_param_gather
    # fp8 weights need fp8 GEMMs (Megatron-Core: "fp8_param must be used together with fp8 mode")
    _, run, _ = specs_from_bridge({"model": {}, "ddp": ddp_says_bf16}, world_size=8, base=base)
    assert not run.fp8_param_gather


def test_bridge_defaults_fused_loss_reads_deferred_wgrad_and_names_the_assumed_micro_batch():
    _, run, notes = specs_from_bridge({"model": {}}, world_size=8, base=load_preset("llama3-8b"))
    assert run.cross_entropy_loss_fusion  # GPTModelProvider: cross_entropy_loss_fusion = True
    assert not run.defer_embedding_wgrad_compute
    assert any("micro_batch_size not given: assumed 1" in n for n in notes)
    cfg = {
        "model": {"cross_entropy_loss_fusion": False},
        "train": {"micro_batch_size": 2},
        "comm_overlap": {"defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 22},
    }
    _, run, notes = specs_from_bridge(cfg, world_size=8, base=load_preset("llama3-8b"))
    assert not run.cross_entropy_loss_fusion and run.mbs == 2
    assert run.defer_embedding_wgrad_compute and run.wgrad_deferral_limit == 22
    assert not any("micro_batch_size" in n for n in notes)


def test_glu_fusion_and_cross_entropy_kernel_are_read():
    qwen = load_preset("qwen3-8b")
    _, run, notes = specs_from_bridge({"model": {}}, world_size=8, base=qwen)
    assert run.bias_activation_fusion and run.cross_entropy_fusion_impl == "native"
    assert any("bias_activation_fusion not given: assumed True" in n for n in notes)
    cfg = {"model": {"bias_activation_fusion": False, "cross_entropy_fusion_impl": "te"}}
    _, run, notes = specs_from_bridge(cfg, world_size=8, base=qwen)
    assert not run.bias_activation_fusion and run.cross_entropy_fusion_impl == "te"
    assert not any("bias_activation_fusion" in n for n in notes)
    with pytest.raises(InputError, match="cross_entropy_fusion_impl must be one of"):
        from memtune.spec.run_spec import validate

        validate(qwen, specs_from_bridge({"model": {"cross_entropy_fusion_impl": "fast"}}, 8, qwen)[1])


@pytest.mark.parametrize(
    ("model_keys", "etp", "noted"),
    [
        ({"tensor_model_parallel_size": 4, "expert_model_parallel_size": 4}, 1, True),  # Bridge's own default
        ({"tensor_model_parallel_size": 1, "expert_model_parallel_size": 8}, 1, False),  # same as TP: nothing to say
        (
            {"tensor_model_parallel_size": 4, "expert_model_parallel_size": 4, "expert_tensor_parallel_size": 2},
            2,
            False,
        ),
        ({"tensor_model_parallel_size": 4, "expert_model_parallel_size": 1}, None, False),  # EP 1: follows TP
    ],
)
def test_unset_expert_tp_is_one_with_ep_as_bridge_finalize_sets_it(model_keys, etp, noted):
    """Megatron Bridge's finalize() sets an unset expert_tensor_parallel_size to 1 when EP > 1;
    Megatron-Core alone would make it TP, which changes the expert shards and the GPU grid."""
    _, run, notes = specs_from_bridge({"model": model_keys}, world_size=16, base=load_preset("qwen3-30b-a3b"))
    assert run.etp == etp
    assert any("expert_tensor_parallel_size not given: 1" in n for n in notes) is noted


@pytest.mark.parametrize(
    ("sections", "fsdp", "dist_opt"),
    [
        ({"dist": {"use_megatron_fsdp": True}}, True, True),  # validate() copies dist's switch to ddp
        ({"ddp": {"use_megatron_fsdp": True, "use_distributed_optimizer": False}}, True, True),  # FSDP forces it
        ({"ddp": {"use_distributed_optimizer": False}, "optimizer": {"use_distributed_optimizer": True}}, False, True),
        ({"ddp": {"use_distributed_optimizer": True}, "optimizer": {"use_distributed_optimizer": False}}, False, True),
        (
            {"ddp": {"use_distributed_optimizer": False}, "optimizer": {"use_distributed_optimizer": False}},
            False,
            False,
        ),
    ],
)
def test_fsdp_and_distributed_optimizer_are_read_as_bridge_validate_syncs_them(sections, fsdp, dist_opt):
    """ConfigContainer.validate(): Megatron-FSDP in dist or ddp turns on both and the distributed
    optimizer; the distributed optimizer is on when either ddp or optimizer says so."""
    _, run, _ = specs_from_bridge({"model": {}, **sections}, world_size=8, base=load_preset("llama3-8b"))
    assert (run.use_megatron_fsdp, run.use_distributed_optimizer) == (fsdp, dist_opt)


def test_optimizer_offload_fraction_defaults_to_the_config_class_zero():
    """OptimizerConfig's optimizer_offload_fraction defaults to 0.0 (Megatron-LM's flag to 1.0):
    switching CPU offload on without a fraction moves nothing, and the estimate says so."""
    base = load_preset("llama3-8b")
    _, run, notes = specs_from_bridge({"model": {}, "optimizer": {"optimizer_cpu_offload": True}}, 8, base)
    assert run.optimizer_cpu_offload and run.optimizer_offload_fraction == 0.0
    assert any("optimizer_offload_fraction not given: 0.0" in n for n in notes)
    cfg = {"model": {}, "optimizer": {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}}
    _, run, notes = specs_from_bridge(cfg, 8, base)
    assert run.optimizer_offload_fraction == 0.5 and not any("offload_fraction" in n for n in notes)


@pytest.mark.parametrize("helper", ["estimate_memory", "check_env"])
def test_python_tags_are_refused_as_code_not_as_bad_syntax(tmp_path, invoke, helper):
    # yaml.dump of live objects writes these; reading them would import and call the tag's target
    path = tmp_path / "dump.yaml"
    path.write_text("model:\n  num_layers: 2\n  params_dtype: !!python/name:torch.bfloat16 ''\n")
    result = invoke(helper, "--config", str(path))
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert f"{path}:3:" in line and "!!python/name:torch.bfloat16" in line and "never" in line
    assert "syntax" not in line and "recursive" not in line


def test_a_config_with_no_precision_setting_says_bf16_is_assumed():
    """Without a mixed_precision section Bridge applies none (the model stays fp32); a config excerpt
    is read as bf16, Bridge's recipes' choice, and the estimate says so."""
    base = load_preset("llama3-8b")
    note = "no mixed_precision section and no model.bf16: assumed bf16"
    _, run, notes = specs_from_bridge({"model": {}}, 8, base)
    assert run.params_dtype == "bf16" and any(note in n for n in notes)
    for cfg in ({"model": {}, "mixed_precision": "bf16_mixed"}, {"model": {"bf16": True}}):
        _, run, notes = specs_from_bridge(cfg, 8, base)
        assert run.params_dtype == "bf16" and not any(note in n for n in notes)


@pytest.mark.parametrize(
    ("graph_keys", "scope"),
    [
        ({"cuda_graph_scope": ["attn"]}, ("attn",)),
        ({"cuda_graph_modules": ["attn", "moe_router"]}, ("attn", "moe_router")),  # Megatron-Core's newer name
        ({"cuda_graph_modules": []}, ("full",)),  # empty: whole layers
        ({}, ("full",)),
    ],
)
def test_cuda_graph_scope_is_read_under_either_name(graph_keys, scope):
    cfg = {"model": {"cuda_graph_impl": "transformer_engine", **graph_keys}}
    _, run, _ = specs_from_bridge(cfg, 8, load_preset("llama3-8b"))
    assert run.cuda_graph_scope == scope


@pytest.mark.parametrize(
    ("spec", "impl"),
    [
        ({"_call_": False, "_target_": "megatron.bridge.models.gpt_provider.local_layer_spec"}, "local"),
        ({"_call_": False, "_target_": "megatron.bridge.models.gpt_provider.default_layer_spec"}, "transformer_engine"),
        (None, "transformer_engine"),
    ],
)
def test_the_layer_spec_not_transformer_impl_picks_the_local_transformer(spec, impl):
    """GPTModelProvider builds its layers from transformer_layer_spec (local_layer_spec: no
    Transformer Engine); model.transformer_impl does not choose the spec there."""
    model_keys = {"transformer_impl": "local"} if spec is None else {"transformer_layer_spec": spec}
    _, run, _ = specs_from_bridge({"model": model_keys}, world_size=8, base=load_preset("llama3-8b"))
    assert run.transformer_impl == impl


def test_memory_fields_not_modelled_warn_only_when_set_to_act():
    """A run-config dump writes every TransformerConfig field; the reader warns about a
    memory-relevant field it does not model (data/megatron_flags.yaml's warned class) only when
    it differs from Megatron-Core's default (data/mcore_config_defaults.yaml) and the switch it
    depends on is on."""
    from memtune.readers.bridge_unmodelled import unmodelled_model_fields

    base = load_preset("qwen3-30b-a3b")
    _, _, notes = specs_from_bridge(
        {"model": {"mlp_chunks_for_training": 4, "moe_enable_deepep": True}}, world_size=8, base=base
    )
    warnings = [n for n in notes if n.startswith("WARNING: model.")]
    assert len(warnings) == 2 and "mlp_chunks_for_training 4" in warnings[0] and "DeepEP" in warnings[1]
    # the defaults a dump writes, and switched-off values, say nothing
    defaults = {
        "mlp_chunks_for_training": 1,
        "moe_enable_deepep": False,
        "moe_flex_dispatcher_backend": "deepep",
        "fp4_recipe": "nvfp4",
        "kitchen_attention_backend": "sdpa",
        "num_layers_at_start_in_bf16": 0,
        "distribute_saved_activations": None,
        "mtp_standalone": True,  # derived by TransformerConfig from the pipeline layout
    }
    assert unmodelled_model_fields(defaults, {}) == []

    def warns(model: dict, comm: dict | None = None) -> int:
        return len(unmodelled_model_fields(model, comm or {}))

    # context-parallel communication: only with CP, and p2p (what an unset type runs) is modelled
    assert warns({"cp_comm_type": "a2a"}) == 0
    assert warns({"cp_comm_type": "a2a", "context_parallel_size": 2}) == 1
    assert warns({"cp_comm_type": "p2p", "context_parallel_size": 2}) == 0
    assert warns({"cp_comm_type": ["p2p", "a2a"], "context_parallel_size": 2}) == 1
    # the flex dispatcher's backend: judged with the dispatcher, its default deepep included
    assert warns({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}) == 1
    assert warns({"moe_token_dispatcher_type": "alltoall", "moe_flex_dispatcher_backend": "hybridep"}) == 0
    # settings that act only under another switch
    assert warns({"num_layers_at_start_in_bf16": 2}) == 0
    assert warns({"num_layers_at_start_in_bf16": 2, "first_last_layers_bf16": True}) == 2  # both named
    assert warns({"activation_offload_fraction": 0.0}) == 0
    assert warns({"activation_offload_fraction": 0.0, "fine_grained_activation_offloading": True}) == 1
    # comm_overlap copies its switches onto the model config
    assert warns({}, {"delay_wgrad_compute": True}) == 1
    # so does the mixed-precision setup, every field of it, its class defaults included
    # (MixedPrecisionConfig.setup): its values replace the model's, and are named under it
    mixed = unmodelled_model_fields(
        {"num_layers_at_start_in_bf16": 2}, {}, {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 2}
    )
    assert len(mixed) == 2 and all(m.startswith("WARNING: mixed_precision.") for m in mixed)
    # the model's count is replaced by the section's default (0 layers): only the switch is named
    replaced = unmodelled_model_fields({"num_layers_at_start_in_bf16": 2}, {}, {"first_last_layers_bf16": True})
    assert [m.split(" ", 2)[1] for m in replaced] == ["mixed_precision.first_last_layers_bf16"]
    assert unmodelled_model_fields({"num_layers_at_start_in_bf16": 2}, {}, {"first_last_layers_bf16": False}) == []
    assert unmodelled_model_fields({}, {}, {"_name": "bf16_mixed"}) == []
    # a named recipe expands to its own settings (training/mixed_precision.py)
    current = unmodelled_model_fields({}, {}, {"_name": "bf16_with_fp8_current_scaling_mixed"})
    assert [m.split(" ", 3)[2] for m in current] == ["(bf16_with_fp8_current_scaling_mixed).first_last_layers_bf16"]
    nemotron = unmodelled_model_fields({}, {}, {"_name": "nemotron_h_bf16_with_fp8_current_scaling_mixed"})
    assert len(nemotron) == 3  # 2 + 2 layers: both counts off Megatron-Core's default of 1
    overwritten = {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": 2}
    assert unmodelled_model_fields(overwritten, {}, {"_name": "bf16_with_fp8_delayed_scaling_mixed"}) == []
    assert len(unmodelled_model_fields(overwritten, {})) == 2  # no mixed_precision section: the model's stand
