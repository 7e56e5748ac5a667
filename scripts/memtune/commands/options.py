"""Options and value types that several helpers share.

estimate_memory.py and plan_memory.py describe a run with the same flags, and check_env.py,
regather_config.py and the sizing helpers name GPUs and sizes the same way. Declaring each
flag once here means a new flag reaches every helper that reads a run, with one spelling, one
help line and one error message.

Imports only the standard library, click and stdlib-only memtune modules: --help must run
without PyYAML. Value types that need the GPU table (PyYAML) import it when they convert a
value, which happens only after --help has had its chance to exit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import FC, Command, argument, option
from memtune.commands.run_inputs import GPU_NAMES_FOR_HELP, GivenSize, parse_memory
from memtune.errors import InputError
from memtune.spec.names import FP8_RECIPES

if TYPE_CHECKING:  # ParamType is generic in recent click, not in 8.1: subscript it for the checker only
    _SizeBase = click.ParamType[GivenSize]
    _HeadroomBase = click.ParamType["Headroom"]
    _NameBase = click.ParamType[str]
else:
    _SizeBase = _HeadroomBase = _NameBase = click.ParamType


class SizeType(_SizeBase):
    """A memory size with its unit: ``80GiB``, ``81559MiB`` (what nvidia-smi prints), decimal
    ``80GB``; a bare number is GiB. The converted value keeps the text as given, because the
    marketing-size warning ("80GB is only 74.5 GiB") is about how the user wrote it."""

    name = "size"

    def __init__(self, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> GivenSize:
        if isinstance(value, GivenSize):
            return value
        text = str(value)
        if text.strip().startswith("-"):
            self.fail(f"{text!r}: a size cannot be negative; give e.g. 80GiB", param, ctx)
        try:
            return GivenSize(text, parse_memory(text, allow_zero=self.allow_zero))
        except InputError:
            kind = "a size" if self.allow_zero else "a positive size"
            self.fail(f"{text!r} is not {kind}; give e.g. 80GiB, 81559MiB or 80GB (= 10^9 bytes)", param, ctx)


@dataclass(frozen=True)
class Headroom:
    """Memory to keep free per GPU: a share of the GPU (``10%``) or an absolute size."""

    text: str
    share: float | None = None  # 0.10 for "10%"
    size: int | None = None  # bytes, for "4GiB"

    def bytes_of(self, gpu_bytes: int) -> int:
        if self.share is not None:
            return int(gpu_bytes * self.share)
        return self.size or 0


class HeadroomType(_HeadroomBase):
    """``10%`` (a percentage from 0 up to, not including, 100) or a size such as ``4GiB``."""

    name = "headroom"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SIZE|PCT"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Headroom:
        if isinstance(value, Headroom):
            return value
        text = str(value).strip()
        if text.endswith("%"):
            try:
                share = float(text[:-1])
            except ValueError:
                self.fail(f"{text!r} is not a percentage; use e.g. 10% or 4GiB", param, ctx)
            if not 0 <= share < 100:
                self.fail(f"{text!r} must be between 0% and 100%", param, ctx)
            return Headroom(text, share=share / 100)
        if text.startswith("-"):
            self.fail(f"{text!r}: the headroom cannot be negative; use e.g. 10% or 4GiB", param, ctx)
        try:
            return Headroom(text, size=parse_memory(text, allow_zero=True))
        except InputError:
            self.fail(f"{text!r}: expected a share like 10% or a size like 4GiB", param, ctx)


class GpuNameType(_NameBase):
    """A GPU model from data/gpus.yaml, by name or alias (``H100``, ``h100_sxm``, or the name
    nvidia-smi prints). The name is checked when parsed, so an unknown one is refused with the
    closest known ones (the GPU table's own message) before any input is read; the value stays
    as written, since the helpers quote it back. ``fallback`` says what the helper accepts
    instead of a name."""

    name = "gpu"

    def __init__(self, fallback: str | None = None) -> None:
        self.fallback = fallback

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "NAME"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if not text:
            self.fail("needs a GPU name, e.g. H100-80GB", param, ctx)
        from memtune.spec.gpus import lookup_gpu  # PyYAML: only once a value is given

        flag = param.opts[0] if isinstance(param, click.Option) else "--gpu"
        if self.fallback is None:
            lookup_gpu(text, flag=flag)
        else:
            lookup_gpu(text, flag=flag, fallback=self.fallback)
        return text


SIZE = SizeType()
HEADROOM = HeadroomType()
GPU = GpuNameType()


class Count(click.IntRange):
    """A whole number with a lower bound (``--tp 4``, ``--top 10``): shown as N in --help with
    its range; the errors say what is wanted ("-1 must be a positive integer", "'lots' is not a
    valid integer") rather than click's "not in the range x>=1" / "not a valid integer range"."""

    name = "integer"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            number = value
        else:  # the text from the command line (click's own integer rule: int() of it)
            try:
                number = int(str(value))
            except ValueError:
                self.fail(f"{value!r} is not a valid integer.", param, ctx)
        if self.min is not None and number < self.min:
            wanted = "a positive integer" if self.min == 1 else f"at least {self.min}"
            self.fail(f"{number} must be {wanted}", param, ctx)
        return number


POSITIVE = Count(min=1)

SOURCE = "model / run source"
PARALLEL = "parallelism and batch"
MEMORY = "memory features"
GPU_SECTION = "GPU"
OUTPUT = "output"


def compose(*decorators: Callable[[FC], FC]) -> Callable[[FC], FC]:
    """Apply ``decorators`` as if stacked in this order above a function."""

    def apply(func: FC) -> FC:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def json_option(help_text: str = "print one JSON document") -> Callable[[FC], FC]:
    return option("--json", "as_json", is_flag=True, help=help_text, section=OUTPUT)


def overrides_argument(metavar: str, help_text: str) -> Callable[[FC], FC]:
    return argument("overrides", nargs=-1, metavar=metavar, help_text=help_text)


def megatron_core_version_option(runs_with: str, section: str) -> Callable[[FC], FC]:
    """--megatron-core-version, shared by the helpers that read Megatron-LM launch lines;
    ``runs_with`` says which lines ("the --megatron-args line runs with")."""
    return option(
        "--megatron-core-version",
        metavar="X.Y",
        help=f"megatron-core release {runs_with}, for the flag defaults that changed between releases "
        "(Megatron-FSDP's sharding strategy: no_shard before 0.18); default: a current one",
        section=section,
    )


def model_source_options(overrides: bool = True) -> Callable[[FC], FC]:
    """Where the model and run come from: one preset, HF config, Megatron-LM flags, Bridge
    YAML (+ Hydra overrides) or the seed example. ``overrides=False`` leaves out the
    positional overrides, for a helper whose positionals are files (runtime_memory reads
    them from among its FILE arguments)."""
    decorators = [
        option("--preset", metavar="NAME", help="model preset name (see --list-presets)", section=SOURCE),
        option("--list-presets", is_flag=True, help="print the known presets and exit", section=SOURCE),
        option("--hf-config", metavar="FILE", help="Hugging Face config.json", section=SOURCE),
        option(
            "--megatron-args",
            metavar="FILE",
            help="Megatron-LM launch script, or YAML/JSON mapping {'--flag': value}",
            section=SOURCE,
        ),
        megatron_core_version_option("the --megatron-args line runs with", SOURCE),
        option("--config", metavar="FILE", help="Megatron Bridge ConfigContainer YAML", section=SOURCE),
        option(
            "--example",
            is_flag=True,
            help="the seed's Llama3-70B SFT run (TP4/PP4/VPP5/DP2, 32 x H100 80GB)",
            section=SOURCE,
        ),
    ]
    if overrides:
        decorators.append(
            overrides_argument(
                "[key.path=value]...", "Hydra-style overrides for --config/--example (a.b=v, +a.b=v, ++a.b=v, ~a.b)"
            )
        )
    return compose(*decorators)


def _switch(name: str, dest: str, help_text: str | None, section: str) -> Callable[[FC], FC]:
    """``--x/--no-x``: None when neither is given, so the source's own value stands."""
    return option(f"--{name}/--no-{name}", dest, default=None, help=help_text, section=section)


def parallelism_options() -> Callable[[FC], FC]:
    """Parallel sizes, batch and sequence: positive integers, each named in the error."""
    sizes = [
        option(flag, type=POSITIVE, help=text, section=PARALLEL)
        for flag, text in (
            ("--tp", "tensor parallel"),
            ("--pp", "pipeline parallel"),
            ("--vpp", "virtual pipeline chunks per rank"),
            ("--cp", "context parallel"),
            ("--ep", "expert parallel"),
            ("--etp", "expert tensor parallel"),
            ("--mbs", "micro-batch size"),
            ("--gbs", "global batch size"),
            ("--seq-length", "sequence length"),
        )
    ]
    return compose(
        *sizes,
        option("--gpus", "--world-size", "gpus", type=POSITIVE, help="total GPUs", section=PARALLEL),
        option(
            "--first-stage-layers",
            type=POSITIVE,
            metavar="N",
            help="uneven PP: decoder layers on the first stage (num_layers_in_first_pipeline_stage)",
            section=PARALLEL,
        ),
        option(
            "--last-stage-layers",
            type=POSITIVE,
            metavar="N",
            help="uneven PP: decoder layers on the last stage (num_layers_in_last_pipeline_stage)",
            section=PARALLEL,
        ),
        _switch("sequence-parallel", "sp", "sequence parallelism", PARALLEL),
    )


def memory_feature_options() -> Callable[[FC], FC]:
    return compose(
        option(
            "--recompute",
            type=click.Choice(("none", "selective", "full")),
            help="activation recompute granularity",
            section=MEMORY,
        ),
        option(
            "--recompute-modules",
            metavar="A,B",
            help="selective modules, comma separated (core_attn,mlp,layernorm,moe_act,moe,...)",
            section=MEMORY,
        ),
        option("--recompute-method", type=click.Choice(("uniform", "block")), section=MEMORY),
        option("--recompute-num-layers", type=POSITIVE, metavar="N", section=MEMORY),
        _switch("dist-opt", "dist_opt", "distributed optimizer", MEMORY),
        option("--fsdp", is_flag=True, default=None, help="Megatron-FSDP (optim_grads_params)", section=MEMORY),
        option("--precision", type=click.Choice(("bf16", "fp16", "fp32")), section=MEMORY),
        option(
            "--fp8",
            type=click.Choice((*FP8_RECIPES, "none"), case_sensitive=False),
            metavar="RECIPE",
            help=f"fp8 GEMMs ({', '.join(FP8_RECIPES)}) or 'none'",
            section=MEMORY,
        ),
        option("--fp8-param-gather", is_flag=True, default=None, section=MEMORY),
        _switch("grad-fp32", "grad_fp32", "fp32 main grads", MEMORY),
        option(
            "--attention-backend",
            type=click.Choice(("auto", "flash", "fused", "unfused", "local")),
            section=MEMORY,
        ),
        option(
            "--cpu-offload-layers",
            type=Count(min=0),
            metavar="N",
            help="CPU-offload activations of N layers",
            section=MEMORY,
        ),
        option("--peft", type=click.Choice(("none", "lora", "dora")), section=MEMORY),
        option("--lora-dim", type=POSITIVE, metavar="N", help="LoRA rank", section=MEMORY),
        _switch("regather", "regather", "LoRA sequence_parallel_input_regather", MEMORY),
    )


GPU_HELP = (
    "GPU model, for its real usable memory: "
    + ", ".join(GPU_NAMES_FOR_HELP)
    + " (aliases such as H100, h100_sxm, 'NVIDIA H100 80GB HBM3' work; same names as check_env.py --gpu)"
)


def gpu_options(memory_default: str = "") -> Callable[[FC], FC]:
    """--gpu-memory SIZE and --gpu NAME. ``memory_default`` ends the --gpu-memory help for a
    helper that assumes a size when none is given (plan_memory), so the help says which."""
    return compose(
        option(
            "--gpu-memory",
            type=SIZE,
            help="usable GPU memory with its unit: MiB as nvidia-smi prints it (81559MiB), GiB (79.6GiB) "
            "or GB = 10^9 bytes (80GB is only 74.5 GiB); a bare number (80) or G means GiB. "
            "An H100 80GB has 81559MiB = 79.6 GiB: prefer --gpu H100-80GB" + memory_default,
            section=GPU_SECTION,
        ),
        option("--gpu", type=GPU, help=GPU_HELP, section=GPU_SECTION),
    )


def run_input_options(memory_default: str = "", overrides: bool = True) -> Callable[[FC], FC]:
    """Everything that describes a run to estimate_memory.py and plan_memory.py (and to
    runtime_memory.py, without the positional overrides)."""
    return compose(
        model_source_options(overrides), parallelism_options(), memory_feature_options(), gpu_options(memory_default)
    )


def parse_run_options(argv: list[str], memory_default: str = "") -> SimpleNamespace:
    """The run-input options parsed from ``argv`` as the helpers' callbacks see them, for
    code (and tests) that want a run without a helper around it."""

    @click.command(cls=Command)
    @run_input_options(memory_default)
    def parsed(**params: object) -> SimpleNamespace:
        return SimpleNamespace(**params)

    with parsed.make_context("run-options", list(argv)) as ctx:
        result: SimpleNamespace = parsed.invoke(ctx)
    return result
