"""run_spec.violations: the start-up refusals of Megatron-Core, one line each."""

from __future__ import annotations

import pytest

from memtune.spec.presets import load_preset
from memtune.spec.run_spec import FP8_RECIPES, RunSpec, violations

LLAMA8 = load_preset("llama3-8b")  # 32 layers
RUN = RunSpec(world_size=8, tp=2, mbs=1, gbs=32, sequence_parallel=True)


@pytest.mark.parametrize("layers, refused", [(31, False), (32, True), (40, True)])
def test_cpu_offloading_must_leave_a_layer_on_the_gpu(layers: int, refused: bool) -> None:
    found = [
        v
        for v in violations(LLAMA8, RUN.with_(cpu_offloading=True, cpu_offloading_num_layers=layers))
        if "CPU offloading can be done only for layers less than 32" in v
    ]
    assert bool(found) == refused
    if refused:
        assert f"cpu_offloading_num_layers {layers}" in found[0]


def test_offload_count_without_offloading_is_not_refused() -> None:
    assert violations(LLAMA8, RUN.with_(cpu_offloading_num_layers=32)) == []


@pytest.mark.parametrize("recipe", [*FP8_RECIPES, None])
def test_megatron_fp8_recipes_are_legal(recipe) -> None:
    assert violations(LLAMA8, RUN.with_(fp8=recipe)) == []


def test_unknown_fp8_recipe_is_refused_by_name() -> None:
    problems = violations(LLAMA8, RUN.with_(fp8="current"))
    assert len(problems) == 1 and "'current'" in problems[0] and "tensorwise" in problems[0]
