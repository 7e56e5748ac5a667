"""Real public launch scripts and configs, read the way a careful engineer reads them.

Every file in tests/data/real-launch/ was published by someone else (SOURCE.md); the expected
reading of each was keyed by hand into answers.yaml. The test asserts check_env's settings,
its exact set of findings (no false error), what it reports as unresolved, and the
estimator's reading or its one-line refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from memtune.readers import run_view

DATA = Path(__file__).resolve().parent / "data" / "real-launch"
ANSWERS: dict[str, dict[str, Any]] = yaml.safe_load((DATA / "answers.yaml").read_text())


def _view(name: str, answer: dict[str, Any]) -> run_view.RunView:
    path = str(DATA / name)
    inputs = run_view.Inputs(configs=[path]) if answer.get("config") else run_view.Inputs(scripts=[path])
    return run_view.build(inputs)


def test_every_sample_has_an_answer_and_a_source() -> None:
    samples = {p.name for p in DATA.iterdir() if p.suffix in (".sh", ".yaml") and p.name != "answers.yaml"}
    recipes = {p.name for p in DATA.iterdir() if p.suffix == ".py"}
    assert recipes and all(f"| {name} |" in (DATA / "SOURCE.md").read_text() for name in recipes)
    assert samples == set(ANSWERS)
    listed = (DATA / "SOURCE.md").read_text()
    assert all(f"| {name} |" in listed for name in samples)
    assert len(samples) >= 12


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_check_env_reading(name: str) -> None:
    answer = ANSWERS[name]
    view = _view(name, answer)
    for setting, expected in answer["view"].items():
        assert view.get(setting) == expected, (setting, view.settings.get(setting))
    for setting in answer.get("unresolved", []):
        assert setting in view.unresolved, setting
        assert any(f"{setting} is only known when the job runs" in note for note in view.notes)
    for text in answer.get("notes_contain", []):
        assert any(text in note for note in view.notes), (text, view.notes)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_check_env_findings(name: str, invoke: Any) -> None:
    answer = ANSWERS[name]
    option = "--config" if answer.get("config") else "--script"
    result = invoke("check_env", option, str(DATA / name), "--json")
    document = json.loads(result.stdout)
    found = {f["rule"]: f["severity"] for f in document["findings"]}
    assert found == answer["findings"], document["findings"]
    assert result.exit_code == (1 if "error" in found.values() else 0)
    for text in answer.get("notes_contain", []):
        assert any(text in note for note in document["notes"]), document["notes"]


def _estimator_inputs(name: str) -> Any:
    from memtune.commands.run_inputs import load_model_and_run

    fields = (
        "preset hf_config example config overrides tp pp vpp cp ep etp mbs gbs seq_length gpus sp dist_opt "
        "grad_fp32 attention_backend lora_dim regather recompute_method recompute_num_layers fsdp precision "
        "fp8_param_gather first_stage_layers last_stage_layers recompute recompute_modules fp8 "
        "cpu_offload_layers peft gpu gpu_memory"
    ).split()
    args = SimpleNamespace(**{f: None for f in fields}, megatron_args=str(DATA / name))
    args.overrides = []
    return load_model_and_run(args)


@pytest.mark.parametrize("name", sorted(n for n, a in ANSWERS.items() if "model" in a or "estimate_error" in a))
def test_estimator_reading(name: str, invoke: Any) -> None:
    answer = ANSWERS[name]
    if "estimate_error" in answer:
        result = invoke("estimate_memory", "--megatron-args", str(DATA / name))
        assert result.exit_code == 2, result.stdout
        assert answer["estimate_error"] in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        return
    inputs = _estimator_inputs(name)
    for field, expected in answer["model"].items():
        assert getattr(inputs.model, field) == expected, field
    for field, expected in answer["run"].items():
        got = getattr(inputs.run, field)
        assert (list(got) if isinstance(got, tuple) else got) == expected, field
    for text in answer.get("warnings_contain", []):
        assert any(text in note and note.startswith("WARNING") for note in inputs.notes), inputs.notes
    for text in answer.get("estimate_notes_contain", []):
        assert any(text in note for note in inputs.notes[:3]), inputs.notes  # stated among the first lines
    for text in answer.get("warnings_exclude", []):
        assert not any(text in note for note in inputs.notes), inputs.notes


def test_a_bridge_python_recipe_is_read_not_run(invoke: Any) -> None:
    """`--config recipe.py`: the recipe is never executed; the one-line refusal names the recipe
    call and the literal overrides read from its syntax tree, and what to pass instead."""
    recipe = DATA / "mb_recipe_llama_quickstart_pretrain.py"
    result = invoke("estimate_memory", "--config", str(recipe))
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "llama32_1b_pretrain_config()" in line and "train.train_iters=10" in line
    assert "pass --config with the YAML the recipe writes" in line and "--hf-config" in line
    checked = invoke("check_env", "--config", str(recipe))  # check_env says the same, not "invalid YAML"
    assert checked.exit_code == 2 and "a Python recipe is never run here" in checked.stderr


def test_a_megatron_args_walk_parses_the_script_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: the flags, their assumptions and the world size come from one parse."""
    from memtune.readers.launch import commands

    real = commands.parse_text
    top_level: list[str] = []

    def counting(text: str, path: str = "", *rest: Any, **kw: Any) -> Any:
        if not rest and not kw:  # the reader's own call (recursion passes the known variables)
            top_level.append(path)
        return real(text, path, *rest, **kw)

    monkeypatch.setattr(commands, "parse_text", counting)
    inputs = _estimator_inputs("bigscience_tr11c_2b5_slurm_pp_partition.sh")
    assert inputs.run.world_size == 128
    assert len(top_level) == 1, top_level
