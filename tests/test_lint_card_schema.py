"""card.yaml and its JSON Schema: the repo's card is valid; missing keys and wrong types are not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO_ROOT / "scripts" / "memtune" / "data" / "schemas" / "card.schema.json"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("/draft/2020-12/schema")
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def card() -> dict:
    return yaml.safe_load((REPO_ROOT / "card.yaml").read_text(encoding="utf-8"))


def problems(validator: Draft202012Validator, instance: dict) -> list[str]:
    return [e.message for e in validator.iter_errors(instance)]


def test_repo_card_is_valid(validator, card) -> None:
    assert problems(validator, card) == []


@pytest.mark.parametrize(
    "key",
    [
        "title",
        "validated_on",
        "summary",
        "validation_status",
        "training_dimensions",
        "enable_when",
        "avoid_when",
        "interactions",
        "config_keys",
        "recommended_path",
        "expected_metric_change",
        "measured_results",
        "failure_modes",
        "known_constraints",
        "known_limitations",
        "evidence",
    ],
)
def test_each_required_key_is_enforced(validator, card, key) -> None:
    broken = copy.deepcopy(card)
    del broken[key]
    assert problems(validator, broken) == [f"'{key}' is a required property"]


@pytest.mark.parametrize(
    "path, value",
    [
        (("enable_when",), "training OOMs"),  # list expected
        (("validated_on",), "last week"),  # date expected
        (("training_dimensions", "memory", "confidence"), "sure"),  # enum
        (("measured_results", 0, "experiments", 0, "peak_mem_gb"), "58.8 GB"),  # number expected
        (("measured_results", 0, "experiments", 0, "tp"), 4.5),  # integer expected
        (("evidence",), []),  # at least one source
        (("interactions", "incompatible"), "none"),  # list expected
    ],
)
def test_wrong_types_are_rejected(validator, card, path, value) -> None:
    broken = copy.deepcopy(card)
    target = broken
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert problems(validator, broken)


def test_unknown_top_level_key_is_rejected(validator, card) -> None:
    broken = dict(card, when_to_use="OOM")
    assert problems(validator, broken)


def test_card_figures_match_the_shared_measurements(card) -> None:
    """The card's Llama3-70B and LoRA numbers agree with ../shared/data/bridge-measured.json (copied facts)."""
    results = {r["name"]: {e["name"]: e for e in r["experiments"]} for r in card["measured_results"]}
    strategy = results["llama3_70b_sft_strategy_comparison"]
    assert (
        strategy["baseline"]["peak_mem_gb"],
        strategy["more_pp"]["peak_mem_gb"],
        strategy["more_tp"]["peak_mem_gb"],
    ) == (58.8, 53.2, 50.2)
    lora = results["lora_sequence_parallel_input_regather"]
    for name in ("qwen3_8b", "qwen3_30b_a3b", "gpt_oss_120b"):
        row = lora[name]
        assert row["baseline_peak_gb"] - row["regather_peak_gb"] == pytest.approx(row["memory_saved_gb"], abs=1e-3)
        assert 100 * row["memory_saved_gb"] / row["baseline_peak_gb"] == pytest.approx(
            row["memory_saved_pct"], abs=0.05
        )
