"""Megatron Bridge's CanonicalLoRA: separate adapters on q, k, v and on up, gate.

Its targets (``linear_q`` ... ``linear_fc1_gate``) name parts of the fused linears
(peft/canonical_lora.py: LoRALinearSplitQKV and LoRALinearSplitFC1UpGate feed each part's adapter
the fused module's layer-norm output). The estimator used to skip those names: no adapter
parameters, and the norm outputs a frozen fused linear frees were dropped although the adapters
keep them. Adapter shapes follow the source; nothing here is measured.
"""

from __future__ import annotations

import pytest

from memtune.estimate.activations import frozen_unsaved_terms
from memtune.estimate.estimator import estimate
from memtune.estimate.parameters import lora_params
from memtune.readers.bridge_config import specs_from_bridge
from memtune.spec.presets import load_preset
from memtune.spec.run_spec import CANONICAL_LORA_DEFAULT_TARGETS, LORA_DEFAULT_TARGETS, lora_base_module

CANONICAL = "megatron.bridge.peft.canonical_lora.CanonicalLoRA"
LORA = "megatron.bridge.peft.lora.LoRA"


def specs(peft: dict, sp: bool = False):
    model_keys = {"tensor_model_parallel_size": 2, "sequence_parallel": sp, "seq_length": 4096}
    model, run, _ = specs_from_bridge({"model": model_keys, "peft": peft}, world_size=8, base=load_preset("llama3-8b"))
    return model, run


def test_canonical_defaults_to_its_own_targets():
    _, run = specs({"_target_": CANONICAL})
    assert run.lora_target_modules == CANONICAL_LORA_DEFAULT_TARGETS
    _, plain = specs({"_target_": LORA})
    assert plain.lora_target_modules == LORA_DEFAULT_TARGETS
    assert {lora_base_module(t) for t in CANONICAL_LORA_DEFAULT_TARGETS} == set(LORA_DEFAULT_TARGETS)
    assert lora_base_module("decoder.layers.*.self_attention.linear_k") == "linear_qkv"


def test_adapter_parameters_are_the_split_shapes():
    """Per layer, q/k/v adapters hold 3 A matrices (h x r) where the fused one holds one, and
    up/gate two where fc1 holds one; the B sides add up to the same outputs."""
    model, canonical = specs({"_target_": CANONICAL})
    _, fused = specs({"_target_": LORA})
    layers = model.num_layers
    extra = lora_params(model, canonical, layers) - lora_params(model, fused, layers)
    h, r, tp = model.hidden_size, canonical.lora_dim, canonical.tp
    assert extra == pytest.approx(layers * 3 * h * r / tp)


def test_the_adapters_keep_the_norm_outputs():
    model, canonical = specs({"_target_": CANONICAL})
    assert frozen_unsaved_terms(model, canonical, moe=False) == frozenset()
    _, only_q = specs({"_target_": CANONICAL, "target_modules": ["linear_q", "linear_proj"]})
    assert "attn_norm_out" not in frozen_unsaved_terms(model, only_q, moe=False)
    assert "mlp_norm_out" in frozen_unsaved_terms(model, only_q, moe=False)


@pytest.mark.parametrize("sp", [False, True])
def test_each_part_adapter_costs_its_own_outputs_and_shares_the_gathered_input(sp):
    """Five part adapters on two fused modules: each adds its A output and B input (2 x r per
    token); under SP TE's fused norm-linear returns one gathered norm output that every part
    adapter of that module takes (Bridge peft/utils.py), so the gathered copy is kept once per
    fused module, as with LoRA."""
    model, canonical = specs({"_target_": CANONICAL}, sp)
    _, fused = specs({"_target_": LORA}, sp)
    a, b = estimate(model, canonical).stages[0], estimate(model, fused).stages[0]
    tokens = canonical.seq_length * canonical.mbs
    per_layer = (a.activations - b.activations) / model.num_layers
    extra_adapters = 3  # q, k, v, up, gate against qkv, fc1
    assert per_layer == pytest.approx(extra_adapters * 2 * 2 * tokens * canonical.lora_dim, rel=0.02)


def test_no_regather_for_canonical_lora():
    """sequence_parallel_input_regather is a field of LoRA only: never proposed for CanonicalLoRA."""
    from memtune.estimate.plan_space import PlanSettings, extra_violations
    from memtune.units import GIB

    model, canonical = specs({"_target_": CANONICAL}, sp=True)
    settings = PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=GIB)
    reasons = extra_violations(model, canonical, canonical.with_(sequence_parallel_input_regather=True), settings)
    assert any("CanonicalLoRA has no such field" in r for r in reasons)
    _, fused = specs({"_target_": LORA}, sp=True)
    reasons = extra_violations(model, fused, fused.with_(sequence_parallel_input_regather=True), settings)
    assert not any("CanonicalLoRA" in r for r in reasons)


