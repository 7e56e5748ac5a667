"""Hydra-style overrides on nested dicts."""

from __future__ import annotations

import pytest

from memtune.errors import InputError
from memtune.spec.overrides import apply_overrides, is_override, parse_override

BASE = {
    "model": {"tensor_model_parallel_size": 4, "recompute_modules": ["core_attn"]},
    "train": {"micro_batch_size": 1},
}


def test_set_add_force_delete():
    out = apply_overrides(
        BASE,
        [
            "model.tensor_model_parallel_size=8",
            "+model.context_parallel_size=2",
            "++train.micro_batch_size=2",
            "~model.recompute_modules",
            "model.recompute_modules=[core_attn,mlp]",
        ],
    )
    assert out["model"]["tensor_model_parallel_size"] == 8
    assert out["model"]["context_parallel_size"] == 2
    assert out["train"]["micro_batch_size"] == 2
    assert out["model"]["recompute_modules"] == ["core_attn", "mlp"]
    assert BASE["model"]["tensor_model_parallel_size"] == 4  # input untouched


def test_values_are_yaml_scalars():
    assert parse_override("a=true").value is True
    assert parse_override("a=null").value is None
    assert parse_override("a='4'").value == "4"
    assert parse_override("a=1e-4").value == "1e-4" or parse_override("a=1e-4").value == 1e-4
    assert parse_override("a=bf16_mixed").value == "bf16_mixed"


@pytest.mark.parametrize(
    "bad", ["=4", "model..tp=1", "model.tp", "+model.tensor_model_parallel_size=2", "~model.nothing"]
)
def test_bad_overrides_raise_one_line(bad):
    with pytest.raises(InputError) as info:
        apply_overrides(BASE, [bad])
    assert "\n" not in str(info.value)


def test_is_override():
    assert is_override("model.tp=4") and is_override("+a=1") and is_override("~a.b")
    assert not is_override("--tp") and not is_override("plainword")


def test_random_overrides_never_crash():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.text(max_size=40), max_size=3))
    def check(items):
        try:
            apply_overrides(BASE, items)
        except InputError:
            pass

    check()


def test_known_keys_turn_typos_into_errors_but_not_new_keys():
    from memtune.spec.overrides import refuse_misspelt

    known = {"model.tensor_model_parallel_size", "train.global_batch_size"}
    with pytest.raises(InputError, match="did you mean model.tensor_model_parallel_size"):
        apply_overrides({}, ["model.tensor_parallel_size=8"], known=known)
    with pytest.raises(InputError, match="did you mean train.global_batch_size"):
        refuse_misspelt("train.global_batch_sise=64", "train.global_batch_sise", known)
    # a new real key, a forced or added key, a key already in the config, no known list: all kept
    assert apply_overrides({}, ["model.encoder_pipeline_model_parallel_size=1"], known=known)
    assert apply_overrides({}, ["++model.tensor_parallel_size=8"], known=known)["model"]["tensor_parallel_size"] == 8
    assert apply_overrides({}, ["+model.tensor_parallel_size=8"], known=known)
    assert apply_overrides({"model": {"tensor_parallel_size": 1}}, ["model.tensor_parallel_size=8"], known=known)
    assert apply_overrides({}, ["model.tensor_parallel_size=8"])
