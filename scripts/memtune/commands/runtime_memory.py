"""runtime_memory.py: read what a run measured (logs, tables, nvidia-smi, snapshots) and say what it means.

Imports only the stdlib, click and stdlib-only memtune modules at the top, so --help works
in a bare interpreter; the readers, the estimator and the GPU table are imported after the
arguments are parsed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import click

from memtune.cli import Command, argument, invoke, option, print_json
from memtune.commands.options import OUTPUT, json_option, run_input_options
from memtune.errors import InputError

DESCRIPTION = """\
Read the memory a training run measured and say what it means, per rank. Reads, from any
number of files (plain or .gz; - for standard input), in any mix:

  Megatron-LM report_memory lines ('[Rank 0] (after 10 iterations) memory (MB) | allocated:
  ... | max allocated: ... | reserved: ... | max reserved: ...', every era: cached/reserved,
  full floats or 2 decimals, with or without [Rank N], torchrun [defaultN]: and Slurm N:
  prefixes), Megatron Bridge memory lines ('memory (GB) | mem-allocated-gigabytes: ...'),
  NeMo 2 step lines ('... | max_memory_reserved: 57466159104 | max_memory_allocated: ...'),
  DeepSpeed see_memory_usage ('MA .. GB Max_MA .. GB CA .. GB Max_CA .. GB'),
  torch.cuda.memory_summary() tables, torch.cuda.memory_stats() dumps (dict or JSON),
  nvidia-smi (the table, --query-gpu CSV with or without header/units, -q), and memory
  snapshots (torch.cuda.memory._dump_snapshot pickles).

A snapshot is read as data only: a pickle that would import or call anything is refused
(exit 2) and nothing in it runs.

Per rank: peak allocated and reserved, the reserve PyTorch holds but does not use (bytes
and share of reserved), memory outside PyTorch (nvidia-smi used - reserved), headroom to
the card; a verdict: leak, warming-up, stable or no-series, plus fragmentation,
allocator-retries and near-capacity when they apply. From a snapshot: segments, free
reserve, largest free block, the largest live allocations by the frame that made them.

Describe the run too (the same options as estimate_memory.py: --preset, --megatron-args,
--config ..., --tp/--pp/--gpus ...) to put the measured peaks beside the estimate per
pipeline stage and name the part that explains the gap (model, allocator-reserve or
outside-pytorch). Hydra overrides for --config go among the FILE arguments (a.b=v)."""

EPILOG = """\
examples:
  python3 scripts/runtime_memory.py train.log --gpu H100-80GB
  python3 scripts/runtime_memory.py logs/rank*.log.gz nvidia-smi.txt --json
  python3 scripts/runtime_memory.py train.log --gpu H200 --plot memory.svg
  python3 scripts/runtime_memory.py snapshot.pickle
  python3 scripts/runtime_memory.py train.log --megatron-args launch.sh --gpus 64 --gpu H100-80GB

