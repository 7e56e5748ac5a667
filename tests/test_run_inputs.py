"""The shared run description of estimate_memory.py and plan_memory.py."""

from __future__ import annotations

import pytest

from memtune.cli import InputError, make_parser
from memtune.run_inputs import add_input_arguments, load_model_and_run, parse_memory


def _parse(*argv: str):
    parser = make_parser("t", "t")
    add_input_arguments(parser)
    return parser.parse_args(argv)


def test_preset_and_flags_build_the_run():
    inputs = load_model_and_run(_parse("--preset", "llama3-70b", "--gpus", "32", "--tp", "4", "--pp", "4",
                                       "--vpp", "5", "--recompute-modules", "core_attn,mlp", "--gpu-memory", "80GB"))
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


@pytest.mark.parametrize("argv, needle", [
    (("--example", "--hf-config", "x.json"), "one model source"),
    (("--preset", "llama3-8b", "a.b=1"), "needs --config or --example"),
    ((), "no model given"),
])
def test_conflicting_or_missing_sources_are_one_line_errors(argv, needle):
    with pytest.raises(InputError, match=needle):
        load_model_and_run(_parse(*argv))


def test_parse_memory_units():
    assert parse_memory("80GiB") == parse_memory("80") == 80 * 2**30
    assert parse_memory("81559MiB") == 81559 * 2**20
    with pytest.raises(InputError):
        parse_memory("lots")
