"""LoRA ``sequence_parallel_input_regather``: is it eligible, what to write, what it saves.

With sequence parallelism, the LoRA-A GEMM of a column-parallel adapter (``linear_qkv``,
dense ``linear_fc1``) reads the all-gathered LayerNorm output, and autograd keeps that
full-sequence tensor until backward. Re-gather keeps only the sequence-local shard and
gathers again in backward: memory for communication, nothing is recomputed.

Megatron Bridge falls back to the old path (no saving) for: row-parallel adapters
(``linear_proj``, ``linear_fc2``), expert adapters (MoE ``linear_fc1``/``linear_fc2``),
TP=1, sequence parallel off, CUDA graphs, CPU activation offloading, and adapters inside
layers that full recompute replays or (for ``linear_fc1``) that selective ``mlp``
recompute replays. Each fallback is stated, per target module.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtune.spec.run_spec import lora_target_leaf

if TYPE_CHECKING:  # ast is imported where a recipe is read
    import ast

    from memtune.spec.model_spec import ModelSpec

COLUMN_PARALLEL = ("linear_qkv", "linear_fc1")
ROW_PARALLEL = ("linear_proj", "linear_fc2")
DEFAULT_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
SEED_QWEN3_8B_SAVING_BYTES = 4.731e9  # measured: 47.545 GB -> 42.814 GB, H100, TP2, seq 8192


@dataclass(frozen=True)
class RegatherInputs:
    tp: int = 1
    sequence_parallel: bool = False
    targets: tuple[str, ...] = DEFAULT_TARGETS
    moe: bool = False  # every layer's MLP is routed experts
    cuda_graphs: bool = False
    cpu_offload_activations: bool = False
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] = ()
    layers_per_stage: int | None = None  # for block recompute: how many layers stay eligible
    peft_without_field: str | None = None  # DoRA / CanonicalLoRA: Bridge classes without the re-gather field


@dataclass(frozen=True)
class ModuleDecision:
    module: str
    eligible: bool
    reason: str
    eligible_layer_fraction: float = 1.0  # < 1 when block recompute covers some layers


@dataclass(frozen=True)
class Eligibility:
    decisions: tuple[ModuleDecision, ...]
    run_fallbacks: tuple[str, ...]  # run-wide reasons nothing is eligible

    @property
    def any_eligible(self) -> bool:
        return any(d.eligible for d in self.decisions)

    @property
    def eligible_modules(self) -> tuple[str, ...]:
        return tuple(d.module for d in self.decisions if d.eligible)


def _one_edit_apart(a: str, b: str) -> bool:
    """One letter inserted, dropped, changed or two swapped: a typo, not another module
    (MLA's ``linear_q_proj`` is two letters from ``linear_proj`` and is a real module)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [k for k in range(len(a)) if a[k] != b[k]]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        )
    short, long = sorted((a, b), key=len)
    return any(long[:k] + long[k + 1 :] == short for k in range(len(long)))


def _not_eligible_reason(module: str) -> str:
    """Why ``module`` gets no re-gather. A typo of a standard name (``linar_fc1``) is named:
    otherwise it reads as a real module that merely is not eligible, while Bridge would
    match no layer with it."""
    reason = "not a column-parallel linear_qkv / linear_fc1 adapter"
    close = [name for name in COLUMN_PARALLEL + ROW_PARALLEL if _one_edit_apart(module, name)]
    return f"{reason} (did you mean {close[0]}?)" if close else reason


def decide(inp: RegatherInputs) -> Eligibility:
    """Per-target eligibility, with the reason for every fallback."""
    run: list[str] = []
    if inp.peft_without_field:
        run.append(
            f"{inp.peft_without_field} has no sequence_parallel_input_regather field (only LoRA has, Megatron "
            "Bridge peft/lora.py): its adapters keep the gathered input"
        )
    if inp.tp <= 1:
        run.append("tensor_model_parallel_size is 1: there is no sequence-parallel gather to avoid")
    if not inp.sequence_parallel:
        run.append("sequence_parallel is off: the LoRA-A input is never gathered, the option has no effect")
    if inp.cuda_graphs:
        run.append("CUDA graphs are enabled: Bridge keeps the default path inside captured graphs")
    if inp.cpu_offload_activations:
        run.append("CPU activation offloading is enabled: Bridge falls back to the default path")
    full = inp.recompute_granularity == "full"
    block_fraction = 1.0
    if full:
        per_stage = inp.layers_per_stage
        if inp.recompute_method == "block" and inp.recompute_num_layers is not None and per_stage:
            block_fraction = max(0.0, 1.0 - inp.recompute_num_layers / per_stage)
            if block_fraction == 0.0:
                run.append(
                    "full recompute (block) covers every layer of the stage: adapters are replayed, Bridge falls back"
                )
        else:
            run.append("full-layer recompute replays every layer that holds an adapter: Bridge falls back")
    decisions: list[ModuleDecision] = []
    seen: set[str] = set()
    for target in inp.targets or DEFAULT_TARGETS:
        module = lora_target_leaf(target)
        if module in seen:
            continue
        seen.add(module)
        if module in ROW_PARALLEL:
            decisions.append(
                ModuleDecision(
                    module, False, "row-parallel adapter: its input is already sequence-local, nothing is gathered"
                )
            )
            continue
        if inp.peft_without_field and module not in ROW_PARALLEL:
            reason = f"{inp.peft_without_field} adapter: no re-gather option (only LoRA has sequence_parallel_input_regather)"
            decisions.append(ModuleDecision(module, False, reason))
            continue
        if module not in COLUMN_PARALLEL:
            decisions.append(ModuleDecision(module, False, _not_eligible_reason(module)))
            continue
        if module == "linear_fc1" and inp.moe:
            decisions.append(
                ModuleDecision(
                    module,
                    False,
                    "expert adapter (MoE linear_fc1): not covered by re-gather (dense layers of a mixed model still are; the estimate counts them)",
                )
            )
            continue
        if run:
            decisions.append(ModuleDecision(module, False, "; ".join(run)))
            continue
        if module == "linear_fc1" and inp.recompute_granularity == "selective" and "mlp" in inp.recompute_modules:
            decisions.append(
                ModuleDecision(module, False, "selective recompute of 'mlp' replays linear_fc1: Bridge falls back")
            )
            continue
        if full and block_fraction < 1.0:
            decisions.append(
                ModuleDecision(
                    module,
                    True,
                    f"eligible in the {block_fraction:.0%} of layers that block recompute does not replay",
                    block_fraction,
                )
            )
            continue
        decisions.append(ModuleDecision(module, True, "column-parallel adapter with sequence parallelism: eligible"))
    return Eligibility(tuple(decisions), tuple(run))


def matches_target(targets: Sequence[str], module: str) -> bool:
    return any(fnmatch.fnmatch(module, t) or lora_target_leaf(t) == module for t in targets)


@dataclass(frozen=True)
class RecipeCall:
    """A ``LoRA(...)`` / ``DoRA(...)`` call found in a Python recipe."""

    path: str
    line: int
    name: str
    target: str  # what it is assigned to, e.g. "cfg.peft" ("" when not assigned)
    kwargs: tuple[tuple[str, str], ...]  # keyword -> source text, in order


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class SourceSegments:
    """``ast.get_source_segment`` for many nodes of one source, in linear total time.

    The stdlib function splits the whole source into lines on every call, so asking it
    for each of the 5,000 assignments of a long recipe is quadratic (minutes). Here the
    lines are split once (the same way: ``\r\n``, ``\r`` and ``\n`` only) and each node's
    UTF-8 column offsets are applied to its own lines.
    """

    def __init__(self, source: str) -> None:
        self.lines: list[str] = _LINE.findall(source)

    def __call__(self, node: ast.AST) -> str | None:
        # only expressions and statements carry positions, and end_* may be None
        lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        start, end = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if not (isinstance(lineno, int) and isinstance(end_lineno, int)):
            return None
        if not (isinstance(start, int) and isinstance(end, int)):
            return None
        first, last = lineno - 1, end_lineno - 1
        if not 0 <= first <= last < len(self.lines):
            return None
        if first == last:
            return self.lines[first].encode()[start:end].decode()
        head = self.lines[first].encode()[start:].decode()
        tail = self.lines[last].encode()[:end].decode()
        return "".join([head, *self.lines[first + 1 : last], tail])


def find_lora_calls(path: str) -> list[RecipeCall]:
    """``LoRA(...)`` calls in a Python recipe, keyword values kept as written (never executed)."""
    import ast

    from memtune.errors import InputError
    from memtune.files.textfile import read_text

    source = read_text(path, "a Python recipe", strict=False)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else path
        raise InputError(f"{where}: not valid Python ({exc.msg}); give the recipe file that builds cfg.peft") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InputError(
            f"{path}: cannot be read as Python ({type(exc).__name__}); give the recipe file that builds cfg.peft"
        ) from None
    segment = SourceSegments(source)
    targets: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.targets:
            targets[id(node.value)] = segment(node.targets[0]) or ""
    calls: list[RecipeCall] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in ("LoRA", "DoRA", "CanonicalLoRA"):
            continue
        kwargs = tuple((kw.arg, segment(kw.value) or "...") for kw in node.keywords if kw.arg)
        calls.append(RecipeCall(path, node.lineno, name, targets.get(id(node), ""), kwargs))
    return sorted(calls, key=lambda c: c.line)


def find_recipe_settings(path: str) -> list[tuple[str, Any, int]]:
    """``cfg.model.x = <literal>`` assignments in a recipe -> (``model.x``, value, line)."""
    import ast

    from memtune.files.textfile import read_text

    source = read_text(path, "a Python recipe", strict=False)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    segment = SourceSegments(source)
    out: list[tuple[str, Any, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = segment(node.targets[0]) or ""
        parts = target.split(".")
        if len(parts) < 3 or not all(p.isidentifier() for p in parts):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        out.append((".".join(parts[1:]), value, node.lineno))
    return sorted(out, key=lambda item: item[2])


def recipe_call_snippet(call: RecipeCall) -> str:
    """The user's own call with ``sequence_parallel_input_regather=True`` added (or set)."""
    lines = [f"# {call.path}:{call.line}", f"{call.target or 'cfg.peft'} = {call.name}("]
    for key, text in call.kwargs:
        if key == "sequence_parallel_input_regather":
            continue
        lines.append(f"    {key}={text},")
    lines.append("    sequence_parallel_input_regather=True,")
    lines.append(")")
    return "\n".join(lines)


def recipe_snippet(lora: dict[str, Any]) -> str:
    """Python for a Bridge recipe that keeps the user's LoRA settings and adds re-gather."""
    lines = ["from megatron.bridge.peft.lora import LoRA", "", "cfg.peft = LoRA("]
    for key, value in lora.items():
        if key in ("sequence_parallel_input_regather", "_target_"):
            continue
        lines.append(f"    {key}={value!r},")
    if not lora:
        lines.append("    # keep the recipe's existing LoRA settings here")
    lines.append("    sequence_parallel_input_regather=True,")
    lines.append(")")
    return "\n".join(lines)


def hydra_override() -> str:
    return "peft.sequence_parallel_input_regather=true"


#: What ``saving_estimate`` says when it takes a library default for a value the user left out.
_DEFAULT_NOTES = {
    "seq_length": "sequence length {} (RunSpec default; pass --seq-length)",
    "mbs": "micro-batch size {} (RunSpec default; pass --mbs)",
}


def saving_estimate(model: ModelSpec, inp: RegatherInputs, given: dict[str, Any]) -> tuple[int, list[str]]:
    """Bytes per GPU that ``sequence_parallel_input_regather`` saves, and the defaults it took.

    The run is a RunSpec with the library's own defaults for whatever ``given`` leaves out (the
    same defaults ``estimate_memory`` uses), sequence parallel on and LoRA on the recipe's targets;
    full recompute is the ineligible case :func:`decide` reports, so it is priced as no recompute.
    """
    from memtune.estimate import estimator
    from memtune.spec.run_spec import RunSpec

    defaults = RunSpec()
    notes: list[str] = []
    fields: dict[str, Any] = {}
    for name in ("seq_length", "mbs", "pp", "vpp", "gbs", "world_size", "lora_dim"):
        value = given.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            fields[name] = value
        elif name in _DEFAULT_NOTES:
            notes.append(_DEFAULT_NOTES[name].format(getattr(defaults, name)))
    tp, pp = inp.tp, fields.get("pp", defaults.pp)
    fields["world_size"] = max(fields.get("world_size", tp * pp), tp * pp)
    run = RunSpec(
        tp=tp,
        sequence_parallel=True,
        peft="lora",
        lora_target_modules=tuple(lora_target_leaf(t) for t in inp.targets),
        recompute_granularity=None if inp.recompute_granularity == "full" else inp.recompute_granularity,
        recompute_modules=inp.recompute_modules or defaults.recompute_modules,
        **fields,
    )
    return estimator.regather_saving_bytes(model, run), notes
