"""Inventions an answer can make in any task, each told apart by the project's own knowledge:
an allocator setting PyTorch rejects, an option a helper does not have, a Megatron-LM option or a
pyxis option that never existed, an environment variable that nothing reads.

Why a module of its own: each check reads the answer's command lines and options rather than its
claims, and each leans on another part of the project (the allocator parser, the helpers' click
commands, the Megatron-LM flag table, the pyxis option list), imported lazily so the grader still
imports with the standard library alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from memtune.bench.tools import HELPERS

#: An allocator setting as an answer writes it: ``PYTORCH_CUDA_ALLOC_CONF=backend:...``.
_ALLOC_CONF = re.compile(r"PYTORCH(?:_CUDA)?_ALLOC_CONF\s{0,3}=\s{0,3}[\"'`]?([^\s\"'`]{1,200})")


#: One of this skill's helpers on a command line, and the rest of that line (up to a code tick).
_HELPER_CALL = re.compile(r"scripts/(" + "|".join(HELPERS) + r")\.py([^\n`]{0,400}?)(?=scripts/|[\n`]|$)")
_OPTION = re.compile(r"(?<![\w-])--[A-Za-z][\w-]{0,60}")
_COMMAND_END = re.compile(r"[;(|]|\bthen\b|\band\b|\bor\b|python3?\s|scripts/")


@functools.cache
def helper_options(helper: str) -> frozenset[str]:
    """Every option the helper's command line accepts, read from its click command."""
    import importlib

    command = importlib.import_module(f"memtune.commands.{helper}").command
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return frozenset(names)


@functools.cache
def helper_option_names() -> frozenset[str]:
    """Every option of every helper, as option_name writes it (computed once, not per answer)."""
    return frozenset(option_name(o) for helper in HELPERS for o in helper_options(helper))


def unknown_helper_options(answer: str) -> list[str]:
    """Options the answer passes to one of this skill's helpers that the helper does not have
    (``trace_regression.py --fail-on-oom``): an invented interface, told apart by the helper's
    own command line. Each is returned once, as the option."""
    out: list[str] = []
    for m in _HELPER_CALL.finditer(answer):
        known = helper_options(m.group(1))
        # the helper's own arguments end where another command or clause begins
        rest = _COMMAND_END.split(m.group(2), maxsplit=1)[0]
        for option in _OPTION.findall(rest):
            # a shortened real option ("--seq" for --seq-length) is a slip, not an invention
            if option not in known and option not in out and not any(k.startswith(option) for k in known):
                out.append(option)
    return out


#: Tools whose options an answer may name beside Megatron-LM's and whose spellings can start like
#: Megatron's (vLLM ``--max-num-seqs``, ms-swift ``--max_length``): an answer that names one is
#: not held to Megatron-LM's option list.
_OTHER_TOOL = re.compile(
    r"\b(?:vLLM\w*|SGLang\w*|TensorRT|TRT-LLM|TGI|text-generation-inference|ms-swift|swift\s+sft|Megatron-SWIFT|"
    r"DeepSpeed|LLaMA-Factory|llamafactory|accelerate\s+launch|nsys|Nsight|NeMo-RL|verl|OpenRLHF)\b",
    re.IGNORECASE,
)


def options_in(text: str) -> list[str]:
    """The ``--options`` written in ``text``, each once, in order."""
    return list(dict.fromkeys(_OPTION.findall(text)))


def option_name(option: str) -> str:
    """``--Overlap-Grad-Reduce`` -> ``overlap_grad_reduce``: how data/megatron_flags.yaml writes names."""
    return option.lstrip("-").replace("-", "_").lower()


def option_family(name: str) -> str:
    """The first two words of an option name (``overlap_grad`` of ``overlap_grad_reduce``)."""
    return "_".join(name.split("_")[:2])


@functools.cache
def megatron_options() -> tuple[frozenset[str], frozenset[str]]:
    """(names, families) of every option Megatron-LM's training arguments have or once had,
    with the Megatron-DeepSpeed spellings the launch-script reader knows."""
    from memtune.readers.megatron_flags import flag_classes

    table = flag_classes()
    names = table.arguments | table.removed | table.modelled | table.deepspeed_neutral
    return frozenset(names), frozenset(option_family(n) for n in names if "_" in n)


