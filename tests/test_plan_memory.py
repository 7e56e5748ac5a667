"""plan_memory.py end to end: the seed example, JSON contract, options, bad input."""

from __future__ import annotations

from itertools import pairwise

import pytest

from helper_cli import Result, invoke, invoke_json
from run_flags import LLAMA3_8B_8, flags


def run(*args: str) -> Result:
    return invoke("plan_memory", *args)


@pytest.fixture(scope="module")
def example_json() -> dict:
    return invoke_json("plan_memory", "--example", "--json", "--top", "50")


def test_example_text_names_the_first_step_exactly():
    out = run("--example", "--top", "50")
    assert out.returncode == 0, out.stderr
    fsdp_row = next(line for line in out.stdout.splitlines() if "Megatron-FSDP (optim_grads_params)" in line)
    assert "unknown" in fsdp_row and "+0.0%" not in fsdp_row
    assert "Recommended first step: set expandable segments" in out.stdout
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out.stdout
    assert "Rejected" in out.stdout and "CPU offloading" in out.stdout
    assert "Traceback" not in out.stderr


def test_example_json_has_the_table_content(example_json):
    doc = example_json
    assert doc["gpus"] == 32 and doc["model"] == "llama3-70b"
    rows = doc["ranked"]
    assert rows[0]["change"] == "set expandable segments"
    names = [r["change"] for r in rows]
    tp8 = names.index("TP 4->8")
    assert names.index("PP 4->8, VPP 5") < tp8
    # TP is the last priced change; only rows without a price (assumption / unknown) follow
    assert all(r["evidence_kind"] in ("assumption", "unknown") for r in rows[tp8 + 1 :])
    assert all(r["evidence_kind"] not in ("assumption", "unknown") for r in rows[: tp8 + 1])
    for r in rows:
        assert {"change", "peak_bytes", "headroom_bytes", "throughput_change", "evidence", "exact_change"} <= set(r)
        assert r["evidence"] and r["evidence_kind"] in {
            "measured",
            "calibrated",
            "first-principles",
            "assumption",
            "unknown",
        }
        # an unknown cost has no number in the JSON (never a misleading 0.0)
        assert (r["throughput_change"] is None) == (r["evidence_kind"] == "unknown")
    assert doc["recommendation"]["exact_change"]["env"][0].startswith("export PYTORCH_CUDA_ALLOC_CONF=")
    offload = [r for r in doc["rejected"] if r["change"].startswith("CPU offloading")]
    assert offload and all("pipeline_model_parallel_size > 1" in " ".join(r["reasons"]) for r in offload)


def test_top_limits_rows():
    doc = invoke_json("plan_memory", "--example", "--json", "--top", "3")
    assert len(doc["ranked"]) == 3 and doc["ranked_total"] > 3


def test_expandable_already_on_moves_the_recommendation_to_a_config_change():
    doc = invoke_json("plan_memory", "--example", "--json", "--expandable-segments", "on")
    rec = doc["recommendation"]
    assert rec["change"] != "set expandable segments"
    assert rec["exact_change"]["bridge_overrides"] or rec["exact_change"]["megatron_args"]


