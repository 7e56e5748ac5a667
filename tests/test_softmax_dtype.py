"""An unstated softmax dtype under unfused attention is shown, not silently assumed.

The H200 grid's launch lines exist twice: as the GPU harness wrote them (no softmax flag; the
harness built TransformerConfig, whose default is fp32) and as the project keeps them (with
``--attention-softmax-in-fp32``, tests/data/estimator/SOURCE.md). Read as Megatron-LM's CLI
would, the first says bf16. Each line is run through ``estimate_memory --json``: the note must
appear exactly when the dtype is unstated and the two readings differ materially, and its
alternate figures must be the estimate of the line that states fp32.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from helper_cli import invoke, invoke_json
from memtune.estimate.estimator import estimate
from memtune.estimate.softmax_dtype import MATERIAL_SHARE, softmax_dtype_note
from memtune.readers.bridge_config import specs_from_bridge
from memtune.readers.megatron_args import parse_launch_text, specs_from_megatron_args
from memtune.spec.presets import load_preset

ARGS = REPO_ROOT / "tests" / "data" / "estimator" / "h200-mcore" / "args"
GRID = sorted(p.name for p in ARGS.glob("*.sh"))
FLAG_LINE = "    --attention-softmax-in-fp32 \\\n"
SCHEMA = REPO_ROOT / "scripts" / "memtune" / "data" / "schemas" / "output" / "estimate_memory.schema.json"


def validate(doc: dict) -> None:
    import jsonschema

    errors = list(jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).iter_errors(doc))
    assert not errors, [e.message for e in errors[:3]]


def shared_style(name: str, tmp_path: Path) -> Path:
    """The launch line as the harness wrote it: the project's copy less its one added line."""
    text = (ARGS / name).read_text()
    assert text.count(FLAG_LINE) == 1, name
    out = tmp_path / name
    out.write_text(text.replace(FLAG_LINE, ""))
    return out


def estimate_json(path: Path) -> dict:
    doc = invoke_json("estimate_memory", "--megatron-args", str(path), "--gpus", "1", "--json")
    validate(doc)
    return doc


def softmax_warnings(doc: dict) -> list[str]:
    return [w for w in doc["warnings"] if w.startswith("WARNING: softmax dtype not stated")]


def test_the_grid_has_its_24_launch_lines():
    assert len(GRID) == 24


@pytest.mark.parametrize("name", GRID)
def test_note_exactly_when_unstated_and_material(name, tmp_path):
    stated = estimate_json(ARGS / name)
    unstated = estimate_json(shared_style(name, tmp_path))
    # Stated fp32: no note, whatever the size of the difference.
    assert "softmax_dtype" not in stated and not softmax_warnings(stated)
    material = abs(stated["peak_bytes"] - unstated["peak_bytes"]) > MATERIAL_SHARE * unstated["peak_bytes"]
    assert ("softmax_dtype" in unstated) == material
    assert len(softmax_warnings(unstated)) == (1 if material else 0)
    if material:
        note = unstated["softmax_dtype"]
        # The alternate figure is the estimate of the line that states fp32, in both views.
        assert note["alternate_peak_bytes"] == stated["peak_bytes"]
        assert note["alternate_peak_allocated_bytes"] == stated["peak_allocated_bytes"]
        assert note["difference_share"] == pytest.approx(stated["peak_bytes"] / unstated["peak_bytes"] - 1, abs=1e-4)
        warning = softmax_warnings(unstated)[0]
        assert unstated["warnings"][0] == warning and unstated["assumptions"][0] == warning
        gib = 2**30
        assert f"{unstated['peak_allocated_bytes'] / gib:.2f} GiB allocated" in warning
        assert f"{stated['peak_allocated_bytes'] / gib:.2f} GiB allocated" in warning


def test_both_branches_occur_on_the_grid():
    """The family above checks both outcomes: where the optimizer step or a full-recompute replay
    sets the peak, the dtype moves nothing and no note is due."""
    quiet = []
    for name in GRID:
        text = (ARGS / name).read_text().replace(FLAG_LINE, "")
        model, run, _ = specs_from_megatron_args(parse_launch_text(text), world_size=1)
        if softmax_dtype_note(model, run) is None:
            quiet.append(name)
    assert quiet == ["g03_s1024.sh", "g10_full.sh", "g21_moe8_top2_alltoall.sh"]


def test_g04_s4096_figures_of_the_issue(tmp_path):
    """The grid is where the assumption decides the peak: 10.46 GiB read as bf16, 15.46 as fp32.

    Both readings are measured: g04_s4096 (fp32, H200) 15.5 GiB, and the same shape with the
    softmax in bf16 (b03_s4096, H100, tests/data/estimator/h100-mcore) 10.48 GiB."""
    doc = estimate_json(shared_style("g04_s4096.sh", tmp_path))
    note = doc["softmax_dtype"]
    assert round(doc["peak_allocated_bytes"] / 2**30, 2) == 10.46
    assert round(note["alternate_peak_allocated_bytes"] / 2**30, 2) == 15.46
    assert note["difference_share"] > 0.3