#: First words that, in an option, mean Megatron-LM: several of its options start with each, and
#: the other tools with such options (nsys ``--cuda-memory-usage``, SGLang ``--tp-size``) are
#: named by the answers that use them, which are then not checked. An option starting with one of
#: them that Megatron-LM never had is invented even when its first two words are new
#: (``--recompute-all-layers``, ``--overlap-tp-gemm``). Words that other scripts use unnamed are
#: left out (``--dist-url`` of PyTorch's examples, ``--ckpt_dir`` of Meta's Llama scripts).
DISTINCT_FIRST_WORDS = frozenset({"recompute", "overlap", "moe", "cuda", "expert", "pipeline", "tp", "fp8"})


def unknown_megatron_options(answer: str, given: Iterable[str] = ()) -> list[str]:
    """Megatron-LM-looking options that Megatron-LM has never had (``--overlap-grad-allreduce``,
    ``--overlap-param-scatter``): each starts like a family of real options but is none of them.

    Why the family rule: answers also name options of other tools (nsys ``--capture-range``,
    srun ``--container-image``) that no list here can hold, and those seldom begin like a
    Megatron option; an invented Megatron flag almost always does, because it is a real one
    misremembered (a few first words are Megatron's alone: DISTINCT_FIRST_WORDS). Where they can
    collide (vLLM ``--max-num-seqs`` against Megatron-LM's ``--max-num-samples``) the answer names
    the other tool, and is then not checked. Options this skill's helpers accept, and the user's
    own (in the question or files), are left out. Imported lazily: this module stays importable
    with the standard library."""
    if _OTHER_TOOL.search(answer):
        return []
    names, families = megatron_options()
    mine = {option_name(o) for o in given} | helper_option_names()
    out: list[str] = []
    for option in _OPTION.findall(answer):
        name = option_name(option)
        if name in names or name in mine or "_" not in name or option in out:
            continue
        if option_family(name) in families or name.split("_")[0] in DISTINCT_FIRST_WORDS:
            out.append(option)
    return out


#: A template standing for a value, not a value: ``VALUE``, ``OPTIONS``.
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")


@functools.cache
def _alloc_code_span() -> re.Pattern[str]:
    """A code span holding only allocator options: `` `expandable_segments:True` ``. An answer
    often gives the value alone as the line to use, without the variable's name."""
    from memtune.readers.alloc_conf import table

    keys = sorted(table().get("options", {}), key=len, reverse=True)
    return re.compile(r"`((?:" + "|".join(map(re.escape, keys)) + r"):[^\s`]{1,200})`")


def alloc_conf_values(text: str) -> list[str]:
    """The allocator strings set in ``text`` (trailing sentence punctuation left out): after the
    variable's name, or alone in a code span that starts with an allocator option."""
    out: list[str] = []
    for m in [*_ALLOC_CONF.finditer(text), *_alloc_code_span().finditer(text)]:
        value = m.group(1).rstrip(".,;:)!?")
        if value and value not in out:
            out.append(value)
    return out


def rejected_alloc_settings(answer: str, given: Iterable[str] = ()) -> list[str]:
    """Allocator strings the answer sets that every PyTorch release the project knows rejects
    (an option or backend that does not exist: ``backend:cudaMallocManaged``), leaving out the
    ones the user gave (an answer may quote the user's broken string to explain it).

    Why: an invented setting is the wrong answer no task's claims can list in advance, and the
    project's own parser of PyTorch's allocator grammar (memtune.readers.alloc_conf) can tell it.
    Imported here, not at the top: this module stays importable with the standard library."""
    from memtune.readers.alloc_conf import parse

    known = set(given)
    out = []
    for value in alloc_conf_values(answer):
        if value in known or _PLACEHOLDER.fullmatch(value) or any(c in value for c in "$<{") or "..." in value:
            continue  # the user's own string, or a template (VALUE, $VAR, <value>, ...) rather than a setting
        try:
            verdicts = parse(value).verdicts
        except Exception:  # noqa: BLE001 - a string the parser cannot even judge is not graded
            continue
        if verdicts and not any(v.accepted for v in verdicts):
            out.append(value)
    return out