def test_nothing_fits_exits_zero_with_closest_candidates():
    doc = invoke_json("plan_memory", "--example", "--json", "--gpu-memory", "24GiB", "--headroom", "0%")
    assert doc["nothing_fits"] is True and doc["recommendation"] is None
    assert doc["closest"] and "over the limit" in doc["closest"][0]["blocked_by"]
    text = run("--example", "--gpu-memory", "24GiB", "--headroom", "0%")
    assert "Nothing fits" in text.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--example", "--top", "0"), "--top"),
        (("--example", "--headroom", "150%"), "--headroom"),
        (("--example", "--gpu-memory", "lots"), "lots"),
        (("--example", "--headroom", "much"), "--headroom"),
        (("--example", "--headroom", "200GiB"), "--headroom"),
        (("--example", "--expandable-segments", "maybe"), "expandable"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in out.stderr


def test_headroom_as_share_or_size():
    from memtune.commands.options import HEADROOM

    assert HEADROOM.convert("10%", None, None).bytes_of(1000) == 100
    assert HEADROOM.convert("1KiB", None, None).bytes_of(10**6) == 1024
    assert HEADROOM.convert("0%", None, None).bytes_of(10**6) == 0


def test_run_inputs_are_the_estimators(tmp_path):
    """The same flags as estimate_memory.py build the run (preset + plain flags)."""
    doc = invoke_json("plan_memory", *LLAMA3_8B_8, "--gpu-memory", "80GiB", "--json")
    assert doc["model"] == "llama3-8b" and doc["current"]["layout"] == "TP2 PP1 DP4"


def test_default_gpu_memory_is_the_h100s_reported_size_not_80_gib():
    """Without --gpu/--gpu-memory the plan assumes what an H100 80GB reports (81559 MiB from
    gpus.yaml), says so in its notes and in --help; an explicit size still wins."""
    base = (*LLAMA3_8B_8, "--json")
    doc = invoke_json("plan_memory", *base)
    assert doc["gpu_memory_bytes"] == 81559 * 2**20
    assert (
        "GPU memory not given: assumed H100-80GB: 81559MiB = 79.6 GiB; pass --gpu NAME or --gpu-memory" in doc["notes"]
    )
    explicit = invoke_json("plan_memory", *base, "--gpu-memory", "80GiB")
    assert explicit["gpu_memory_bytes"] == 80 * 2**30
    assert not any("not given" in n for n in explicit["notes"])
    assert "default when no size is given: the usable memory of --gpu H100-80GB" in " ".join(
        run("--help").stdout.split()
    )


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--preset", "no-such-model"), "no-such-model"),
        (("--preset", "llama3-70b", "--gpus", "30", "--tp", "4"), "not divisible"),
        (("--preset", "llama3-70b", "--gpus", "32", "--tp", "0"), "--tp"),
    ],
)
def test_estimator_input_errors_carry_over(args, needle):
    out = run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_capacity_shortfall_still_reminds_to_set_expandable_segments():
    short = flags(preset="llama3-70b", gpus=32, tp=4, pp=4, mbs=1, gbs=32, seq_length=8192, sequence_parallel=True)
    doc = invoke_json("plan_memory", *short, "--gpu-memory", "80GiB", "--json")
    assert doc["current"]["fits"] is False
    assert not any(r["change"] == "set expandable segments" for r in doc["ranked"])
    assert any("expandable_segments:True (free)" in n for n in doc["notes"])


def test_sweep_mode_ranks_combinations_with_evidence():
    doc = invoke_json("plan_memory", "--example", "--sweep", "--json", "--top", "5")
    rows = doc["ranked"]
    assert len(rows) == 5 and doc["ranked_total"] > 5
    assert all(r["evidence"] and r["peak_bytes"] <= doc["limit_bytes"] for r in rows)
    # the sweep ranks by speed, a gain that rests on an assumption or unknown counting as 0%
    changes = [
        min(0.0, r["throughput_change_modelled"])
        if r["evidence_kind"] in ("assumption", "unknown")
        else r["throughput_change_modelled"]
        for r in rows
    ]
    assert all(a >= b - 1e-3 for a, b in pairwise(changes))
    # rows whose cost has an unmodelled part say so instead of showing a number
    assert all((r["throughput_change"] is None) == (r["evidence_kind"] == "unknown") for r in rows)


def test_bridge_overrides_change_the_planned_run():
    doc = invoke_json("plan_memory", "--example", "model.pipeline_model_parallel_size=8", "--json")
    assert doc["current"]["layout"] == "TP4 PP8 VPP5 DP1"
    assert not any(r["change"] == "PP 4->8, VPP 5" for r in doc["ranked"])


def test_megatron_launch_flags_are_accepted(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
        "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention \\\n"
        "  --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 8192 \\\n"
        "  --max-position-embeddings 8192 --tensor-model-parallel-size 2 --sequence-parallel \\\n"
        "  --micro-batch-size 2 --global-batch-size 128 --vocab-size 128256 --bf16 \\\n"
        "  --use-distributed-optimizer\n"
    )
    doc = invoke_json("plan_memory", "--megatron-args", str(script), "--gpus", "8", "--gpu-memory", "40GiB", "--json")
    assert doc["current"]["layout"] == "TP2 PP1 DP4" and doc["gpus"] == 8
