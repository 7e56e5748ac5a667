"""GPU names to the memory a training process can really use.

People write ``--gpu-memory 80GB`` for an H100, which is 80e9 bytes = 74.5 GiB, while the
card reports 81559 MiB = 79.6 GiB: a 5 GiB error in the fits/does-not-fit verdict. The
table of usable sizes is data (``data/gpus.yaml``, each entry with its source); this module
only looks names up and recognises a decimal size that is really a marketing label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from memtune.cli import InputError

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class Gpu:
    name: str
    usable_bytes: int
    marketing: str
    source: str


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]", "", str(text)).lower()


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, Gpu], tuple[Gpu, ...]]:
    from memtune.data_yaml import load_data_yaml
    from memtune.paths import DATA_DIR

    raw = (load_data_yaml(DATA_DIR / "gpus.yaml") or {}).get("gpus", {})
    by_key: dict[str, Gpu] = {}
    gpus = []
    for name, entry in raw.items():
        gpu = Gpu(name=name, usable_bytes=int(entry["usable_mib"]) * MIB, marketing=str(entry["marketing"]),
                  source=str(entry["source"]))
        gpus.append(gpu)
        for alias in (name, *entry.get("aliases", ())):
            by_key[_key(alias)] = gpu
    return by_key, tuple(gpus)


def gpu_names() -> tuple[str, ...]:
    return tuple(g.name for g in _table()[1])


def lookup_gpu(name: str) -> Gpu:
    """The GPU called ``name`` (any alias, any case); InputError listing the known ones."""
    gpu = _table()[0].get(_key(name))
    if gpu is None:
        raise InputError(f"--gpu {name!r}: unknown GPU; known: {', '.join(gpu_names())} "
                         "(or give --gpu-memory with the size nvidia-smi reports, e.g. 81559MiB)")
    return gpu


def marketing_size_warning(text: str, size_bytes: int) -> str | None:
    """A warning when ``--gpu-memory`` is a decimal size that equals a GPU's marketing label
    (80GB, 40GB, 141GB, ...): the card has a different usable size."""
    compact = _key(text)
    if not re.fullmatch(r"[0-9.]+gb", compact):
        return None
    matches = [g for g in _table()[1] if _key(g.marketing) == compact]
    if not matches:
        return None
    cards = "; ".join(f"{g.name} reports {g.usable_bytes / GIB:.1f} GiB ({g.usable_bytes // MIB} MiB)" for g in matches)
    return (f"WARNING: --gpu-memory {text} is {size_bytes / GIB:.1f} GiB (GB = 10^9 bytes), the marketing size; "
            f"{cards}. Use --gpu {matches[0].name} or the MiB figure nvidia-smi prints")
