"""The estimator against real Megatron-Core steps on one H200 (tests/data/estimator/h200-mcore).

The grid (one knob at a time) is where the unfused-attention, optimizer-step and device-view terms
were read; the validation sets were measured afterwards and set nothing. Each check also runs a
plausible wrong model (the softmax kept in bf16, dropout charged at the old 3 bytes per score) to
show the bar tells right from wrong.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune.errors import InputError
from memtune.estimate import estimator as est_mod
from memtune.estimate.estimator import estimate, unfused_score_bytes
from memtune.estimate.verdict import BORDERLINE, DOES_NOT_FIT, FITS, fit_verdict
from memtune.readers.megatron_args import specs_from_megatron_args

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "data" / "estimator" / "h200-mcore"
sys.path.insert(0, str(ROOT / "benchmarks"))

import estimator_accuracy as acc  # noqa: E402  (the benchmark's own reading of the records)

GIB = 2**30


def records(name: str) -> list[dict]:
    return [r for r in json.loads((H200 / name).read_text()) if r.get("status", "ok") == "ok"]


def specs(record: dict, extra: tuple[str, ...] = acc.H200_HARNESS_FLAGS):
    model, run, _ = specs_from_megatron_args(acc.flag_mapping([*record["flags"], *extra]), world_size=1)
    return model, run


def allocated_errors(name: str, extra: tuple[str, ...] = acc.H200_HARNESS_FLAGS) -> dict[str, float]:
    out = {}
    for record in records(name):
        model, run = specs(record, extra)
        est = estimate(model, run)
        measured, _ = acc.h200_measured(record, est)
        out[record["name"]] = est.peak_allocated_bytes / measured - 1
    return out


def test_grid_allocated_view_within_two_percent_each():
    errors = allocated_errors("measured.json")
    assert len(errors) == 24
    assert max(abs(e) for e in errors.values()) <= 0.02, errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.01


@pytest.mark.parametrize("name", ["validation.json", "validation_deep.json"])
def test_held_out_validation_meets_the_issue_bar(name):
    """Issue 25: held-out H200 configs median |error| <= 5%, worst <= 12%, every one estimated."""
    errors = allocated_errors(name)
    assert len(errors) == len(records(name)) and errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.05
    assert max(abs(e) for e in errors.values()) <= 0.12, errors


def test_softmax_in_bf16_would_fail_the_bar():
    """The same records read as Megatron-LM's CLI default (softmax in bf16): the bar catches it."""
    errors = allocated_errors("validation.json", extra=())
    assert max(abs(e) for e in errors.values()) > 0.12


def test_device_view_within_the_bar_on_validation():
    errs = []
    for record in records("validation.json"):
        model, run = specs(record)
        est = estimate(model, run)
        _, device = acc.h200_measured(record, est)
        errs.append(abs(est.peak_bytes / device - 1))
    assert statistics.median(errs) <= 0.08
    assert acc._percentile(errs, 0.9) <= 0.15


def test_the_oom_config_is_called_does_not_fit():
    """w04 (32 layers, micro-batch 8) really ran out of memory on the 139.8 GiB card."""
    record = next(r for r in json.loads((H200 / "validation_deep.json").read_text()) if r["status"] == "error")
    assert "CUDA out of memory" in json.dumps(record)
    model, run = specs(record)
    est = estimate(model, run)
    card = 150_109_880_320  # torch total_memory of the H200 (environment_and_probes.json)
    assert fit_verdict(est.peak_bytes, card).status == DOES_NOT_FIT


def test_dropout_keeps_a_one_byte_mask_not_three_bytes():
    """g08 - g01: attention dropout 0.1 added 0.21 GiB measured; the old 3 B/score charge was 0.75 GiB."""
    base, drop = (next(r for r in records("measured.json") if r["name"] == n) for n in ("g01_base", "g08_dropout"))
    est = [estimate(*specs(r)) for r in (base, drop)]
    measured = [acc.h200_measured(r, e)[0] for r, e in zip((base, drop), est, strict=True)]
    delta_measured = measured[1] - measured[0]
    delta_est = est[1].peak_allocated_bytes - est[0].peak_allocated_bytes
    assert delta_measured == pytest.approx(0.21 * GIB, rel=0.1)
    assert delta_est == pytest.approx(delta_measured, rel=0.25)
    model, run = specs(drop)
    saved, _ = unfused_score_bytes(run)
    assert saved == 7  # fp32 probabilities (4) + bf16 dropped probabilities (2) + mask (1)


