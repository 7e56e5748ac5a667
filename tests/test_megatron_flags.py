"""Every Megatron-LM flag is classified by what it does to memory (data/megatron_flags.yaml).

The argument list in that file is Megatron-LM's own (arguments.py at the recorded commit); a
flag is modelled (read into the specs), memory-neutral, warned (changes memory, not modelled:
named in a leading warning) or refused (the estimate would be far off: no estimate).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from memtune.errors import InputError
from memtune.readers import megatron_args, tokenizer_vocab
from memtune.readers.megatron_args import flag_classes, specs_from_megatron_args

# the reader and the module it reads the tokenizer flags with
SOURCE = Path(megatron_args.__file__).read_text() + Path(tokenizer_vocab.__file__).read_text()
BASE = {
    "--num-layers": 4,
    "--hidden-size": 256,
    "--num-attention-heads": 8,
    "--seq-length": 1024,
    "--micro-batch-size": 1,
    "--global-batch-size": 8,
    "--vocab-size": 32000,
    "--bf16": True,
    "--use-distributed-optimizer": True,
}


def test_the_argument_list_is_megatron_lms_own_with_its_source() -> None:
    table = flag_classes()
    assert len(table.arguments) > 800  # arguments.py plus the dataclass-made flags
    for name in ("tensor_model_parallel_size", "overlap_param_gather", "linear_attention_freq", "num_layers"):
        assert name in table.arguments
    text = (Path(megatron_args.__file__).parents[1] / "data" / "megatron_flags.yaml").read_text()
    assert re.search(r"commit: [0-9a-f]{40}", text) and "megatron/training/arguments.py" in text


def test_every_argument_is_classified() -> None:
    table = flag_classes()
    unclassified = sorted(name for name in table.arguments if table.classify(name) == "unclassified")
    assert not unclassified, unclassified


def test_the_classes_do_not_overlap() -> None:
    table = flag_classes()
    groups = {
        "modelled": table.modelled,
        "names": table.names,
        "warned": set(table.warned),
        "refused": set(table.refused),
    }
    for a, first in groups.items():
        for b, second in groups.items():
            if a < b:
                assert not (set(first) & set(second)), (a, b, sorted(set(first) & set(second)))


def test_a_modelled_flag_is_read_by_the_reader() -> None:
    # each modelled name appears as a read of the flag mapping in readers/megatron_args.py
    # (or readers/tokenizer_vocab.py)
    unread = [
        name
        for name in flag_classes().modelled
        if not re.search(r'\(\s*(?:a|args),\s*"' + name + '"', SOURCE) and f'a.get("{name}"' not in SOURCE
    ]
    assert not unread, unread


def test_a_made_up_flag_is_not_classified() -> None:
    table = flag_classes()
    assert table.classify("tensor_model_paralel_size") == "unclassified"
    assert table.classify("overlap_param_gather") == "warned"
    assert table.classify("log_interval") == "neutral"
    assert table.classify("tensor_model_parallel_size") == "modelled"


def _notes(flags: dict[str, Any]) -> list[str]:
    return specs_from_megatron_args(flags, world_size=8)[2]


def test_overlap_param_gather_is_named_in_a_leading_warning() -> None:
    plain = _notes(BASE)
    gathered = _notes({**BASE, "--overlap-param-gather": True, "--overlap-grad-reduce": True})
    assert gathered != plain
    assert gathered[0].startswith("WARNING") and "--overlap-param-gather" in gathered[0]
    assert not any("overlap" in note for note in plain)
    # switched off in a mapping (an arguments dump) it changes nothing
    assert _notes({**BASE, "--overlap-param-gather": False}) == plain


def test_the_estimate_outputs_differ_with_and_without_overlap_param_gather(tmp_path: Path, invoke: Any) -> None:
    line = "torchrun --nproc_per_node 8 pretrain_gpt.py " + " ".join(
        f"{k} {v}" if v is not True else k for k, v in BASE.items()
    )
    plain, gathered = tmp_path / "plain.sh", tmp_path / "gather.sh"
    plain.write_text(line + "\n")
    gathered.write_text(line + " --overlap-param-gather\n")
    a = invoke("estimate_memory", "--megatron-args", str(plain))
    b = invoke("estimate_memory", "--megatron-args", str(gathered))
    assert a.exit_code == b.exit_code == 0
    assert b.stdout.startswith("WARNING") and "--overlap-param-gather" in b.stdout.splitlines()[0]
    assert a.stdout != b.stdout


@pytest.mark.parametrize(
    "extra",
    [
        {"--linear-attention-freq": 4},
        {"--experimental-attention-variant": "gated_delta_net"},
        {"--experimental-attention-variant": "gdn", "--linear-num-value-heads": 32},
    ],
)
def test_a_linear_attention_hybrid_is_refused_in_one_line(extra: dict[str, Any]) -> None:
    with pytest.raises(InputError) as caught:
        _notes({**BASE, **extra})
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "far off" in message
    assert message.startswith("--" + next(iter(extra)).lstrip("-"))


def test_sparse_attention_is_warned_not_refused() -> None:
    notes = _notes({**BASE, "--experimental-attention-variant": "dsa"})
    assert notes[0].startswith("WARNING") and "sparse attention" in notes[0]


@pytest.mark.parametrize(
    "method,layers,pp,expected",
    [
        ("type:transformer|embedding", 70, 12, (5,) + (6,) * 10 + (5,)),
        ("type:transformer|embedding", 30, 4, (7, 8, 8, 7)),
        ("'type:transformer|embedding'", 24, 2, None),  # 26 parts: 13 = 12 layers + embedding each side
        ("type:transformer", 30, 4, (8, 8, 7, 7)),
        ("uniform", 32, 4, None),
    ],
)
def test_deepspeed_pipeline_partition(method: str, layers: int, pp: int, expected: Any) -> None:
    got = megatron_args.deepspeed_pipeline_split(method, layers, pp)
    if expected is None:
        assert got is None or got == (layers // pp,) * pp
    else:
        assert got == expected and sum(got) == layers


def test_an_unknown_partition_method_is_refused() -> None:
    with pytest.raises(InputError, match="--pp-partition-method parameters"):
        megatron_args.deepspeed_pipeline_split("parameters", 30, 4)


def test_megatron_deepspeed_spellings_are_read() -> None:
    model, run, notes = specs_from_megatron_args(
        {**BASE, "--num-key-value-heads": 2, "--checkpoint-activations": True, "--zero-stage": 1}, world_size=8
    )
    assert model.num_query_groups == 2
    assert run.recompute_granularity == "full" and run.recompute_method == "uniform"
    assert run.use_distributed_optimizer
    _, _, stage2 = specs_from_megatron_args({**BASE, "--zero-stage": 2}, world_size=8)
    assert stage2[0].startswith("WARNING") and "ZeRO stage 2" in stage2[0]


@pytest.mark.parametrize(
    "name,vocab",
    [("gpt2", 50257), ("bigscience/tokenizer", 250680), ("t5-small", 32100), ("meta-llama/Llama-2-7b-hf", 32000)],
)
def test_tokenizer_names_give_their_vocabulary(name: str, vocab: int) -> None:
    flags = {k: v for k, v in BASE.items() if k != "--vocab-size"}
    model, _, notes = specs_from_megatron_args(
        {**flags, "--tokenizer-type": "PretrainedFromHF", "--tokenizer-name-or-path": name}, world_size=8
    )
    assert model.vocab_size == vocab
    assert any(str(vocab) in note and "ASSUMED" not in note for note in notes)


def test_a_tokenizer_name_that_only_contains_a_known_one_is_not_matched_exactly() -> None:
    flags = {k: v for k, v in BASE.items() if k != "--vocab-size"}
    model, _, _ = specs_from_megatron_args(
        {**flags, "--tokenizer-type": "PretrainedFromHF", "--tokenizer-name-or-path": "google/mt5-small"}, world_size=8
    )
    assert model.vocab_size != 32100  # mt5 is not t5: no exact match, so an assumed size


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"--cp-comm-type": "a2a"}, False),  # no context parallelism
        ({"--cp-comm-type": "p2p", "--context-parallel-size": 2}, False),  # what the estimate models
        ({"--cp-comm-type": "a2a", "--context-parallel-size": 2}, True),
        ({"--cp-comm-type": "['p2p']", "--context-parallel-size": 2}, False),  # an nargs flag's text
        ({"--cp-comm-type": ["p2p", "a2a"], "--context-parallel-size": 2}, True),  # a2a in some layers
    ],
)
def test_cp_comm_type_is_named_only_where_it_acts(extra, named):
    notes = specs_from_megatron_args({**BASE, **extra}, world_size=8)[2]
    assert any("cp-comm-type" in n or "cp_comm_type" in n for n in notes) is named, notes


@pytest.mark.parametrize(
    ("flag", "value", "switch"),
    [
        ("--num-layers-at-start-in-bf16", 2, "--first-last-layers-bf16"),
        ("--activation-offload-fraction", 0.5, "--fine-grained-activation-offloading"),
        ("--moe-paged-stash-page-size", 64, "--moe-paged-stash"),
        ("--fine-grained-offloading-max-inflight-offloads", 2, "--fine-grained-activation-offloading"),
        ("--delta-offload-bytes-across-pp-ranks", 1024, "--fine-grained-activation-offloading"),
        ("--delay-offload-until-cuda-graph", True, "--fine-grained-activation-offloading"),
    ],
)
def test_a_setting_is_named_only_with_the_switch_it_acts_under(flag, value, switch):
    """Megatron-Core reads these only when their switch is on (the same rule the Bridge reader
    applies, readers/switched_fields.py): without it the run holds nothing more."""
    key = flag.lstrip("-").replace("-", "_")

    def named(flags: dict) -> bool:
        notes = specs_from_megatron_args({**BASE, **flags}, world_size=8)[2]
        return any(flag in n or key in n for n in notes)

    assert not named({flag: value})
    assert named({flag: value, switch: True})
    assert not named({flag: value, switch: "false"})
