"""Megatron-LM flags from launch text or a flag mapping."""

from __future__ import annotations

import json

import pytest

from memtune.errors import InputError
from memtune.readers.megatron_args import (
    load_megatron_args,
    parse_launch_text,
    parse_layer_pattern,
    parse_pipeline_layout,
    specs_from_megatron_args,
)

LAUNCH = r"""#!/bin/bash
#SBATCH --nodes=4
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 \
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
    --swiglu --untie-embeddings-and-output-weights \
    --tensor-model-parallel-size=2 --pipeline-model-parallel-size 2 \
    --recompute-granularity selective --recompute-modules core_attn mlp \
    --micro-batch-size 1 --global-batch-size 64 --seq-length 8192 \
    --vocab-size 128256 --tokenizer-type HuggingFaceTokenizer \
    --bf16 --use-distributed-optimizer --sequence-parallel  # comment
"""


def test_launch_text_with_continuations():
    flags = parse_launch_text(LAUNCH)
    assert flags["--num-layers"] == 32
    assert flags["--tensor-model-parallel-size"] == 2
    assert flags["--recompute-modules"] == ["core_attn", "mlp"]
    assert flags["--swiglu"] is True


def test_launch_text_is_read_like_check_env_reads_it():
    # shell variables expand (check_env's reader), the training command's flags win over a
    # helper python command's, and a bare list of flags (no command) still reads
    text = (
        'TP=4\nGPT_ARGS="--num-layers 8 --hidden-size 512"\n'
        "python tools/preprocess.py --workers 4\n"
        "torchrun --nproc-per-node 8 pretrain_gpt.py $GPT_ARGS \\\n"
        "    --num-attention-heads 8 --tensor-model-parallel-size $TP --seq-length ${SEQ:-2048}\n"
    )
    flags = parse_launch_text(text)
    assert flags["--tensor-model-parallel-size"] == 4 and flags["--num-layers"] == 8
    assert flags["--seq-length"] == 2048 and "--workers" not in flags  # a helper command is not the run
    assert parse_launch_text("--num-layers 4 \\\n  --swiglu\n") == {"--num-layers": 4, "--swiglu": True}


def test_specs_from_launch_text():
    model, run, _ = specs_from_megatron_args(parse_launch_text(LAUNCH), world_size=32)
    assert model.query_groups == 8 and model.gated_linear_unit and model.ffn == 10880  # Megatron: int(8h/3 / 64) * 64
    assert run.tp == 2 and run.pp == 2 and run.dp == 8 and run.num_microbatches == 8
    assert run.recompute_modules == ("core_attn", "mlp") and run.grad_reduce_in_fp32


def test_mapping_file_and_model_config_yaml(tmp_path):
    p = tmp_path / "model_config.yaml"
    p.write_text(
        "MODEL_ARGS:\n  --num-layers: 12\n  --hidden-size: 512\n  --num-attention-heads: 8\n"
        "  --seq-length: 1024\n  --micro-batch-size: 4\n"
    )
    model, run, notes = specs_from_megatron_args(load_megatron_args(p), world_size=8)
    assert model.vocab_size == 50257 and any("GPT-2" in n for n in notes)
    assert (
        model.add_bias_linear and model.normalization == "LayerNorm" and not model.untie_embeddings_and_output_weights
    )
    assert run.hidden_dropout == 0.1
    j = tmp_path / "args.json"
    j.write_text(json.dumps({"--num-layers": 2, "--hidden-size": 64, "--num-attention-heads": 4}))
    assert load_megatron_args(j)["--num-layers"] == 2


def test_moe_layer_freq_patterns():
    assert parse_layer_pattern("([0]*3+[1]*2)", 5) == (0, 0, 0, 1, 1)
    assert parse_layer_pattern(2, 4) == (1, 0, 1, 0)
    with pytest.raises(InputError, match="5 entries"):
        parse_layer_pattern("([0]*3+[1]*2)", 6)


def test_pipeline_layout():
    assert parse_pipeline_layout("Et*3|(tt|)*6L", 2) == ((9, 6), 4)


def test_missing_core_flags_named():
    with pytest.raises(InputError, match="--hidden-size, --num-attention-heads"):
        specs_from_megatron_args({"--num-layers": 2})


