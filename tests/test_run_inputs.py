"""The shared run description of estimate_memory.py and plan_memory.py."""

from __future__ import annotations

import pytest

from memtune.commands.options import parse_run_options
from memtune.commands.run_inputs import load_model_and_run, parse_memory
from memtune.errors import InputError
from run_flags import flags


def _parse(*argv: str):
    return parse_run_options(list(argv))


def test_preset_and_flags_build_the_run():
    argv = flags(preset="llama3-70b", gpus=32, tp=4, pp=4, vpp=5, recompute_modules="core_attn,mlp", gpu_memory="80GB")
    inputs = load_model_and_run(_parse(*argv))
    run = inputs.run
    assert inputs.model.name.startswith("llama3-70b")
    assert (run.world_size, run.tp, run.pp, run.vpp, run.dp) == (32, 4, 4, 5, 2)
    assert run.recompute_granularity == "selective" and run.recompute_modules == ("core_attn", "mlp")
    assert inputs.gpu_memory_bytes == 80 * 10**9


def test_example_carries_its_gpu_memory_and_overrides_apply():
    inputs = load_model_and_run(_parse("--example", "model.pipeline_model_parallel_size=8"))
    assert inputs.run.pp == 8 and inputs.run.world_size == 32
    assert inputs.gpu_memory_bytes and 75 * 2**30 < inputs.gpu_memory_bytes <= 81 * 2**30


def test_no_gpu_memory_is_none_and_missing_gpus_is_a_note():
    inputs = load_model_and_run(_parse("--preset", "llama3-8b", "--tp", "2"))
    assert inputs.gpu_memory_bytes is None
    assert any("GPU count not given" in n for n in inputs.notes)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--example", "--hf-config", "x.json"), "one model source"),
        (("--preset", "llama3-8b", "a.b=1"), "needs --config or --example"),
        ((), "no model given"),
    ],
)
def test_conflicting_or_missing_sources_are_one_line_errors(argv, needle):
    with pytest.raises(InputError, match=needle):
        load_model_and_run(_parse(*argv))


def test_parse_memory_units():
    assert parse_memory("80GiB") == parse_memory("80") == 80 * 2**30
    assert parse_memory("81559MiB") == 81559 * 2**20
    with pytest.raises(InputError):
        parse_memory("lots")


@pytest.mark.parametrize(
    "text, fp8", [("tensorwise", "tensorwise"), ("MXFP8", "mxfp8"), ("none", None), ("None", None)]
)
def test_fp8_flag_takes_megatron_recipe_names(text: str, fp8) -> None:
    run = load_model_and_run(_parse("--example", "--fp8", text)).run
    assert run.fp8 == fp8


def test_fp8_flag_refuses_other_names() -> None:
    import click

    with pytest.raises(
        click.BadParameter, match="'current' is not one of 'delayed', 'tensorwise', 'mxfp8', 'blockwise'"
    ):
        _parse("--preset", "llama3-8b", "--fp8", "current")


def test_zero_memory_only_when_allowed() -> None:
    assert parse_memory("0GiB", allow_zero=True) == 0
    with pytest.raises(InputError, match="positive"):
        parse_memory("0GiB")


def test_misspelt_override_is_refused_and_plus_keeps_it() -> None:
    with pytest.raises(InputError, match="did you mean model.tensor_model_parallel_size"):
        load_model_and_run(_parse("--example", "model.tensor_parallel_size=8"))
    with pytest.raises(InputError, match="did you mean model.hidden_size"):  # architecture keys too
        load_model_and_run(_parse("--example", "model.hiden_size=4096"))
    with pytest.raises(InputError, match="did you mean ddp.overlap_grad_reduce"):  # keys the config itself has
        load_model_and_run(_parse("--example", "ddp.overlap_grad_reduse=false"))
    assert load_model_and_run(_parse("--example", "++model.tensor_parallel_size=8")).run.tp == 4