#: An option of pyxis's shape: every option the plugin adds to srun starts this way.
_PYXIS_OPTION = re.compile(r"(?<![\w-])--(?:no-)?container-[a-z][a-z-]*")


@functools.cache
def pyxis_options() -> frozenset[str]:
    """Every srun option pyxis has had (data/pyxis_options.yaml), without the dashes."""
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    table = load_data_yaml(DATA_DIR / "pyxis_options.yaml") or {}
    return frozenset(str(name) for name in table.get("options", ()))


def unknown_pyxis_options(answer: str) -> list[str]:
    """``--container-bind``-style options that pyxis never had: the plugin's options all share
    that shape, so one of the shape that is not on its list is an invention."""
    known = pyxis_options()
    out: list[str] = []
    for option in _PYXIS_OPTION.findall(answer):
        option = option.rstrip("-")
        if option[2:] not in known and option not in out:
            out.append(option)
    return out


#: An environment variable's name: upper-case words joined by underscores (``NCCL_BUFFSIZE``).
_ENV_NAME = re.compile(r"(?<![\w-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w-])")
#: The words that mark a name as an allocator setting's: PyTorch reads those only under its own names.
_ALLOCATOR_WORDS = ("ALLOC_CONF", "EXPANDABLE_SEGMENTS")
#: A device plugin's own allocator variable (torch_npu reads ``PYTORCH_NPU_ALLOC_CONF``): the shape
#: PyTorch's device allocators follow, so a name of that shape is left alone.
_DEVICE_ALLOC_CONF = re.compile(r"PYTORCH_[A-Z0-9]+_ALLOC_CONF")


#: Variable families whose every real name data/env_names.yaml lists: prefix -> its key there.
_ENV_FAMILIES = {"NCCL_": "nccl", "NVTE_": "transformer_engine"}


@functools.cache
def environment_names() -> tuple[frozenset[str], dict[str, frozenset[str]], tuple[str, ...]]:
    """(allocator names, {family prefix: names}, plugin prefixes): the names PyTorch's allocators,
    NCCL and Transformer Engine read, and the prefixes of plugins and forks whose names are not
    listed (data/env_names.yaml)."""
    from memtune.files.data_yaml import load_data_yaml
    from memtune.files.paths import DATA_DIR

    table = load_data_yaml(DATA_DIR / "env_names.yaml") or {}
    families = {prefix: frozenset(map(str, table.get(key, ()))) for prefix, key in _ENV_FAMILIES.items()}
    plugins = tuple(str(prefix) for prefix in table.get("plugin_prefixes", ()))
    return frozenset(map(str, table.get("allocator", ()))), families, plugins


def env_names_in(text: str) -> list[str]:
    """The variable-shaped names written in ``text``, each once, in order."""
    return list(dict.fromkeys(_ENV_NAME.findall(text)))


def unknown_environment_variables(answer: str, given: Iterable[str] = ()) -> list[str]:
    """Environment variables the answer names that nothing reads: an allocator setting under
    another name than PyTorch's (``CUDA_ALLOC_CONF=expandable_segments:True``,
    ``TORCH_CUDA_EXPANDABLE_SEGMENTS=1``), an ``NCCL_`` name NCCL never had (``NCCL_TIMEOUT``) or
    an ``NVTE_`` name Transformer Engine never had (``NVTE_SLIDING_WINDOW_MEMORY_SAVER``).

    Why: a user who exports such a variable gets no change at all, and the answer still carries
    every right word (the setting's value, the verdict), so no claim check can fail it; the small
    model of the Tier-3 runs writes ``CUDA_ALLOC_CONF`` often. Only the families whose every real
    name the project lists are judged; names the user wrote (question, files) are left out."""
    allocator, families, plugins = environment_names()
    mine = set(given)
    out: list[str] = []
    for name in env_names_in(answer):
        if name in mine or name in out or name.startswith(plugins):
            continue
        if any(word in name for word in _ALLOCATOR_WORDS):
            if name not in allocator and not _DEVICE_ALLOC_CONF.fullmatch(name):
                out.append(name)
        else:
            known = next((names for prefix, names in families.items() if name.startswith(prefix)), None)
            if known is not None and name not in known:
                out.append(name)
    return out