def test_foreach_adam_step_is_four_bytes_per_parameter():
    """g03 (sequence 1024) peaks in the optimizer step: 4 B/param of foreach temporaries."""
    record = next(r for r in records("measured.json") if r["name"] == "g03_s1024")
    step = next(s for s in record["steps"] if s["step"] == 2)
    measured = step["opt_step_peak_allocated"] - step["alloc_after_step"]
    assert measured / record["params"] == pytest.approx(4.0, abs=0.01)
    model, run = specs(record)
    stage = estimate(model, run).stages[0]
    assert stage.activations + stage.optimizer_step == pytest.approx(4 * record["params"], rel=0.001)


def test_flash_attention_goldens_keep_their_terms():
    """The H200 terms apply to the local transformer with the softmax in PyTorch only."""
    record = records("measured.json")[0]
    model, run = specs(record)
    assert est_mod.torch_softmax_attention(run)
    for other in (run.with_(transformer_impl="transformer_engine"), run.with_(masked_softmax_fusion=True)):
        assert not est_mod.torch_softmax_attention(other)
        assert est_mod.foreach_adam_bytes(other, 1e9, 16) == 0


def test_verdict_bands():
    gpu = 100 * GIB
    assert fit_verdict(101 * GIB, gpu).status == DOES_NOT_FIT
    assert fit_verdict(95 * GIB, gpu).status == BORDERLINE
    assert fit_verdict(90 * GIB, gpu).status == FITS  # exactly the band free
    assert fit_verdict(int(90.5 * GIB), gpu).status == BORDERLINE


def test_estimate_json_carries_the_verdict_and_model_state():
    out = invoke(
        "estimate_memory",
        "--megatron-args",
        str(H200 / "args" / "g04_s4096.sh"),
        "--gpus",
        "1",
        "--gpu",
        "H200",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    verdict = doc["verdict"]
    assert verdict["view"] == "device" and verdict["needed_bytes"] == doc["peak_bytes"]
    assert verdict["status"] == FITS and doc["fits"] is True
    assert doc["peak_bytes"] > doc["peak_allocated_bytes"]
    stage = doc["stages"][0]
    comps = stage["components"]
    assert doc["model_state_bytes"] == comps["weights"] + comps["gradients"] + comps["optimizer"]
    text = invoke("estimate_memory", "--megatron-args", str(H200 / "args" / "g04_s4096.sh"), "--gpus", "1")
    assert "model state (weights + gradients + optimizer states)" in text.stdout


def test_borderline_is_in_json_too():
    args = ("--megatron-args", str(H200 / "args" / "g04_s4096.sh"), "--gpus", "1", "--json")
    peak = json.loads(invoke("estimate_memory", *args).stdout)["peak_bytes"]
    out = invoke("estimate_memory", *args, "--gpu-memory", f"{int(peak / 0.95) // 2**20}MiB")
    doc = json.loads(out.stdout)
    assert doc["verdict"]["status"] == BORDERLINE and doc["fits"] is True


def test_linear_attention_is_refused_not_estimated_as_attention(tmp_path):
    script = (
        (H200 / "args" / "g01_base.sh")
        .read_text()
        .replace("--disable-bias-linear", "--disable-bias-linear --experimental-attention-variant gated_delta_net")
    )
    path = tmp_path / "qwen3_next_like.sh"
    path.write_text(script)
    out = invoke("estimate_memory", "--megatron-args", str(path), "--gpus", "1")
    assert out.returncode == 2
    # the reader refuses first, naming the flag; the estimator's own guard is checked below
    assert "--experimental-attention-variant" in out.stderr and "not modelled" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    model, run = specs(records("measured.json")[2])
    with pytest.raises(InputError, match="not modelled"):
        estimate(model, run.with_(unmodelled=("linear attention layers (--linear-attention-freq)",)))


def test_measured_gaps_lead_with_a_warning():
    model, run = specs(records("measured.json")[2])
    assert not estimate(model, run).warnings
    assert any("fp8 blockwise" in w for w in estimate(model, run.with_(fp8="blockwise")).warnings)


def test_the_verdict_sentence_opens_with_the_peak() -> None:
    """The verdict line is the one an agent quotes: every status gives the peak it judged, not
    only the headroom (a 1.5B agent quoted "24.4 GiB headroom" as the peak)."""
    for need in (50 * GIB, 75 * GIB, 90 * GIB):
        sentence = fit_verdict(need, 80 * GIB).sentence()
        assert f"needs {need / GIB:.2f} GiB on the most-loaded GPU" in sentence, sentence
