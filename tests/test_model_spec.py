"""Exact parameter counts against public HF checkpoints (tests/data/estimator/model-params.json)."""

from __future__ import annotations

import json

import pytest

from memtune.readers.hf_config import model_from_hf
from memtune.spec.model_spec import ModelSpec, count_parameters, model_from_mapping, total_parameters

MODELS = json.loads(
    (__import__("pathlib").Path(__file__).parent / "data" / "estimator" / "model-params.json").read_text()
)["models"]


@pytest.mark.parametrize("entry", MODELS, ids=[m["name"] for m in MODELS])
def test_total_parameters_exact(entry):
    spec = model_from_hf(entry)
    assert count_parameters(spec, include_mtp=False).total == entry["total_params"]


@pytest.mark.parametrize("entry", [m for m in MODELS if "active_params" in m], ids=lambda m: m["name"])
def test_active_parameters_exact(entry):
    assert count_parameters(model_from_hf(entry)).active == entry["active_params"]


def test_padding_grows_vocab_to_multiple_of_128_times_tp():
    m = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=50257)
    assert m.padded_vocab_size(1) == 50304
    assert m.padded_vocab_size(8) == 50176 + 1024  # next multiple of 1024
    assert total_parameters(m, padded_tp=1) - total_parameters(m) == 2 * (50304 - 50257) * 64


def test_tied_embeddings_count_once():
    untied = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    tied = untied.with_(untie_embeddings_and_output_weights=False)
    assert total_parameters(untied) - total_parameters(tied) == 1000 * 64


def test_layernorm_has_bias_rmsnorm_does_not():
    rms = ModelSpec(num_layers=3, hidden_size=64, num_attention_heads=4, vocab_size=100)
    ln = rms.with_(normalization="LayerNorm")
    # 2 norms per layer + final norm, each gaining a bias of width hidden
    assert total_parameters(ln) - total_parameters(rms) == (2 * 3 + 1) * 64


def test_mtp_layer_adds_projection_norms_and_a_layer():
    m = model_from_hf(next(x for x in MODELS if x["name"].startswith("DeepSeek")))
    with_mtp = m.with_(mtp_num_layers=1)
    extra = total_parameters(with_mtp) - total_parameters(m)
    # 14B-ish: one MoE layer (~11.4B) plus 2h*h projection; public figure 14B incl. shared embeddings
    assert 11e9 < extra < 12.5e9


def test_model_from_mapping_names_missing_and_unknown_fields():
    with pytest.raises(ValueError, match="missing model field.*hidden_size"):
        model_from_mapping({"num_layers": 2, "num_attention_heads": 4, "vocab_size": 10})
    with pytest.raises(ValueError, match="unknown model field.*hiden_size"):
        model_from_mapping({"num_layers": 2, "hiden_size": 4})


def test_hybrid_stage_kinds_follow_pipes_or_fall_back_to_contiguous_runs():
    from memtune.spec.model_spec import hybrid_stage_kinds

    # '|' segments: segment i on stage i mod PP (Megatron's hybrid layer allocation)
    assert hybrid_stage_kinds("M-M*|M-M-|M*|M-", (6, 6)) == ("M-M*M*", "M-M-M-")
    # a split the pipes do not describe (e.g. the planner trying PP 4): contiguous runs
    assert hybrid_stage_kinds("M-M*|M-M-|M*|M-", (3, 3, 3, 3)) == ("M-M", "*M-", "M-M", "*M-")
    assert hybrid_stage_kinds("M-M*M-", (6,)) == ("M-M*M-",)