def test_unparsable_inputs(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_megatron_args(bad)
    empty = tmp_path / "launch.sh"
    empty.write_text("echo hello\n")
    with pytest.raises(InputError, match="no --flags"):
        load_megatron_args(empty)
    with pytest.raises(InputError, match="expected an integer"):
        specs_from_megatron_args({"--num-layers": "many", "--hidden-size": 64, "--num-attention-heads": 4})


FLAG_NAMES = sorted(
    {
        k
        for c in json.loads(
            (
                __import__("pathlib").Path(__file__).parent / "data" / "estimator" / "megatron-lm-calibration.json"
            ).read_text()
        )
        for k in c["megatron_args"]
    }
)


def test_random_flag_values_never_crash():
    """Any flag mix either estimates or is an InputError - never another exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from memtune.estimate.estimator import estimate

    values = st.one_of(
        st.none(),
        st.integers(-3, 300),
        st.floats(allow_nan=True),
        st.text(max_size=6),
        st.lists(st.integers(0, 2), max_size=3),
    )

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(FLAG_NAMES), values), max_size=10), st.integers(1, 64))
    def check(pairs, world):
        flags = {"--num-layers": 4, "--hidden-size": 64, "--num-attention-heads": 4}
        flags.update({k: (True if v is None else v) for k, v in pairs})
        try:
            model, run, _ = specs_from_megatron_args(flags, world_size=world)
            estimate(model, run)
        except InputError:
            pass

    check()


def test_random_launch_text_never_crashes():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(st.text(max_size=120))
    def check(text):
        try:
            specs_from_megatron_args(parse_launch_text(text))
        except InputError:
            pass

    check()


# ---------------------------------------------------------------- issue 12: inputs people trip on
BASE_FLAGS = {
    "--num-layers": 4,
    "--hidden-size": 1024,
    "--num-attention-heads": 16,
    "--seq-length": 2048,
    "--micro-batch-size": 1,
    "--bf16": True,
}


def test_vocab_from_a_known_tokenizer_or_a_stated_assumption():
    # Megatron-LM's release tests name the Nemotron-4 SentencePiece model by file, behind ${DATA_PATH}
    model, _, notes = specs_from_megatron_args(
        {
            **BASE_FLAGS,
            "--tokenizer-type": "GPTSentencePieceTokenizer",
            "--tokenizer-model": "${DATA_PATH}/utils/nemotron_2_256k.model",
        }
    )
    assert model.vocab_size == 256000 and any("256000" in n and "nemotron_2_256k" in n for n in notes)
    model, _, notes = specs_from_megatron_args(
        {**BASE_FLAGS, "--tokenizer-type": "Llama2Tokenizer", "--tokenizer-model": "/data/tokenizer.model"}
    )
    assert model.vocab_size == 32000
    model, _, notes = specs_from_megatron_args(
        {**BASE_FLAGS, "--tokenizer-type": "HuggingFaceTokenizer", "--tokenizer-model": "/models/mine"}
    )
    assert model.vocab_size == 32000 and any("ASSUMED" in n for n in notes)
    model, _, notes = specs_from_megatron_args({**BASE_FLAGS, "--tokenizer-type": "${TOKENIZER_TYPE}"})
    assert any("ASSUMED" in n and "unresolved" in n for n in notes)
    model, _, _ = specs_from_megatron_args({**BASE_FLAGS, "--tokenizer-type": "Llama2Tokenizer", "--vocab-size": 1234})
    assert model.vocab_size == 1234


def test_recompute_activations_is_selective_core_attention():
    _, run, notes = specs_from_megatron_args({**BASE_FLAGS, "--recompute-activations": True})
    assert run.recompute_granularity == "selective" and run.recompute_modules == ("core_attn",)
    assert any("--recompute-activations" in n for n in notes)
    _, run, _ = specs_from_megatron_args(
        {**BASE_FLAGS, "--recompute-activations": True, "--recompute-granularity": "full"}
    )
    assert run.recompute_granularity == "full"


def test_largest_step_of_a_batch_schedule_and_ignored_flags_listed():
    _, run, notes = specs_from_megatron_args(
        {
            **BASE_FLAGS,
            "--step-batch-size-schedule": "0:384 200B:768 400B:1152",
            "--some-new-memory-flag": 3,
            "--log-interval": 1,
            "--lr": 1e-4,
        }
    )
    assert run.gbs == 1152
    ignored = [n for n in notes if n.startswith("ignored flags")]
    assert ignored and "--some-new-memory-flag" in ignored[0]
    assert "--log-interval" not in ignored[0] and "--lr" not in ignored[0] and "--num-layers" not in ignored[0]


def test_a_modelled_flag_the_reading_did_not_need_is_not_called_unknown():
    """With --bf16 the fp32 gradient buffer is settled before --accumulate-allreduce-grads-in-fp32
    is consulted; the flag is still Megatron-LM's own and modelled, so it is not 'ignored'."""
    _, run, notes = specs_from_megatron_args(
        {**BASE_FLAGS, "--bf16": True, "--accumulate-allreduce-grads-in-fp32": True}
    )
    assert run.grad_reduce_in_fp32
    assert not any("accumulate-allreduce" in n for n in notes if n.startswith("ignored flags"))


def test_hybrid_pattern_gives_layers_kinds_and_the_pipeline_split():
    flags = {k: v for k, v in BASE_FLAGS.items() if k != "--num-layers"}
    model, run, _ = specs_from_megatron_args({**flags, "--hybrid-layer-pattern": "M-M*-M-"})
    assert model.num_layers == 7 and model.layer_kinds() == tuple("M-M*-M-") and run.stage_layers is None
    # '|' ends a pipeline segment; segment i runs on stage i mod PP (here 4 segments, PP 2: VPP 2)
    model, run, _ = specs_from_megatron_args(
        {**flags, "--hybrid-layer-pattern": "M-M*|M-M-|M*|M-", "--pipeline-model-parallel-size": 2}
    )
    assert model.num_layers == 12 and run.stage_layers == (6, 6) and run.vpp == 2
    from memtune.spec.model_spec import hybrid_stage_kinds

    assert hybrid_stage_kinds(model.hybrid_layer_pattern, (6, 6)) == ("M-M*M*", "M-M-M-")
    with pytest.raises(InputError, match="not modelled"):
        specs_from_megatron_args({**flags, "--hybrid-layer-pattern": "MGM*"})
    with pytest.raises(InputError, match="--hybrid-layer-pattern"):
        specs_from_megatron_args({**BASE_FLAGS, "--is-hybrid-model": True})
    with pytest.raises(InputError, match="not a literal pattern"):
        specs_from_megatron_args({**BASE_FLAGS, "--hybrid-override-pattern": "${PATTERN}"})


def test_world_size_from_the_launcher_or_a_loud_warning():
    from memtune.readers.megatron_args import launch_world_size

    assert launch_world_size(LAUNCH)[0] == 32  # #SBATCH --nodes=4 x torchrun --nproc-per-node 8
    resolved = "GPUS_PER_NODE=8\nNNODES=${NNODES:-2}\ntorchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES train.py --num-layers 2\n"
    assert launch_world_size(resolved)[0] == 16
    world, note = launch_world_size(
        "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES train.py --num-layers 2\n"
    )
    assert world is None and note.startswith("WARNING") and "$NNODES" in note and "--gpus" in note


def test_legacy_models_flag_is_a_warning_not_silence():
    _, _, notes = specs_from_megatron_args({**BASE_FLAGS, "--use-legacy-models": True})
    assert any(n.startswith("WARNING") and "--use-legacy-models" in n for n in notes)


def test_capacity_padding_flag_is_read():
    flags = {
        **BASE_FLAGS,
        "--num-experts": 8,
        "--moe-expert-capacity-factor": 1.25,
        "--moe-pad-expert-input-to-capacity": True,
    }
    _, run, notes = specs_from_megatron_args(flags)
    assert run.moe_expert_capacity_factor == 1.25 and run.moe_pad_expert_input_to_capacity
    assert not any(n.startswith("ignored flags") and "capacity" in n for n in notes)


def test_swiglu_fusion_flag_is_read():
    """Megatron-LM fuses bias + SwiGLU unless --no-bias-swiglu-fusion (an arguments dump spells
    it bias_swiglu_fusion: False); the unfused GLU keeps two more FFN-wide tensors per layer."""
    swiglu = {**BASE_FLAGS, "--swiglu": True}
    _, run, notes = specs_from_megatron_args(swiglu)
    assert run.bias_activation_fusion
    _, run, notes = specs_from_megatron_args({**swiglu, "--no-bias-swiglu-fusion": True})
    assert not run.bias_activation_fusion
    assert not any(n.startswith("ignored flags") and "swiglu" in n for n in notes)
    _, run, _ = specs_from_megatron_args({**swiglu, "--bias-swiglu-fusion": False})
    assert not run.bias_activation_fusion


def test_an_old_flag_is_told_apart_from_a_flag_megatron_never_had():
    """A flag of an earlier Megatron-LM release is real but unmodelled; a misspelt one stops
    Megatron-LM's parser, and the nearest real flag is offered."""
    _, _, notes = specs_from_megatron_args(
        {**BASE_FLAGS, "--overlap-p2p-communication": True, "--recompute-granularty": "full", "--zzz-flag": 1}
    )
    old = [n for n in notes if n.startswith("ignored flags of earlier Megatron-LM releases")]
    never = [n for n in notes if n.startswith("ignored flags (not Megatron-LM flags at any commit")]
    assert old and "--overlap-p2p-communication" in old[0] and "--zzz-flag" not in old[0]
    assert never and "--recompute-granularty (did you mean --recompute-granularity?)" in never[0]
    assert "--zzz-flag" in never[0] and "--zzz-flag (did you mean" not in never[0]