def _mt010(tmp_path, peft: str, name: str = "run.yaml") -> list:
    from memtune.check import check_rules
    from memtune.readers import run_view

    path = tmp_path / name
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\npeft:\n" + peft)
    view = run_view.build(run_view.Inputs(configs=[str(path)]))
    return [f for f in check_rules.run_all(view) if f.rule == "MT010"]


CANONICAL_YAML = "  _target_: megatron.bridge.peft.canonical_lora.CanonicalLoRA\n  dim: 16\n"
PLAIN_YAML = "  _target_: megatron.bridge.peft.lora.LoRA\n  dim: 16\n"


def test_check_env_never_advises_a_field_canonical_lora_lacks(tmp_path):
    """MT010 tells LoRA + SP users to set peft.sequence_parallel_input_regather; CanonicalLoRA has
    no such field (Bridge peft/canonical_lora.py), so it gets no advice, and a warning when set."""
    advised = _mt010(tmp_path, PLAIN_YAML)
    assert [f.severity for f in advised] == ["info"] and "sequence_parallel_input_regather: true" in advised[0].fix
    assert _mt010(tmp_path, CANONICAL_YAML) == []
    by_targets = "  target_modules: [linear_q, linear_k, linear_v, linear_fc1_up]\n"
    assert _mt010(tmp_path, by_targets) == []
    set_anyway = _mt010(tmp_path, CANONICAL_YAML + "  sequence_parallel_input_regather: true\n")
    assert [f.severity for f in set_anyway] == ["warning"]
    assert "CanonicalLoRA has no sequence_parallel_input_regather field" in set_anyway[0].message
    assert set_anyway[0].source.endswith("run.yaml:7")


def test_regather_config_says_canonical_lora_has_no_regather(tmp_path, invoke):
    import json

    for peft, eligible in ((CANONICAL_YAML, False), (PLAIN_YAML, True)):
        path = tmp_path / "run.yaml"
        path.write_text("model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\npeft:\n" + peft)
        doc = json.loads(invoke("regather_config", "--config", str(path), "--json").stdout)
        assert doc["eligible"] is eligible
        if not eligible:
            rows = {m["module"]: m["reason"] for m in doc["modules"]}
            assert set(rows) == set(CANONICAL_LORA_DEFAULT_TARGETS)
            assert "no re-gather option" in rows["linear_q"] and "row-parallel" in rows["linear_proj"]
            assert any("CanonicalLoRA has no sequence_parallel_input_regather" in f for f in doc["fallbacks"])


DORA_YAML = "  _target_: megatron.bridge.peft.dora.DoRA\n  dim: 16\n"


def test_dora_has_no_regather_either(tmp_path, invoke):
    """Bridge's DoRA (peft/dora.py) defines no sequence_parallel_input_regather either."""
    import json

    assert _mt010(tmp_path, DORA_YAML) == []
    set_anyway = _mt010(tmp_path, DORA_YAML + "  sequence_parallel_input_regather: true\n")
    assert [f.severity for f in set_anyway] == ["warning"] and "DoRA has no" in set_anyway[0].message
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\npeft:\n" + DORA_YAML)
    doc = json.loads(invoke("regather_config", "--config", str(path), "--json").stdout)
    assert doc["eligible"] is False and any("DoRA has no" in f for f in doc["fallbacks"])


@pytest.mark.parametrize("peft", [CANONICAL_YAML, DORA_YAML])
def test_the_estimate_ignores_a_regather_key_the_class_lacks(tmp_path, invoke, peft):
    """Bridge drops the key from such a config, so the estimate must not credit its saving."""
    import json

    def run(extra: str) -> dict:
        path = tmp_path / "run.yaml"
        path.write_text(
            "model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  seq_length: 8192\npeft:\n"
            + peft
            + extra
        )
        out = invoke("estimate_memory", "--config", str(path), "--preset", "llama3-8b", "--gpus", "8", "--json")
        return json.loads(out.stdout)

    plain, keyed = run(""), run("  sequence_parallel_input_regather: true\n")
    assert keyed["peak_allocated_bytes"] == plain["peak_allocated_bytes"]
    assert any("has no such field" in a and a.startswith("WARNING") for a in keyed["assumptions"])
    lora = PLAIN_YAML + "  sequence_parallel_input_regather: true\n"
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  seq_length: 8192\npeft:\n" + lora
    )
    out = invoke("estimate_memory", "--config", str(path), "--preset", "llama3-8b", "--gpus", "8", "--json")
    assert json.loads(out.stdout)["peak_allocated_bytes"] < plain["peak_allocated_bytes"]  # LoRA: it saves


