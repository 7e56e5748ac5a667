"""Megatron Bridge's nested model config (``model.transformer.*``, Bridge main after v0.6).

Bridge's ``BridgeGPTModelConfig`` keeps the TransformerConfig fields in a ``transformer`` member
and its ``as_dict()`` writes them there (Bridge's tests/unit_tests/models/test_gpt_model_config.py:
``serialized["transformer"]["activation_func"]``), so a dumped config carries the layout, sizes
and recompute under ``model.transformer``. The readers must see the same run as in the flat form.
"""

from __future__ import annotations

import json

import pytest

from memtune.readers.bridge_nested import flat_model_key, flat_override, lift_transformer

TRANSFORMER = {
    "_target_": "megatron.bridge.models.transformer_config.TransformerConfig",
    "num_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_query_groups": 8,
    "ffn_hidden_size": 14336,
    "tensor_model_parallel_size": 2,
    "sequence_parallel": True,
    "recompute_granularity": "selective",
    "recompute_modules": ["core_attn"],
}
MODEL_LEVEL = {"vocab_size": 128256, "seq_length": 8192, "position_embedding_type": "rope"}
TRAIN = {"micro_batch_size": 1, "global_batch_size": 64}


def _yaml(model: dict) -> str:
    import yaml

    return yaml.safe_dump({"model": model, "train": TRAIN}, sort_keys=False)


@pytest.fixture()
def configs(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text(
        _yaml(
            {
                "_target_": "megatron.bridge.models.gpt.model_config.BridgeGPTModelConfig",
                **MODEL_LEVEL,
                "transformer": TRANSFORMER,
            }
        )
    )
    flat = tmp_path / "flat.yaml"
    flat.write_text(_yaml({**MODEL_LEVEL, **{k: v for k, v in TRANSFORMER.items() if k != "_target_"}}))
    return nested, flat


def _estimate(invoke, path, *more: str) -> dict:
    out = invoke("estimate_memory", "--config", str(path), "--gpus", "8", "--json", *more)
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def test_a_nested_dump_is_estimated_as_its_flat_twin(invoke, configs):
    nested, flat = configs
    a, b = _estimate(invoke, nested), _estimate(invoke, flat)
    assert a["peak_bytes"] == b["peak_bytes"] and a["peak_allocated_bytes"] == b["peak_allocated_bytes"]
    assert any("TP2 PP1" in n for n in a["assumptions"])  # was TP1: the nested layout went unread


@pytest.mark.parametrize("key", ["model.tensor_model_parallel_size", "model.transformer.tensor_model_parallel_size"])
def test_an_override_reaches_the_field_by_either_path(invoke, configs, key):
    nested, _ = configs
    doc = _estimate(invoke, nested, f"{key}=4")
    assert any("TP4 PP1" in n for n in doc["assumptions"])


def test_check_env_reads_nested_keys(invoke, configs, tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(_yaml({**MODEL_LEVEL, "transformer": {**TRANSFORMER, "tensor_model_paralel_size": 2}}))
    out = invoke("check_env", "--config", str(path), "--json")
    found = json.loads(out.stdout)
    assert "tensor_model_paralel_size" in json.dumps(found) and "MT025" in json.dumps(found)
    nested, _ = configs
    assert "MT025" not in invoke("check_env", "--config", str(nested), "--json").stdout


def test_lift_keeps_model_level_keys_and_the_model_target():
    cfg = {
        "model": {
            "_target_": "Outer",
            "seq_length": 4096,
            "hidden_size": 1,
            "transformer": {"_target_": "Inner", "hidden_size": 2, "num_layers": 3},
        }
    }
    lifted = lift_transformer(cfg)["model"]
    assert lifted == {"_target_": "Outer", "seq_length": 4096, "hidden_size": 1, "num_layers": 3}
    flat = {"model": {"hidden_size": 1}, "train": {}}
    assert lift_transformer(flat) == flat and lift_transformer({"model": {"transformer": "te"}}) == {
        "model": {"transformer": "te"}
    }


def test_dotted_keys_and_overrides_map_to_the_flat_field():
    assert flat_model_key("model.transformer.num_layers") == "model.num_layers"
    assert flat_model_key("model.transformer_impl") == "model.transformer_impl"
    assert flat_model_key("train.transformer.x") == "train.transformer.x"
    assert flat_override("++model.transformer.pp=2") == "++model.pp=2"
    assert flat_override("~model.transformer.recompute_granularity") == "~model.recompute_granularity"
    assert flat_override("model.seq_length=1") == "model.seq_length=1"
