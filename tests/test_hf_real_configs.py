"""Real, published config.json files (tests/data/hf-configs, sources in its SOURCE.md) read
by the HF reader and counted as the estimator counts them, against the model cards.

Tolerance, from how model cards write sizes:

* A published figure is either rounded ("1.23B", "31.6B") or a truncated size label ("14B"
  for phi-4's 14.66B, "8B" for Llama-3.1-8B's 8.03B). With ``u`` one unit of its last digit
  we accept ``P - u/2 <= count < P + u``, which covers both readings and nothing wider.
* Where the card's total includes a vision encoder that the config excerpt does not describe
  (Llama 4, Gemma 3) the lower bound drops by 2% of P: Gemma 3's report puts its encoder at
  417M of 27.4B (1.5%), and the reader counts the language model only (and says so).
* Active counts: vendors differ on whether the input-embedding lookup is "active" (OpenAI's
  gpt-oss counts exclude it, Qwen's include it); we count it, so the upper bound rises by the
  input embedding's size.

The readings that decide memory (layers, MoE layer pattern, experts, top-k, shared expert,
head_dim, tied embeddings, vocabulary, hybrid layout) are pinned from the file's own fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from memtune.errors import InputError
from memtune.readers.hf_config import read_hf_config
from memtune.spec.model_spec import count_parameters, embedding_params
from test_hf_config import TINY_LLAMA_HF

DATA = Path(__file__).parent / "data" / "hf-configs"
UNITS = {"M": 1e6, "B": 1e9, "T": 1e12}


@dataclass(frozen=True)
class Real:
    """One published config.json and what its model card says."""

    folder: str
    total: str | None  # published total, as written ("109B"); None = no published figure used
    active: str | None = None  # published active parameters, for MoE models
    with_vision: bool = False  # the published total includes a vision encoder
    layers: int = 0
    moe_layers: int = 0  # how many layers have a routed-expert MLP
    first_moe: int | None = None  # index of the first MoE layer
    experts: int | None = None
    topk: int | None = None
    shared: int | None = None  # shared-expert width (all shared experts together)
    head_dim: int = 0
    tied: bool = False
    vocab: int = 0
    hybrid: bool = False


TABLE = (
    Real("Llama-3.2-1B-Instruct", "1.23B", layers=16, head_dim=64, tied=True, vocab=128256),
    Real("Llama-3.2-3B-Instruct", "3.21B", layers=28, head_dim=128, tied=True, vocab=128256),
    Real("Meta-Llama-3.1-8B", "8B", layers=32, head_dim=128, vocab=128256),
    Real(
        "Llama-4-Scout-17B-16E-Instruct",
        "109B",
        "17B",
        with_vision=True,
        layers=48,
        moe_layers=48,
        first_moe=0,
        experts=16,
        topk=1,
        shared=8192,
        head_dim=128,
        vocab=202048,
    ),  # fmt: skip
    Real(
        "Llama-4-Maverick-17B-128E-Instruct",
        "400B",
        "17B",
        with_vision=True,
        layers=48,
        moe_layers=24,
        first_moe=1,
        experts=128,
        topk=1,
        shared=8192,
        head_dim=128,
        vocab=202048,
    ),  # fmt: skip
    Real("Qwen2.5-7B-Instruct", "7.61B", layers=28, head_dim=128, vocab=152064),
    Real("Qwen3-0.6B", "0.6B", layers=28, head_dim=128, tied=True, vocab=151936),
    Real("Qwen2.5-14B", "14.7B", layers=48, head_dim=128, vocab=152064),
    Real("Qwen2.5-72B", "72.7B", layers=80, head_dim=128, vocab=152064),
    Real("Qwen3-14B", "14.8B", layers=40, head_dim=128, vocab=151936),
    Real("Qwen3-32B", "32.8B", layers=64, head_dim=128, vocab=151936),
    Real(
        "Qwen3-30B-A3B",
        "30.5B",
        "3.3B",
        layers=48,
        moe_layers=48,
        first_moe=0,
        experts=128,
        topk=8,
        head_dim=128,
        vocab=151936,
    ),  # fmt: skip
    Real(
        "Qwen3-235B-A22B",
        "235B",
        "22B",
        layers=94,
        moe_layers=94,
        first_moe=0,
        experts=128,
        topk=8,
        head_dim=128,
        vocab=151936,
    ),  # fmt: skip
    Real(
        "DeepSeek-V3",
        "671B",
        "37B",
        layers=61,
        moe_layers=58,
        first_moe=3,
        experts=256,
        topk=8,
        shared=2048,
        vocab=129280,
    ),  # fmt: skip
    Real(
        "Kimi-K2-Instruct",
        "1T",
        "32B",
        layers=61,
        moe_layers=60,
        first_moe=1,
        experts=384,
        topk=8,
        shared=2048,
        vocab=163840,
    ),  # fmt: skip
    Real(
        "gpt-oss-20b",
        "21B",
        "3.6B",
        layers=24,
        moe_layers=24,
        first_moe=0,
        experts=32,
        topk=4,
        head_dim=64,
        vocab=201088,
    ),  # fmt: skip
    Real(
        "gpt-oss-120b",
        "117B",
        "5.1B",
        layers=36,
        moe_layers=36,
        first_moe=0,
        experts=128,
        topk=4,
        head_dim=64,
        vocab=201088,
    ),  # fmt: skip
    Real(
        "Mixtral-8x7B-v0.1",
        "46.7B",
        "12.9B",
        layers=32,
        moe_layers=32,
        first_moe=0,
        experts=8,
        topk=2,
        head_dim=128,
        vocab=32000,
    ),  # fmt: skip
    Real("gemma-3-27b-it", "27B", with_vision=True, layers=62, head_dim=128, tied=True, vocab=262208),
    Real("phi-4", "14B", layers=40, head_dim=128, vocab=100352),
    Real("Nemotron-H-56B-Base-8K", "56B", layers=118, head_dim=128, vocab=131072, hybrid=True),
    Real(
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "31.6B",
        "3.6B",
        layers=52,
        moe_layers=23,
        first_moe=1,
        experts=128,
        topk=6,
        shared=3712,
        head_dim=128,
        vocab=131072,
        hybrid=True,
    ),  # fmt: skip
    Real(
        "DeepSeek-V3.2",
        None,
        layers=61,
        moe_layers=58,
        first_moe=3,
        experts=256,
        topk=8,
        shared=2048,
        vocab=129280,
    ),  # fmt: skip
)


def published(text: str) -> tuple[float, float]:
    """'109B' -> (1.09e11, 1e9): the value and one unit of its last written digit."""
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?([MBT])", text)
    assert m, text
    scale = UNITS[m.group(3)]
    decimals = len(m.group(2) or "")
    return float(m.group(1) + "." + (m.group(2) or "0")) * scale, scale / 10**decimals


def bounds(text: str, low_allowance: float = 0.0, high_allowance: float = 0.0) -> tuple[float, float]:
    value, unit = published(text)
    return value - unit / 2 - low_allowance, value + unit + high_allowance


def test_the_tolerance_rule_itself():
    assert bounds("1.23B") == pytest.approx((1.225e9, 1.24e9))
    assert bounds("14B") == pytest.approx((13.5e9, 15e9))
    assert bounds("1T") == pytest.approx((0.5e12, 2e12))


def test_at_least_twelve_real_configs_with_a_source():
    folders = sorted(p.name for p in DATA.iterdir() if (p / "config.json").is_file())
    source = (DATA / "SOURCE.md").read_text(encoding="utf-8")
    assert len(folders) >= 12
    assert [f for f in folders if f"`{f}/config.json`" not in source] == []
    assert {r.folder for r in TABLE} | {"Qwen3.5-35B-A3B", "Qwen3-Next-80B-A3B-Thinking"} == set(folders)


@pytest.mark.parametrize("real", TABLE, ids=lambda r: r.folder)
def test_readings_that_decide_memory(real: Real):
    m = read_hf_config(DATA / real.folder / "config.json").model
    moe = m.moe_layers()
    assert m.num_layers == real.layers
    assert sum(moe) == real.moe_layers
    assert (moe.index(True) if any(moe) else None) == real.first_moe
    assert m.num_moe_experts == real.experts
    if real.topk is not None:
        assert m.moe_router_topk == real.topk
    assert m.moe_shared_expert_intermediate_size == real.shared
    if not m.multi_latent_attention:
        assert m.head_dim == real.head_dim
    assert (not m.untie_embeddings_and_output_weights) == real.tied
    assert m.vocab_size == real.vocab
    assert m.is_hybrid == real.hybrid


@pytest.mark.parametrize("real", [r for r in TABLE if r.total], ids=lambda r: r.folder)
def test_total_parameters_match_the_model_card(real: Real):
    m = read_hf_config(DATA / real.folder / "config.json").model
    total = count_parameters(m, include_mtp=False).total
    value, _ = published(str(real.total))
    low, high = bounds(str(real.total), low_allowance=0.02 * value if real.with_vision else 0.0)
    assert low <= total < high, f"{total / 1e9:.3f}B vs published {real.total}"


@pytest.mark.parametrize("real", [r for r in TABLE if r.active], ids=lambda r: r.folder)
def test_active_parameters_match_the_model_card(real: Real):
    m = read_hf_config(DATA / real.folder / "config.json").model
    active = count_parameters(m, include_mtp=False).active
    low, high = bounds(str(real.active), high_allowance=embedding_params(m))
    assert low <= active < high, f"{active / 1e9:.3f}B vs published {real.active}"


def test_llama4_maverick_alternates_dense_and_moe_layers_with_the_wider_dense_mlp():
    m = read_hf_config(DATA / "Llama-4-Maverick-17B-128E-Instruct" / "config.json").model
    assert m.moe_layers()[:4] == (False, True, False, True)  # interleave_moe_layer_step 2
    assert m.ffn == 16384 and m.expert_ffn == 8192  # intermediate_size_mlp / intermediate_size


def test_linear_attention_model_is_refused_not_estimated_as_another_model():
    with pytest.raises(InputError, match=r"qwen3_5_moe_text: 30 of 40 layers are linear-attention"):
        read_hf_config(DATA / "Qwen3.5-35B-A3B" / "config.json")


def test_qwen3_next_linear_layers_are_counted_from_the_full_attention_interval():
    # no layer_types in the file: every 4th layer is full attention, 36 of 48 are Gated DeltaNet
    with pytest.raises(InputError, match=r"qwen3_next: 36 of 48 layers are linear-attention"):
        read_hf_config(DATA / "Qwen3-Next-80B-A3B-Thinking" / "config.json")


def test_gemma3_defaults_the_file_omits_are_stated():
    reading = read_hf_config(DATA / "gemma-3-27b-it" / "config.json")
    joined = "\n".join(reading.notes)
    assert "vocab_size not in config.json: 262208" in joined
    assert "tie_word_embeddings not in config.json: True" in joined
    assert "language model only" in joined  # the vision tower is not counted
    assert reading.model.qk_layernorm


def test_sparse_attention_indexer_is_a_warning_not_silence():
    notes = read_hf_config(DATA / "DeepSeek-V3.2" / "config.json").notes
    assert notes[0].startswith("WARNING: model_type deepseek_v32") and "index_n_heads 64" in notes[0]
    assert not any("not a family this reader knows" in n for n in notes)


@pytest.mark.parametrize("real", [r for r in TABLE if r.folder != "DeepSeek-V3.2"], ids=lambda r: r.folder)
def test_known_families_carry_no_warning(real: Real):
    notes = read_hf_config(DATA / real.folder / "config.json").notes
    assert [n for n in notes if n.startswith("WARNING")] == []


# ---------------------------------------------------------------- the mechanisms, on small shapes
LLAMA_LIKE = TINY_LLAMA_HF


def _write(tmp_path: Path, cfg: dict) -> Path:
    import json

    path = tmp_path / "some-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_unknown_model_type_is_read_llama_style_with_a_warning_naming_it(tmp_path):
    reading = read_hf_config(_write(tmp_path, {**LLAMA_LIKE, "model_type": "brand_new_lm"}))
    assert reading.notes[0].startswith("WARNING: model_type brand_new_lm is not a family this reader knows")
    assert "Llama-style" in reading.notes[0]
    assert count_parameters(reading.model).total > 0


def test_linear_attention_fields_alone_are_refused(tmp_path):
    # no layer_types and no full_attention_interval: the layer count is unknown, the refusal is not
    cfg = {**LLAMA_LIKE, "model_type": "qwen3_next", "linear_num_value_heads": 32}
    with pytest.raises(InputError, match=r"some-model/config.json: model_type qwen3_next: hybrid linear-attention"):
        read_hf_config(_write(tmp_path, cfg))


def test_text_config_inherits_the_wrappers_top_level_fields(tmp_path):
    cfg = {"model_type": "wrapper", "tie_word_embeddings": True, "text_config": {**LLAMA_LIKE, "model_type": "llama"}}
    reading = read_hf_config(_write(tmp_path, cfg))
    assert not reading.model.untie_embeddings_and_output_weights
    assert reading.notes == ()  # a known family inside, no vision tower: nothing assumed


def test_estimate_carries_the_readers_warning_and_refusal_is_one_line_exit_2(tmp_path):
    from helper_cli import invoke, invoke_json

    unknown = _write(tmp_path, {**LLAMA_LIKE, "model_type": "brand_new_lm"})
    doc = invoke_json("estimate_memory", "--hf-config", str(unknown), "--gpus", "1", "--json")
    assert any("brand_new_lm" in w for w in doc["warnings"])
    refused = invoke("estimate_memory", "--hf-config", str(DATA / "Qwen3.5-35B-A3B" / "config.json"))
    assert refused.exit_code == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "linear-attention" in refused.stderr
