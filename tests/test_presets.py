"""Presets are data files with public facts; each loads and has the published size."""

from __future__ import annotations

import pytest

from memtune.errors import InputError
from memtune.spec.model_spec import count_parameters
from memtune.spec.presets import load_preset, preset_names, preset_source

REQUIRED = [
    "llama3-8b",
    "llama3-70b",
    "llama3.1-405b",
    "qwen3-8b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-v3",
    "nemotron-4-340b",
]

# Published total sizes (billions) from the model cards / papers; MTP excluded for DeepSeek-V3.
PUBLISHED = {
    "llama3-8b": 8.03,
    "llama3-70b": 70.55,
    "llama3.1-405b": 405.85,
    "qwen3-8b": 8.19,
    "qwen3-30b-a3b": 30.53,
    "mixtral-8x7b": 46.70,
    "gpt-oss-20b": 20.91,
    "gpt-oss-120b": 116.83,
    "deepseek-v3": 671.03,
    "nemotron-4-340b": 341.03,
}


def test_required_presets_exist():
    assert set(REQUIRED) <= set(preset_names())


@pytest.mark.parametrize("name", REQUIRED)
def test_preset_size_matches_publication(name):
    m = load_preset(name)
    total = count_parameters(m, include_mtp=False).total / 1e9
    assert total == pytest.approx(PUBLISHED[name], abs=0.01)
    assert preset_source(name).startswith("https://")


def test_unknown_preset_lists_known_ones():
    with pytest.raises(InputError, match="unknown preset 'llama9'.*llama3-8b"):
        load_preset("llama9")


def test_hybrid_preset_and_hf_config_agree():
    """Nemotron-H 8B: the preset and the HF config.json fields give the same model; its size
    is in the 8B class the model card states (24 Mamba-2, 4 attention, 24 MLP layers)."""
    from memtune.readers.hf_config import model_from_hf

    preset = load_preset("nemotron-h-8b")
    hf = model_from_hf(
        {
            "model_type": "nemotron_h",
            "hidden_size": 4096,
            "num_hidden_layers": 52,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "attention_head_dim": 128,
            "intermediate_size": 21504,
            "vocab_size": 131072,
            "mlp_hidden_act": "relu2",
            "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
            "mamba_num_heads": 128,
            "mamba_head_dim": 64,
            "ssm_state_size": 128,
            "n_groups": 8,
            "conv_kernel": 4,
            "expand": 2,
            "tie_word_embeddings": False,
            "max_position_embeddings": 8192,
        }
    )
    assert count_parameters(hf).total == count_parameters(preset).total
    kinds = preset.layer_kinds()
    assert (kinds.count("M"), kinds.count("*"), kinds.count("-")) == (24, 4, 24)
    assert 7.5 < count_parameters(preset).total / 1e9 < 8.5