exit codes: 0 read and judged (whatever the verdicts), 2 bad input (missing or binary
file, a pickle that is not plain data, nothing measured in any input) with a one-line reason."""

_OVERRIDE = re.compile(r"^(?:\+\+?|~)?[A-Za-z_][\w.\-]*(?:=.*)?$")


@click.command(
    "runtime-memory",
    cls=Command,
    short_help="what a run measured (logs, nvidia-smi, snapshots): peaks, leak, fragmentation, headroom",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@argument(
    "inputs",
    nargs=-1,
    metavar="FILE... [key.path=value]...",
    help_text="logs, nvidia-smi outputs, memory_summary/memory_stats texts, snapshot pickles; - reads standard input",
)
@run_input_options(overrides=False)
@json_option("print one JSON document: ranks, verdicts, snapshots, comparison (every field: references/json-output.md)")
@option(
    "--plot",
    metavar="FILE.svg",
    help="also draw memory per rank over iterations against the card (SVG)",
    section=OUTPUT,
)
def command(**params: object) -> int:
    return _runtime_memory(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "runtime_memory.py", argv)


def split_inputs(given: Sequence[str]) -> tuple[list[str], list[str]]:
    """FILE arguments and Hydra overrides: an argument that is not an existing path and reads
    as ``a.b=v`` / ``+a.b=v`` / ``~a.b`` is an override."""
    files: list[str] = []
    overrides: list[str] = []
    for item in given:
        if item != "-" and not Path(item).exists() and ("=" in item or item.startswith("~")) and _OVERRIDE.match(item):
            overrides.append(item)
        else:
            files.append(item)
    return files, overrides


def _has_run(args: SimpleNamespace) -> bool:
    return bool(args.preset or args.hf_config or args.megatron_args or args.config or args.example)


def _runtime_memory(args: SimpleNamespace) -> int:
    if args.list_presets:
        from memtune.commands.run_inputs import print_presets

        print_presets(args.as_json)
        return 0
    files, overrides = split_inputs(args.inputs)
    if not files:
        raise InputError("give at least one FILE (a training log, nvidia-smi output or memory snapshot); see --help")
    if files.count("-") > 1:
        raise InputError("- (standard input) can be given only once")
    if overrides and not (args.config or args.example):
        raise InputError(f"{overrides[0]!r}: no such file (key.path=value overrides need --config or --example)")
    from memtune.commands.run_inputs import megatron_core_version

    megatron_core_version(args)  # refused without a launch line, where it would change nothing
    plot_path = None
    if args.plot is not None:
        from memtune.runtime.svg import check_plot_path

        plot_path = check_plot_path(args.plot, files)

    estimate = run = model = None
    limit_bytes: int | None = None
    limit_source: str | None = None
    if _has_run(args):
        from memtune.commands.run_inputs import load_model_and_run
        from memtune.estimate.estimator import estimate as estimate_memory

        inputs = load_model_and_run(SimpleNamespace(**{**vars(args), "overrides": tuple(overrides)}))
        model, run = inputs.model, inputs.run
        estimate = estimate_memory(model, run)
        if inputs.gpu_memory_bytes:
            limit_bytes = inputs.gpu_memory_bytes
            limit_source = f"--gpu {args.gpu}" if args.gpu else "--gpu-memory / the run's configuration"
    elif args.gpu or args.gpu_memory:
        if args.gpu and args.gpu_memory:
            raise InputError("give --gpu or --gpu-memory, not both (--gpu sets the memory from the GPU's real size)")
        if args.gpu:
            from memtune.spec.gpus import lookup_gpu, usable_memory

            gpu = lookup_gpu(args.gpu)
            limit_bytes, limit_source = usable_memory(gpu), f"--gpu {gpu.name}"
        else:
            limit_bytes, limit_source = args.gpu_memory.nbytes, f"--gpu-memory {args.gpu_memory.text}"
    elif _run_flags_given(args):
        raise InputError(
            "run flags (--tp, --pp, --gpus, ...) describe a configuration: add its source "
            "(--preset, --hf-config, --megatron-args, --config or --example) to compare with the estimate"
        )

    from memtune.runtime.read import read_measurements
    from memtune.runtime.report import build_document, comparison_document, render_text
    from memtune.runtime.verdicts import all_verdicts

    measurements = read_measurements(files)
    if limit_bytes is None:
        totals = [r.device_total_bytes for r in measurements.ranks if r.device_total_bytes]
        if totals:
            limit_bytes, limit_source = max(totals), "the device total the inputs report (nvidia-smi)"
    figs, verdicts = all_verdicts(measurements, limit_bytes)
    comparison = None
    if estimate is not None and run is not None and model is not None:
        from memtune.runtime.compare import compare

        rows, notes = compare(measurements, estimate, run.world_size, run.pp)
        comparison = comparison_document(rows, notes, model.name, run.world_size, run.pp)
    doc = build_document(
        measurements, figs, verdicts, limit_bytes, limit_source, comparison, str(plot_path) if plot_path else None
    )
    if plot_path is not None:
        from memtune.runtime.plots import runtime_chart
        from memtune.runtime.svg import write_svg

        write_svg(plot_path, runtime_chart(measurements, limit_bytes))
    if args.as_json:
        print_json(doc)
    else:
        print(render_text(doc), end="")
    return 0


_RUN_FLAGS = (
    "tp",
    "pp",
    "vpp",
    "cp",
    "ep",
    "etp",
    "mbs",
    "gbs",
    "seq_length",
    "gpus",
    "recompute",
    "precision",
    "peft",
)


def _run_flags_given(args: SimpleNamespace) -> bool:
    return any(getattr(args, name, None) not in (None, False) for name in _RUN_FLAGS)
