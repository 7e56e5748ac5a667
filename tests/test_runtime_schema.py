"""runtime_memory.py --json against its published schema, on every real sample and the combined runs.

The schema refuses fields it does not describe, so a new field without a documented meaning
(and unit) fails here, as does a verdict kind outside the fixed list.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helper_cli import invoke
from test_output_schemas import assert_valid

DATA = Path(__file__).resolve().parent / "data" / "runtime-samples"
SAMPLES = sorted(
    str(p.relative_to(DATA))
    for p in DATA.rglob("*")
    if p.is_file() and p.suffix in (".log", ".txt", ".json", ".pickle") and "mig-instances-only" not in p.name
)


def run_json(*args: str) -> dict:
    result = invoke("runtime_memory", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_validates(name: str) -> None:
    assert_valid("runtime_memory", run_json(str(DATA / name), "--gpu", "H200"))


def test_combined_run_with_comparison_and_plot_validates(tmp_path: Path) -> None:
    doc = run_json(
        str(DATA / "h200-mcore" / "memory_summary_c07_h8192_l4_tied_distopt.txt"),
        str(DATA / "h200-mcore" / "nvidia_smi_c07_h8192_l4_tied_distopt.txt"),
        "--megatron-args",
        str(DATA / "config" / "c07_h8192_l4_tied_distopt.sh"),
        "--gpus",
        "1",
        "--plot",
        str(tmp_path / "c07.svg"),
    )
    assert "comparison" in doc and doc["plot"].endswith("c07.svg")
    assert_valid("runtime_memory", doc)


def test_every_family_of_inputs_together_validates() -> None:
    doc = run_json(*(str(DATA / n) for n in SAMPLES if n.startswith("h200-runtime/") and "leak" in n))
    assert {"leak", "stable"} <= set(doc["verdict_kinds"])
    assert_valid("runtime_memory", doc)


def test_schema_lists_the_verdict_kinds_the_code_emits() -> None:
    from memtune.runtime.verdicts import VERDICT_KINDS

    schema = json.loads(
        (
            Path(__file__).resolve().parent.parent / "scripts/memtune/data/schemas/output/runtime_memory.schema.json"
        ).read_text()
    )
    assert schema["properties"]["verdicts"]["items"]["properties"]["kind"]["enum"] == list(VERDICT_KINDS)
