"""Where Megatron puts the decoder layers: MoE layer patterns and pipeline splits.

Megatron-LM spells a non-uniform pipeline several ways - ``--pipeline-model-parallel-layout``,
a hybrid layer pattern with ``|`` stage breaks, Megatron-DeepSpeed's ``--pp-partition-method`` -
and the MoE layers as ``--moe-layer-freq``; each is turned into plain numbers here (layers per
stage, virtual stages, a 0/1 pattern) for the specs. Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

from memtune.errors import InputError


def parse_layer_pattern(value: Any, num_layers: int) -> tuple[int, ...] | None:
    """--moe-layer-freq: an int N (every N-th layer is MoE), a list, or '([0]*3+[1]*12)'."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(f"--moe-layer-freq: expected an integer or a pattern, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise InputError(f"--moe-layer-freq must be positive, got {value}")
        return tuple(1 if i % value == 0 else 0 for i in range(num_layers))
    if isinstance(value, (list, tuple)):
        if not all(str(x).strip() in ("0", "1") for x in value):
            raise InputError(f"--moe-layer-freq: a list must hold 0/1 flags, got {value!r}")
        if len(value) != num_layers:
            raise InputError(f"--moe-layer-freq pattern has {len(value)} entries but --num-layers is {num_layers}")
        return tuple(int(str(x).strip()) for x in value)
    text = str(value).replace(" ", "")
    if text.isdigit():
        return parse_layer_pattern(int(text), num_layers)
    text = text.strip("()")
    out: list[int] = []
    for part in text.split("+"):
        m = re.fullmatch(r"\[([0-9,]*)\](?:\*(\d+))?", part)
        if not m:
            raise InputError(f"--moe-layer-freq: cannot read pattern {value!r}; use e.g. '([0]*3+[1]*12)'")
        items = [int(x) for x in m.group(1).split(",") if x]
        out.extend(items * int(m.group(2) or 1))
    if len(out) != num_layers:
        raise InputError(f"--moe-layer-freq pattern has {len(out)} entries but --num-layers is {num_layers}")
    return tuple(out)


def deepspeed_pipeline_split(method: Any, layers: int, pp: int, tied: bool = True) -> tuple[int, ...] | None:
    """Megatron-DeepSpeed ``--pp-partition-method``: decoder layers per stage, or None for the
    uniform split Megatron-LM makes.

    ``type:transformer|embedding`` balances the layers whose class matches (the transformer
    layers and the embedding, plus the tied output embedding at the end) in equal parts, the
    first stages taking one more when they do not divide (DeepSpeed's uniform partition); so 70
    layers + 2 embeddings over PP 12 is 6 units a stage: 5 layers on the first and last stage,
    6 between. ``parameters`` balances by parameter count, which is the same split for equal layers
    with the embedding counted as layers, and is refused rather than guessed.
    """
    if method is None or pp <= 1:
        return None
    text = str(method).strip().strip("'\"").lower()
    if text in ("uniform", "type:transformer"):
        units = ["t"] * layers
    elif text in ("type:transformer|embedding", "type:embedding|transformer"):
        units = ["e"] + ["t"] * layers + (["e"] if tied else [])
    else:
        raise InputError(
            f"--pp-partition-method {method}: only 'uniform', 'type:transformer' and 'type:transformer|embedding' "
            "are modelled; pass the layers per stage with --first-stage-layers/--last-stage-layers or use one of those"
        )
    if len(units) < pp:
        raise InputError(f"--pp-partition-method {method}: {len(units)} parts cannot fill {pp} pipeline stages")
    size, extra = divmod(len(units), pp)
    out: list[int] = []
    start = 0
    for stage in range(pp):
        end = start + size + (1 if stage < extra else 0)
        out.append(units[start:end].count("t"))
        start = end
    if text == "uniform" or (text == "type:transformer" and layers % pp == 0):
        return None if layers % pp == 0 else tuple(out)
    return tuple(out)


def parse_pipeline_layout(layout: str, pp: int) -> tuple[tuple[int, ...], int]:
    """--pipeline-model-parallel-layout 'Et*3|(tt|)*6L' -> (decoder layers per stage, vpp)."""
    text = str(layout).replace(" ", "").replace('"', "").replace("'", "")
    # expand '(x)*n' then 't*n'
    for _ in range(10):
        new = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
        if new == text:
            break
        text = new
    text = re.sub(r"([A-Za-z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    chunks = text.split("|")
    if len(chunks) % pp:
        raise InputError(f"--pipeline-model-parallel-layout has {len(chunks)} stages, not a multiple of PP {pp}")
    vpp = len(chunks) // pp
    per_stage = [0] * pp
    for i, chunk in enumerate(chunks):
        per_stage[i % pp] += chunk.count("t")
    return tuple(per_stage), vpp


def hybrid_pipeline_split(pattern: str, pp: int) -> tuple[tuple[int, ...], int]:
    """'M-M*|M-M-|...' -> (layers per PP stage, VPP chunks): in a hybrid pattern '|' ends a
    pipeline segment, and segment i runs on stage i mod PP (Megatron's hybrid layer
    allocation), so segments / PP is the number of virtual stages."""
    segments = str(pattern).split("/")[0].split("|")
    if len(segments) % pp:
        raise InputError(f"hybrid layer pattern has {len(segments)} pipeline segments, not a multiple of PP {pp}")
    per_stage = [0] * pp
    for i, segment in enumerate(segments):
        per_stage[i % pp] += len(segment.strip())
    return tuple(per_stage), len(segments) // pp
