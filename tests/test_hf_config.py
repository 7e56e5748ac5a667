"""HF config.json field names -> ModelSpec."""

from __future__ import annotations

import json

import pytest

from memtune.errors import InputError
from memtune.readers.hf_config import load_hf_config, model_from_hf
from memtune.spec.model_spec import count_parameters

QWEN3_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}


def test_qwen3_moe_family_defaults():
    m = model_from_hf(QWEN3_MOE)
    assert m.qk_layernorm and m.is_moe and m.expert_ffn == 768 and m.moe_router_topk == 8
    assert count_parameters(m).total == 30532122624


def test_gpt_oss_family_turns_on_biases_and_sinks():
    cfg = {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 24,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "attention_bias": True,
        "tie_word_embeddings": False,
    }
    m = model_from_hf(cfg)
    assert m.softmax_sinks and m.moe_expert_bias and m.moe_router_bias and m.add_attn_output_bias
    assert count_parameters(m).total == 20914757184


def test_deepseek_v3_first_dense_layers_and_mtp():
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "first_k_dense_replace": 3,
        "intermediate_size": 18432,
        "num_attention_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "vocab_size": 129280,
        "topk_method": "noaux_tc",
        "num_nextn_predict_layers": 1,
        "moe_layer_freq": 1,
    }
    m = model_from_hf(cfg)
    assert m.moe_layers()[:4] == (False, False, False, True) and m.mtp_num_layers == 1
    assert count_parameters(m, include_mtp=False).total == 671026419200


#: A two-layer Llama-shaped config.json for checking one mechanism at a time
#: (test_hf_real_configs.py uses it too).
TINY_LLAMA_HF = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
}


def test_qwen2_has_qkv_bias():
    base = TINY_LLAMA_HF
    assert count_parameters(model_from_hf({**base, "model_type": "qwen2"})).total - count_parameters(
        model_from_hf({**base, "model_type": "llama"})
    ).total == 2 * (64 + 2 * 32)


def test_missing_fields_are_named(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(InputError, match="num_hidden_layers, num_attention_heads, vocab_size"):
        load_hf_config(p)


def test_bad_json_is_input_error(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_hf_config(p)