def test_the_regather_switch_is_refused_for_dora(invoke):
    out = invoke("estimate_memory", "--preset", "llama3-8b", "--gpus", "8", "--tp", "2", "--peft", "dora", "--regather")
    assert out.exit_code == 2 and "Traceback" not in out.stderr
    assert "--regather: DoRA has no sequence_parallel_input_regather" in out.stderr


def test_the_planner_offers_no_regather_to_dora():
    from memtune.estimate.plan_space import PlanSettings
    from memtune.estimate.planner import candidates
    from memtune.units import GIB

    model = load_preset("llama3-8b")
    for kind in ("dora", "lora"):
        _, run, _ = specs_from_bridge(
            {"model": {"tensor_model_parallel_size": 2, "sequence_parallel": True}, "peft": {"_target_": kind}},
            8,
            model,
        )
        names = [c.title for c in candidates(model, run, PlanSettings(gpu_memory_bytes=80 * GIB, headroom_bytes=GIB))]
        assert ("LoRA input re-gather" in names) is (kind == "lora")


def test_a_dora_recipe_gets_no_regather_snippet(tmp_path, invoke):
    """regather_config --recipe read every LoRA(...) / DoRA(...) call as LoRA and printed
    DoRA(..., sequence_parallel_input_regather=True), a keyword DoRA does not take."""
    import json

    recipe = tmp_path / "recipe.py"
    recipe.write_text(
        "from megatron.bridge.peft.dora import DoRA\n"
        "cfg.model.tensor_model_parallel_size = 2\ncfg.model.sequence_parallel = True\n"
        "cfg.peft = DoRA(dim=16)\n"
    )
    doc = json.loads(invoke("regather_config", "--recipe", str(recipe), "--preset", "qwen3-8b", "--json").stdout)
    assert doc["eligible"] is False and doc["saving_bytes_per_gpu"] in (0, None)
    assert "sequence_parallel_input_regather=True" not in doc["change"]["text"]
    assert any("DoRA has no" in f for f in doc["fallbacks"])


def test_a_package_named_like_a_class_does_not_decide(tmp_path, invoke):
    """The class name decides, in the estimate and in check_env alike."""
    import json

    lora_in_dora_pkg = "  _target_: megatron.contrib.dora_ext.LoRA\n  sequence_parallel_input_regather: true\n"
    assert [f.severity for f in _mt010(tmp_path, lora_in_dora_pkg)] == []
    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  seq_length: 8192\npeft:\n"
        + lora_in_dora_pkg
    )
    doc = json.loads(
        invoke("estimate_memory", "--config", str(path), "--preset", "llama3-8b", "--gpus", "8", "--json").stdout
    )
    assert not any("has no such field" in a for a in doc["assumptions"])


def test_a_regather_override_on_dora_is_an_error(tmp_path):
    from memtune.check import check_rules
    from memtune.readers import run_view

    path = tmp_path / "run.yaml"
    path.write_text("model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\npeft:\n" + DORA_YAML)
    view = run_view.build(
        run_view.Inputs(configs=[str(path)], overrides=["peft.sequence_parallel_input_regather=true"])
    )
    found = [f for f in check_rules.run_all(view) if f.rule == "MT010"]
    assert [f.severity for f in found] == ["error"]


def test_switching_a_lora_config_to_dora_on_the_command_line_drops_the_regather(tmp_path, invoke):
    import json

    path = tmp_path / "run.yaml"
    path.write_text(
        "model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: true\n  seq_length: 8192\npeft:\n"
        + PLAIN_YAML
        + "  sequence_parallel_input_regather: true\n"
    )
    base = ["estimate_memory", "--config", str(path), "--preset", "llama3-8b", "--gpus", "8", "--json"]
    dora = json.loads(invoke(*base, "--peft", "dora").stdout)
    assert any("DoRA has no sequence_parallel_input_regather" in a for a in dora["assumptions"])
    plain = tmp_path / "plain.yaml"
    plain.write_text(path.read_text().replace("  sequence_parallel_input_regather: true\n", ""))
    without = json.loads(
        invoke(
            "estimate_memory",
            "--config",
            str(plain),
            "--preset",
            "llama3-8b",
            "--gpus",
            "8",
            "--peft",
            "dora",
            "--json",
        ).stdout
    )
    assert dora["peak_allocated_bytes"] == without["peak_allocated_bytes"]