def test_text_output_leads_with_the_note(tmp_path):
    out = invoke("estimate_memory", "--megatron-args", str(shared_style("g01_base.sh", tmp_path)), "--gpus", "1")
    assert out.exit_code == 0
    first = out.stdout.splitlines()[0]
    assert first.startswith("WARNING: softmax dtype not stated") and "--attention-softmax-in-fp32" in first
    assert "bf16, not stated: Megatron-LM's CLI default" in out.stdout
    stated = invoke("estimate_memory", "--megatron-args", str(ARGS / "g01_base.sh"), "--gpus", "1")
    assert "softmax dtype not stated" not in stated.stdout and "in PyTorch (fp32)" in stated.stdout


def _flags(**extra: object) -> dict[str, object]:
    base = {
        "--num-layers": 4,
        "--hidden-size": 2048,
        "--num-attention-heads": 16,
        "--ffn-hidden-size": 5632,
        "--seq-length": 2048,
        "--max-position-embeddings": 2048,
        "--micro-batch-size": 1,
        "--global-batch-size": 1,
        "--vocab-size": 32000,
        "--bf16": True,
        "--transformer-impl": "local",
        "--no-masked-softmax-fusion": True,
        "--attention-dropout": 0.0,
        "--hidden-dropout": 0.0,
    }
    base.update(extra)
    return base


def _specs(flags: dict[str, object]):
    model, run, _ = specs_from_megatron_args(flags, world_size=1)
    return model, run


def test_query_key_layer_scaling_states_fp32():
    model, run = _specs(_flags(**{"--apply-query-key-layer-scaling": True}))
    assert run.attention_softmax_in_fp32 is True and softmax_dtype_note(model, run) is None
    m2, with_flag = _specs(_flags(**{"--attention-softmax-in-fp32": True}))
    assert estimate(model, run).peak_bytes == estimate(m2, with_flag).peak_bytes


def test_an_arguments_dump_that_says_false_is_stated():
    model, run = _specs(_flags(attention_softmax_in_fp32=False))
    assert run.attention_softmax_in_fp32 is False and softmax_dtype_note(model, run) is None
    model, run = _specs(_flags())
    assert run.attention_softmax_in_fp32 is None and softmax_dtype_note(model, run) is not None


def test_no_note_where_the_dtype_does_not_enter_the_estimate():
    # Transformer Engine attention (flash/fused) and the fused scale-mask-softmax kernel.
    for flags in (
        {k: v for k, v in _flags().items() if k not in ("--transformer-impl", "--no-masked-softmax-fusion")},
        {k: v for k, v in _flags().items() if k != "--no-masked-softmax-fusion"},
    ):
        model, run = _specs(flags)
        assert run.attention_softmax_in_fp32 is None
        assert estimate(model, run).peak_bytes == estimate(model, run.with_(attention_softmax_in_fp32=True)).peak_bytes
        assert softmax_dtype_note(model, run) is None


@pytest.mark.parametrize(("seq", "mbs", "noted"), [(256, 8, False), (512, 4, True), (1024, 1, False)])
def test_note_only_above_the_material_share(seq, mbs, noted):
    """Short sequences: the score tensors are a sliver of the peak (1.8% at 256 x 8, below the
    3% share; 0 at 1024 x 1, where the optimizer step sets the peak); 3.5% at 512 x 4 is noted."""
    flags = _flags(**{"--seq-length": seq, "--max-position-embeddings": seq, "--micro-batch-size": mbs})
    model, run = _specs({**flags, "--global-batch-size": mbs})
    low, high = estimate(model, run).peak_bytes, estimate(model, run.with_(attention_softmax_in_fp32=True)).peak_bytes
    assert (high - low > MATERIAL_SHARE * low) == noted
    note = softmax_dtype_note(model, run)
    assert (note is not None) == noted
    if note is not None:
        assert (note.peak_bytes, note.alternate_peak_bytes) == (low, high)


def test_bridge_reads_the_field_with_gpt_model_providers_default():
    qwen = load_preset("qwen3-8b")
    _, run, _ = specs_from_bridge({"model": {}}, world_size=8, base=qwen)
    assert run.attention_softmax_in_fp32 is False  # GPTModelProvider: attention_softmax_in_fp32 = False
    _, run, _ = specs_from_bridge({"model": {"attention_softmax_in_fp32": True}}, world_size=8, base=qwen)
    assert run.attention_softmax_in_fp32 is True