def test_list_presets_json_is_one_document(capsys) -> None:
    import json

    from memtune.commands.run_inputs import print_presets

    print_presets(as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert "llama3-8b" in [p["name"] for p in doc["presets"]] and all(p["source"] for p in doc["presets"])
    print_presets(as_json=False)
    assert "llama3-8b" in capsys.readouterr().out.split()


# ---------------------------------------------------------------- issue 12: GPU names and units
def test_gpu_names_give_the_size_the_driver_reports():
    inputs = load_model_and_run(_parse("--preset", "llama3-8b", "--gpus", "8", "--gpu", "h100"))
    assert inputs.gpu_memory_bytes == 81559 * 2**20  # nvidia-smi memory.total of an H100 80GB HBM3
    assert any("H100-80GB" in n for n in inputs.notes)
    assert (
        load_model_and_run(_parse("--preset", "llama3-8b", "--gpu", "A100-SXM4-40GB")).gpu_memory_bytes == 40960 * 2**20
    )
    assert load_model_and_run(_parse("--preset", "llama3-8b", "--gpu", "MI300X")).gpu_memory_bytes == 205822885888


def test_every_gpu_in_the_table_has_a_source_and_a_size_below_its_label_plus_margin():
    from memtune.spec.gpus import _table, lookup_gpu

    sized = [g for g in _table()[1] if g.usable_bytes is not None]
    assert len(sized) >= 15  # sizes are the point of the table; unsized entries are the exception
    for gpu in _table()[1]:
        assert gpu.source and lookup_gpu(gpu.name) is gpu
        assert gpu.vendor in ("nvidia", "amd") and 7.0 <= gpu.compute_capability < 13
    for gpu in sized:
        label = float(gpu.marketing.rstrip("GB"))
        assert 0.9 * label * 1e9 < gpu.usable_bytes < 1.1 * label * 1e9


def test_a_gpu_without_a_recorded_size_asks_for_gpu_memory_instead_of_guessing():
    with pytest.raises(InputError, match=r"--gpu L40: its usable memory is not recorded.*--gpu-memory"):
        load_model_and_run(_parse("--preset", "llama3-8b", "--gpu", "L40"))
    # the same name is fine where only the compute capability matters (check_env)
    from memtune.spec.gpus import lookup_gpu

    assert lookup_gpu("L40").compute_capability == 8.9


def test_bare_gpu_memory_number_says_it_was_read_as_gib_and_points_at_the_gpu_name():
    inputs = load_model_and_run(_parse("--preset", "llama3-8b", "--gpu-memory", "80"))
    assert inputs.gpu_memory_bytes == 80 * 2**30
    first = inputs.notes[0]
    assert first.startswith("WARNING") and "no unit: read as 80 GiB (85.9 GB)" in first
    assert "H100-80GB reports 79.6 GiB (81559 MiB)" in first and "--gpu H100-80GB" in first
    # a bare number that is no card's label: an assumption line, not a warning
    other = load_model_and_run(_parse("--preset", "llama3-8b", "--gpu-memory", "70"))
    assert not any(n.startswith("WARNING") for n in other.notes)
    assert any("--gpu-memory 70 has no unit: read as 70 GiB" in n for n in other.notes)
    # a size with its unit says nothing about units
    quiet = load_model_and_run(_parse("--preset", "llama3-8b", "--gpu-memory", "79.6GiB"))
    assert not any("no unit" in n for n in quiet.notes)


def test_bare_number_note_reaches_estimate_json_warnings(capsys):
    import json

    from memtune.commands import estimate_memory

    assert (
        estimate_memory.main(
            ["--preset", "llama3-8b", "--gpus", "8", "--tp", "2", "--gbs", "128", "--gpu-memory", "80", "--json"]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_memory_bytes"] == 80 * 2**30
    assert any("read as 80 GiB" in w and "--gpu H100-80GB" in w for w in doc["warnings"])
    assert any("read as 80 GiB" in a for a in doc["assumptions"])


def test_gpu_memory_help_teaches_units_and_the_gpu_names_it_lists_exist():
    import click

    from memtune.commands import estimate_memory
    from memtune.commands.run_inputs import GPU_NAMES_FOR_HELP
    from memtune.spec.gpus import lookup_gpu

    with click.Context(estimate_memory.command, info_name="estimate_memory.py") as ctx:
        text = " ".join(estimate_memory.command.get_help(ctx).split())
    assert "a bare number (80) or G means GiB" in text and "81559MiB = 79.6 GiB" in text
    assert "GB = 10^9 bytes (80GB is only 74.5 GiB)" in text
    for name in GPU_NAMES_FOR_HELP:
        assert name in text and lookup_gpu(name).name == name and lookup_gpu(name).usable_bytes
    examples = estimate_memory.EPILOG.split("examples:\n")[1].split("\n\n")[0].splitlines()
    assert len(examples) >= 7
    assert all(line.startswith("  python3 scripts/estimate_memory.py ") for line in examples)  # copy-paste runnable


def test_marketing_size_warns_and_unknown_gpu_or_both_flags_refused():
    inputs = load_model_and_run(_parse("--preset", "llama3-8b", "--gpu-memory", "80GB"))
    assert inputs.gpu_memory_bytes == 80 * 10**9
    assert inputs.notes[0].startswith("WARNING") and "74.5 GiB" in inputs.notes[0] and "79.6 GiB" in inputs.notes[0]
    quiet = load_model_and_run(_parse("--preset", "llama3-8b", "--gpu-memory", "81559MiB"))
    assert not any(n.startswith("WARNING") for n in quiet.notes)
    with pytest.raises(InputError, match="unknown GPU"):
        load_model_and_run(_parse("--preset", "llama3-8b", "--gpu", "Z100"))
    with pytest.raises(InputError, match="not both"):
        load_model_and_run(_parse("--preset", "llama3-8b", "--gpu", "H100", "--gpu-memory", "80GiB"))
