"""The run flags of estimate_memory.py / plan_memory.py in tests, written as keywords.

A run's flags as a literal tuple take one line per word once formatted, and the same
runs (the 13B model on 16 A100 40GB, DeepSeek-V3 on 1024 GPUs, Llama3-8B on 8 GPUs) were
spelled out again in test_ladder, test_output_schemas and test_plan_memory - about twenty
lines each time, free to drift apart. :func:`flags` writes a run in one or two lines, and
the runs several files plan are named here once.

Only words are built: each test still invokes the helper and asserts what it did before.
"""

from __future__ import annotations

from conftest import REPO_ROOT

#: A Hugging Face config.json of Llama 2 13B (tests/data/planner/SOURCE.md).
LLAMA2_13B = str(REPO_ROOT / "tests" / "data" / "planner" / "llama2-13b-config.json")

#: GPU memory as nvidia-smi reports it (memory.total, tests/data/planner/SOURCE.md).
A100_40, A100_80, H100, H200, B200 = "40960MiB", "81920MiB", "81559MiB", "143771MiB", "183359MiB"


def flags(**options: object) -> tuple[str, ...]:
    """Command-line words for ``options``, in the order given.

    ``gpu_memory="80GiB"`` -> ``--gpu-memory 80GiB``; ``True`` -> the bare flag
    (``--sequence-parallel``); ``False`` -> its ``--no-`` form (``--no-dist-opt``); any
    other value is written with ``str`` (``gpus=16`` -> ``--gpus 16``).
    """
    words: list[str] = []
    for key, value in options.items():
        name = "--" + key.replace("_", "-")
        if value is True:
            words.append(name)
        elif value is False:
            words.append("--no-" + name[2:])
        else:
            words += [name, str(value)]
    return tuple(words)


#: Issue 13's worked example: Llama 2 13B, TP2 PP2 on 16 A100 40GB, no optimizer sharding,
#: no sequence parallelism - does not fit.
LLAMA2_13B_16_A100_40 = flags(
    hf_config=LLAMA2_13B,
    gpus=16,
    tp=2,
    pp=2,
    mbs=2,
    gbs=256,
    seq_length=4096,
    gpu_memory=A100_40,
    dist_opt=False,
    sequence_parallel=False,
)

#: DeepSeek-V3 on 1024 GPUs: TP2 PP16 (one layer in the last stage) EP64 ETP1 (the GPU
#: memory, sequence length and sharding are each test's own).
DEEPSEEK_V3_1024 = flags(
    preset="deepseek-v3", gpus=1024, tp=2, pp=16, last_stage_layers=1, ep=64, etp=1, mbs=1, gbs=4096
)

#: Llama3-8B TP2 DP4 on 8 GPUs with sequence parallelism, seq 8192 (no GPU memory given).
LLAMA3_8B_8 = flags(preset="llama3-8b", gpus=8, tp=2, mbs=1, gbs=64, seq_length=8192, sequence_parallel=True)
