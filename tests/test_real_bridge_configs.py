"""Real Megatron Bridge run configs, read the way Megatron Bridge builds the run.

Every file in tests/data/real-bridge/ was published by someone else (SOURCE.md): full
``ConfigContainer.to_yaml()`` dumps (``_target_`` objects, torch dtypes as ``{_call_: false,
_target_: torch.bfloat16}``, enums as calls, lists of 61 flags), a config printed by a real run's
log, and override files with launcher placeholders and OmegaConf interpolations. The expected
reading of each was keyed by hand into answers.yaml before the reader ran on it. The test
asserts check_env's settings and exact findings, the estimator's model and run (or its one-line
refusal), the notes that must state what the reader could not use, and that estimate_memory
runs end to end on each file it can read.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from memtune.readers import run_view

DATA = Path(__file__).resolve().parent / "data" / "real-bridge"
ANSWERS: dict[str, dict[str, Any]] = yaml.safe_load((DATA / "answers.yaml").read_text())


def test_every_sample_has_an_answer_and_a_source() -> None:
    samples = {p.name for p in DATA.iterdir() if p.suffix == ".yaml" and p.name != "answers.yaml"}
    assert samples == set(ANSWERS)
    listed = (DATA / "SOURCE.md").read_text()
    assert all(f"| {name} |" in listed for name in samples)
    assert len(samples) >= 6


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_check_env_reading(name: str) -> None:
    answer = ANSWERS[name]
    view = run_view.build(run_view.Inputs(configs=[str(DATA / name)]))
    for setting, expected in answer["view"].items():
        assert view.get(setting) == expected, (setting, view.settings.get(setting))
    for setting in answer.get("unresolved", []):
        assert setting in view.unresolved, setting
        assert any(f"{setting} is only known when the job runs" in note for note in view.notes)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_check_env_findings(name: str, invoke: Any) -> None:
    answer = ANSWERS[name]
    result = invoke("check_env", "--config", str(DATA / name), "--json")
    document = json.loads(result.stdout)
    found = {f["rule"]: f["severity"] for f in document["findings"]}
    assert found == answer["findings"], document["findings"]
    assert result.exit_code == (1 if "error" in found.values() else 0)
    for text in answer.get("notes_contain_check_env", []):
        assert any(text in note for note in document["notes"]), document["notes"]


def _inputs(name: str, gpus: int | None, overrides: list[str]) -> Any:
    from memtune.commands.run_inputs import load_model_and_run

    fields = (
        "preset hf_config example megatron_args overrides tp pp vpp cp ep etp mbs gbs seq_length sp dist_opt "
        "grad_fp32 attention_backend lora_dim regather recompute_method recompute_num_layers fsdp precision "
        "fp8_param_gather first_stage_layers last_stage_layers recompute recompute_modules fp8 "
        "cpu_offload_layers peft gpu gpu_memory"
    ).split()
    args = SimpleNamespace(**{f: None for f in fields}, config=str(DATA / name), gpus=gpus)
    args.overrides = overrides
    return load_model_and_run(args)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _cli_args(name: str, gpus: int | None, overrides: list[str]) -> list[str]:
    return ["--config", str(DATA / name), *overrides, *(["--gpus", str(gpus)] if gpus else [])]


@pytest.mark.parametrize("name", sorted(n for n, a in ANSWERS.items() if "estimate_error" in a))
def test_estimator_refusal(name: str, invoke: Any) -> None:
    result = invoke("estimate_memory", "--config", str(DATA / name))
    assert result.exit_code == 2, result.stdout
    assert ANSWERS[name]["estimate_error"] in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", sorted(n for n, a in ANSWERS.items() if "model" in a))
def test_estimator_reading(name: str, invoke: Any) -> None:
    answer = ANSWERS[name]
    overrides = answer.get("overrides", [])
    gpus = answer.get("override_gpus", answer.get("gpus"))
    inputs = _inputs(name, gpus, overrides)
    for field, expected in answer["model"].items():
        assert _plain(getattr(inputs.model, field)) == expected, field
    for field, expected in answer["run"].items():
        assert _plain(getattr(inputs.run, field)) == expected, field
    for text in answer.get("notes_contain", []):
        assert any(text in note for note in inputs.notes), inputs.notes
    for text in answer.get("notes_exclude", []):
        assert not any(text in note for note in inputs.notes), inputs.notes
    # and the helper itself runs to a verdict on the file
    result = invoke("estimate_memory", *_cli_args(name, gpus, overrides), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["stages"]
