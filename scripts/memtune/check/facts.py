"""Facts several MT rules share: the allocator variables as PyTorch will read them, whether CUDA
graphs are on, how to write a change in the user's own config form, the LoRA re-gather inputs.

Kept apart from the rules so that each rule module reads as a list of checks, and so that
``regather_config`` can ask for :func:`regather_inputs` without importing any rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memtune.readers import alloc_conf as ac
from memtune.readers.run_view import EnvValue, RunView, rules_data

if TYPE_CHECKING:
    from memtune.estimate.regather import RegatherInputs

GRAPH_IMPLS = ("local", "transformer_engine", "te", "full_iteration")


@dataclass(frozen=True)
class AllocState:
    """The allocator variables as written, as PyTorch reads them, and as the user meant them.

    ``*_intended`` is the corrected string's parse when PyTorch rejects the written one
    (``expandable_segments:true`` -> ``expandable_segments:True``): MT007 reports the
    spelling, and the rules that depend on the setting (MT002 NCCL UB, MT003
    NCCL_GRAPH_REGISTER, MT021, MT020) judge what the run will do once it is fixed, so
    one run of check_env reports every error instead of one per fix-and-rerun.
    """

    cuda: EnvValue | None
    generic: EnvValue | None
    cuda_parsed: ac.AllocConf | None
    generic_parsed: ac.AllocConf | None
    cuda_intended: ac.AllocConf | None = None
    generic_intended: ac.AllocConf | None = None

    def effective(self, which: str) -> ac.AllocConf | None:
        """The parse the dependent rules judge: as written, else as intended."""
        parsed, intended = (
            (self.cuda_parsed, self.cuda_intended) if which == "cuda" else (self.generic_parsed, self.generic_intended)
        )
        return intended if intended is not None else parsed

    def enables_es(self, which: str) -> bool:
        parsed = self.effective(which)
        return bool(parsed and _any_enables(parsed))

    @property
    def es_source(self) -> str:
        for which, env in (("cuda", self.cuda), ("generic", self.generic)):
            parsed = self.effective(which)
            if env and parsed and _any_enables(parsed):
                if parsed is not (self.cuda_parsed if which == "cuda" else self.generic_parsed):
                    return f"{env.source}, read as {parsed.text!r} once MT007 is fixed"
                return env.source
        return "-"

    @property
    def es_where(self) -> str:
        """Just the file:line of :attr:`es_source` (a finding's ``source``)."""
        return self.es_source.split(", read as ")[0]

    def pairs(self) -> tuple[tuple[EnvValue | None, ac.AllocConf | None], ...]:
        """(variable, the parse dependent rules judge) for both names."""
        return ((self.cuda, self.effective("cuda")), (self.generic, self.effective("generic")))


def _any_enables(parsed: ac.AllocConf) -> bool:
    return any(v.accepted and v.settings.get("expandable_segments") is True for v in parsed.verdicts)


def alloc_state(view: RunView) -> AllocState:
    cuda = view.env.get("PYTORCH_CUDA_ALLOC_CONF")
    generic = view.env.get("PYTORCH_ALLOC_CONF")
    cuda_parsed = ac.parse(cuda.value, view.torch_version) if cuda else None
    generic_parsed = ac.parse(generic.value, view.torch_version) if generic else None
    return AllocState(
        cuda,
        generic,
        cuda_parsed,
        generic_parsed,
        _intended(cuda, cuda_parsed, view.torch_version),
        _intended(generic, generic_parsed, view.torch_version),
    )


def _intended(
    env: EnvValue | None, parsed: ac.AllocConf | None, version: tuple[int, ...] | None
) -> ac.AllocConf | None:
    """The parse of MT007's corrected string, when PyTorch rejects the written one and the
    correction is accepted (else None: the user's intent cannot be read)."""
    if env is None or parsed is None or parsed.accepted:
        return None
    fixed = ac.suggest_fix(env.value, parsed.rejections[0])
    if not fixed or fixed == env.value:
        return None
    intended = ac.parse(fixed, version)
    return intended if intended.accepted else None


def es_effective(view: RunView, state: AllocState) -> bool:
    """Would this PyTorch really run with expandable segments? (unknown version: be strict)"""
    if state.cuda and state.cuda_parsed and state.cuda_parsed.expandable_segments:
        # from 2.9 PYTORCH_ALLOC_CONF wins when both are set
        if state.generic and ac.alloc_conf_primary(view.torch_version) is not False:
            return bool(state.generic_parsed and state.generic_parsed.expandable_segments)
        return True
    if state.generic and state.generic_parsed and state.generic_parsed.expandable_segments:
        primary = ac.alloc_conf_primary(view.torch_version)
        ignored = ac.alloc_conf_ignored_for_cuda(view.torch_version)
        return bool(primary) and ignored is False
    return False


def es_possible(state: AllocState, version: tuple[int, ...] | None = None) -> bool:
    """Could expandable segments be on at all (for hazards: be pessimistic)?

    PYTORCH_ALLOC_CONF counts unless the release is known to predate it (< 2.9).
    """
    if state.enables_es("cuda"):
        return True
    return state.enables_es("generic") and ac.alloc_conf_primary(version) is not False


def cuda_graphs(view: RunView) -> tuple[bool, str, str]:
    """(enabled, source, text) for CUDA graphs from any spelling."""
    for name in ("enable_cuda_graph", "external_cuda_graph"):
        if view.get(name) is True:
            return True, view.where(name), view.text(name)
    impl = view.get("cuda_graph_impl")
    if isinstance(impl, str) and impl.strip().lower() in GRAPH_IMPLS:
        return True, view.where("cuda_graph_impl"), view.text("cuda_graph_impl")
    return False, "-", ""


def te_cuda_graphs(view: RunView) -> bool:
    """Whether the CUDA graphs are Transformer Engine's (``cuda_graph_impl=transformer_engine``,
    or the older ``--external-cuda-graph`` that Megatron-LM maps to it), not the local ones."""
    if view.get("external_cuda_graph") is True:
        return True
    impl = view.get("cuda_graph_impl")
    return isinstance(impl, str) and impl.strip().lower() in ("transformer_engine", "te")


def change_text(view: RunView, name: str, value: str, flag_value: str | None = None) -> str:
    """How to write ``name = value`` in the form the user's config already uses."""
    spec = rules_data()["settings"][name]
    item = view.settings.get(name)
    flags, paths = spec.get("flags", []), spec.get("paths", [])
    origin = item.origin if item else ("flag" if view.config_form == "megatron" else "override")
    if origin == "flag" and flags:
        if spec.get("switch"):
            return f"remove --{flags[0]}" if value in ("false", "False") else f"add --{flags[0]}"
        if flag_value == "":
            return f"remove --{flags[0]}"
        return f"--{flags[0]} {flag_value if flag_value is not None else value}"
    if paths:
        if origin == "config" and item is not None:
            return f"{paths[0]}: {value}  (in {item.source})"
        return f"{paths[0]}={value}"
    return f"--{flags[0]} {value}" if flags else f"{name}={value}"


def divisors(n: int, limit: int = 8) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0][:limit]


