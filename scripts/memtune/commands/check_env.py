"""check_env.py: catch memory misconfiguration in a launch script, environment and config before launch."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import Command, invoke, option, print_json
from memtune.commands.options import POSITIVE, GpuNameType, json_option, overrides_argument
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError

if TYPE_CHECKING:  # the rules and the run view load PyYAML: imported when the check runs
    from memtune.check.registry import Finding
    from memtune.readers.run_view import RunView

DESCRIPTION = """\
Check a Megatron-LM / Megatron Bridge run for memory misconfiguration before it starts:
expandable segments, malformed PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF (judged with
PyTorch's own parser rules for your --torch-version), NCCL user buffers, CUDA graphs without
NCCL_GRAPH_REGISTER=0, CPU offloading with PP > 1 or with recompute, PP / VPP layer
divisibility, interleaved-schedule micro-batch limits, LoRA + sequence-parallel re-gather.

Inputs are combined into one view of the run (later ones win): --env (this process),
--env-file, --script (bash / sbatch: export lines, VAR=... prefixes, srun / torchrun /
python commands with Megatron-LM flags and Hydra overrides), --config (Megatron Bridge
ConfigContainer YAML, or a Megatron-LM model_config.yaml with ENV_VARS / MODEL_ARGS), and
overrides given here. Each finding has rule, severity, message, fix and source (file:line).
Exit 0: no error; 1: at least one error; 2: bad usage or unreadable input."""

EPILOG = """\
examples:
  python3 scripts/check_env.py --script train.sbatch
  python3 scripts/check_env.py --script train.sh --torch-version 2.9.1 --json
  python3 scripts/check_env.py --set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true --torch-version 2.4
  python3 scripts/check_env.py --env --config llama3_70b.yaml model.pipeline_model_parallel_size=8
  python3 scripts/check_env.py --env-file job.env --config lora.yaml --world-size 16
  python3 scripts/check_env.py --config tests/functional_tests/.../model_config.yaml --world-size 8
rules: references/check-rules.md (one section per MT id)"""


@click.command(
    "check-env",
    cls=Command,
    short_help="memory misconfiguration in a launch script, environment or config",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@overrides_argument(
    "[KEY=VALUE]...", "Hydra-style overrides applied last (model.tensor_model_parallel_size=4, +x=1, ~x)"
)
@option("--env", is_flag=True, help="include this process's environment")
@option("--env-file", multiple=True, metavar="FILE", help="KEY=VALUE lines (repeatable)")
@option(
    "--set",
    "env_values",
    multiple=True,
    metavar="NAME=VALUE",
    help="an environment variable as the job will see it (repeatable), e.g. --set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
)
@option("--script", multiple=True, metavar="FILE", help="bash / sbatch launch script (repeatable)")
@option(
    "--config",
    multiple=True,
    metavar="FILE",
    help="Megatron Bridge ConfigContainer YAML or Megatron-LM model_config.yaml (repeatable)",
)
@option("--torch-version", metavar="X.Y[.Z]", help="PyTorch release the job runs (unknown: strictest verdict)")
@option("--megatron-core-version", metavar="X.Y", help="Megatron-Core release (unknown: conservative checks)")
@option(
    "--gpu",
    type=GpuNameType(fallback="or leave --gpu out: MT003 then assumes a GPU before Blackwell"),
    help="GPU model, e.g. H100, B200, MI300X or the name nvidia-smi prints; the same names as "
    "estimate_memory.py --gpu (data/gpus.yaml). NCCL_GRAPH_REGISTER: local CUDA graphs need it "
    "before Blackwell only, Transformer Engine graphs everywhere",
)
@option(
    "--world-size", "--gpus", "world_size", type=POSITIVE, metavar="N", help="GPU count, when the script does not say"
)
@json_option()
def command(**params: object) -> int:
    return _check(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "check_env.py", argv)


def _check(args: SimpleNamespace) -> int:
    if not (args.env or args.env_file or args.env_values or args.script or args.config or args.overrides):
        raise InputError(
            "nothing to check: give --script FILE, --config FILE, --env-file FILE, --set NAME=VALUE, --env or overrides"
        )
    from memtune.check import check_rules
    from memtune.readers import run_view

    view = run_view.build(
        run_view.Inputs(
            use_env=args.env,
            env_files=list(args.env_file),
            env_values=list(args.env_values),
            scripts=list(args.script),
            configs=list(args.config),
            overrides=list(args.overrides),
            torch_version=args.torch_version,
            mcore_version=args.megatron_core_version,
            world_size=args.world_size,
            gpu=args.gpu,
        )
    )
    findings = check_rules.run_all(view)
    errors = sum(1 for f in findings if f.severity == "error")
    if args.as_json:
        print_json({"findings": [f.to_json() for f in findings], "notes": list(dict.fromkeys(view.notes))})
    else:
        print(render_text(findings, view))
    return EXIT_FINDINGS if errors else EXIT_OK


def render_text(findings: Sequence[Finding], view: RunView) -> str:
    lines: list[str] = []
    if view.command is not None and view.script is not None:
        lines.append(
            f"training command: {view.script.path}:{view.command.line} ({' '.join(view.command.launcher) or 'python'} {view.command.program})"
        )
    for severity in ("error", "warning", "info"):
        group = [f for f in findings if f.severity == severity]
        if not group:
            continue
        lines.append(f"\n{severity.upper()}S ({len(group)})" if severity != "info" else f"\nINFO ({len(group)})")
        for f in group:
            lines.append(f"  {f.rule} {f.source}")
            lines.append(f"    {f.message}")
            lines.append(f"    fix: {f.fix}")
    for note in dict.fromkeys(view.notes):
        lines.append(f"note: {note}")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    lines.append(f"\n{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info")
    return "\n".join(lines).lstrip("\n")
