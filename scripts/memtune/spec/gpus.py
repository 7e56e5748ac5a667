"""GPU names to what the helpers need to know about the card: usable memory and compute capability.

People write ``--gpu-memory 80GB`` for an H100, which is 80e9 bytes = 74.5 GiB, while the
card reports 81559 MiB = 79.6 GiB: a 5 GiB error in the fits/does-not-fit verdict. And
check_env needs the compute capability (Megatron-Core's CUDA-graph guard applies below 10).
Both facts live in one table (``data/gpus.yaml``, each entry with its sources) so that
estimate_memory, plan_memory and check_env accept exactly the same names; this module only
looks names up and recognises a decimal size that is really a marketing label.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from memtune.errors import InputError
from memtune.units import GIB, MIB

#: Words nvidia-smi / rocm-smi put around the model name that never identify the card.
_VENDOR_WORDS = ("nvidia", "tesla", "amd", "instinct")
#: Form-factor suffixes glued to a model token ("h100sxm5", "a100pcie") that do not change
#: the compute capability; stripped only when the full name is not itself an alias.
_FORM_SUFFIX = re.compile(r"(sxm|pcie|nvl|hbm)\d*[a-z]*$")


@dataclass(frozen=True)
class Gpu:
    name: str
    vendor: str
    compute_capability: float
    usable_bytes: int | None  # None: no public driver figure recorded (ask for --gpu-memory)
    marketing: str | None
    source: str


def _key(text: str) -> str:
    return re.sub(r"[\s_\-]", "", str(text)).lower()


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, Gpu], tuple[Gpu, ...]]:
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    raw = (load_data_yaml(DATA_DIR / "gpus.yaml") or {}).get("gpus", {})
    by_key: dict[str, Gpu] = {}
    gpus = []
    for name, entry in raw.items():
        usable = entry.get("usable_mib")
        gpu = Gpu(
            name=name,
            vendor=str(entry["vendor"]),
            compute_capability=float(entry["compute_capability"]),
            usable_bytes=int(usable) * MIB if usable is not None else None,
            marketing=str(entry["marketing"]) if entry.get("marketing") else None,
            source=str(entry["source"]),
        )
        gpus.append(gpu)
        for alias in (name, *entry.get("aliases", ())):
            by_key.setdefault(_key(alias), gpu)
    return by_key, tuple(gpus)


def gpu_names() -> tuple[str, ...]:
    return tuple(g.name for g in _table()[1])


def _find(name: str) -> Gpu | None:
    """The table entry ``name`` means: an alias as written, else the name without vendor
    words ("NVIDIA H100 80GB HBM3"), else a model token plus its size token ("H100 ... 80GB"),
    else the model token without its form-factor suffix ("H100-SXM5-80GB" -> H100)."""
    by_key = _table()[0]
    words = [w for w in re.split(r"[\s\-_/,()]+", str(name).strip().lower()) if w]
    words = [w for w in words if w not in _VENDOR_WORDS]
    for candidate in (_key(name), "".join(words)):
        if candidate in by_key:
            return by_key[candidate]
    for i, word in enumerate(words):
        sizes = [w for w in words[i + 1 :] if re.fullmatch(r"\d+gb?", w)]
        model = _FORM_SUFFIX.sub("", word) or word
        for candidate in ([model + sizes[0].rstrip("gb") + "gb"] if sizes else []) + [word, model]:
            if candidate in by_key:
                return by_key[candidate]
    return None


_MEMORY_FALLBACK = "or give --gpu-memory with the size nvidia-smi reports, e.g. 81559MiB"


def lookup_gpu(name: str, flag: str = "--gpu", fallback: str = _MEMORY_FALLBACK) -> Gpu:
    """The GPU called ``name`` (any alias, any case, or the name nvidia-smi prints);
    InputError with the closest known names otherwise (``fallback`` says what else the
    caller's helper accepts instead of a name)."""
    gpu = _find(name)
    if gpu is None:
        by_key = _table()[0]
        close = difflib.get_close_matches(_key(name), list(by_key), n=3, cutoff=0.6)
        names = list(dict.fromkeys(by_key[k].name for k in close))
        hint = f"did you mean {' or '.join(names)}? " if names else ""
        raise InputError(f"{flag} {name!r}: unknown GPU; {hint}known: {', '.join(gpu_names())} ({fallback})")
    return gpu


def usable_memory(gpu: Gpu, flag: str = "--gpu") -> int:
    """The GPU's usable bytes; InputError when the table has no driver figure for it."""
    if gpu.usable_bytes is None:
        raise InputError(
            f"{flag} {gpu.name}: its usable memory is not recorded in gpus.yaml; give --gpu-memory "
            "with the MiB figure nvidia-smi prints for it (memory.total, e.g. 81559MiB on an H100 80GB)"
        )
    return gpu.usable_bytes


def marketing_size_warning(text: str, size_bytes: int) -> str | None:
    """A warning when ``--gpu-memory`` is a decimal size that equals a GPU's marketing label
    (80GB, 40GB, 141GB, ...): the card has a different usable size."""
    compact = _key(text)
    if not re.fullmatch(r"[0-9.]+gb", compact):
        return None
    matches = _with_label(compact)
    if not matches:
        return None
    return (
        f"WARNING: --gpu-memory {text} is {size_bytes / GIB:.1f} GiB (GB = 10^9 bytes), the marketing size; "
        f"{_cards(matches)}. Use --gpu {matches[0].name} or the MiB figure nvidia-smi prints"
    )


def bare_number_note(text: str, size_bytes: int) -> str | None:
    """How a unit-less ``--gpu-memory`` (``80``) was read: as GiB. A WARNING when the number
    is also a marketing label (80 for an "80GB" card, whose usable size is neither 80 GiB
    nor 80 GB); a plain assumption otherwise. None when the text has a unit."""
    compact = _key(text)
    if not re.fullmatch(r"[0-9]*\.?[0-9]+", compact):
        return None
    matches = _with_label(compact + "gb")
    read = f"--gpu-memory {text} has no unit: read as {text} GiB ({size_bytes / 1e9:.1f} GB)"
    if not matches:
        return f"{read}; write the unit (GiB, or MiB as nvidia-smi prints it) or use --gpu NAME"
    return f"WARNING: {read}; {_cards(matches)}. Use --gpu {matches[0].name} or the MiB figure nvidia-smi prints"


def _with_label(compact_label: str) -> list[Gpu]:
    return [g for g in _table()[1] if g.marketing and g.usable_bytes and _key(g.marketing) == compact_label]


def _cards(gpus: list[Gpu]) -> str:
    return "; ".join(
        f"{g.name} reports {g.usable_bytes / GIB:.1f} GiB ({g.usable_bytes // MIB} MiB)" for g in gpus if g.usable_bytes
    )