def _is_moe(view: RunView) -> bool:
    experts, ep = view.get("num_experts"), view.get("ep", 1)
    return (isinstance(experts, int) and experts > 1) or (isinstance(ep, int) and ep > 1)


def peft_without_regather_view(view: RunView) -> str | None:
    """The Megatron Bridge PEFT class of the run when it has no sequence_parallel_input_regather
    field: ``DoRA``, or ``CanonicalLoRA`` - named by the peft setting (``_target_``
    ...CanonicalLoRA, scheme ``canonical_lora``) or by its part targets (``linear_q``,
    ``linear_fc1_up``...). Only ``LoRA`` has the field (peft/lora.py)."""
    from memtune.spec.run_spec import class_without_regather, names_canonical_parts, peft_class_name

    peft = view.get("peft")
    targets = view.get("lora_target_modules") or ()
    canonical = (peft is not None and "canonical" in peft_class_name(view.text("peft"))) or (
        isinstance(targets, list | tuple) and names_canonical_parts(targets)
    )
    return class_without_regather(peft, canonical)


def regather_inputs(view: RunView) -> RegatherInputs:
    """What the re-gather decision needs from the run (MT010 and regather_config.py).

    The decision module is imported here, not at the top: only a LoRA run asks for it."""
    from memtune.estimate import regather
    from memtune.spec.run_spec import CANONICAL_LORA_DEFAULT_TARGETS

    lacking = peft_without_regather_view(view)
    defaults = CANONICAL_LORA_DEFAULT_TARGETS if lacking == "CanonicalLoRA" else regather.DEFAULT_TARGETS
    targets = view.get("lora_target_modules") or list(defaults)
    graphs, _, _ = cuda_graphs(view)
    pp = view.get("pp", 1) if isinstance(view.get("pp", 1), int) else 1
    layers = view.get("num_layers")
    vpp = view.get("vpp") or 1
    per_stage = (layers // max(1, pp) // max(1, vpp)) if isinstance(layers, int) else None
    return regather.RegatherInputs(
        tp=view.get("tp", 1) if isinstance(view.get("tp", 1), int) else 1,
        sequence_parallel=view.get("sequence_parallel") is True,
        targets=tuple(str(t) for t in targets),
        moe=_is_moe(view),
        cuda_graphs=graphs,
        cpu_offload_activations=view.get("cpu_offloading") is True
        and view.get("cpu_offloading_activations", True) is not False,
        recompute_granularity=view.get("recompute_granularity"),
        recompute_method=view.get("recompute_method"),
        recompute_num_layers=view.get("recompute_num_layers"),
        recompute_modules=tuple(
            view.get("recompute_modules")
            or (("core_attn",) if view.get("recompute_granularity") == "selective" else ())
        ),
        layers_per_stage=per_stage,
        peft_without_field=lacking,
    )
