"""plan_memory.py: this run does not fit - which change makes it fit at the lowest throughput cost?"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import Command, invoke, option, print_json
from memtune.commands.options import HEADROOM, POSITIVE, json_option, run_input_options
from memtune.errors import InputError
from memtune.spec.fit_band import BORDERLINE_SHARE

if TYPE_CHECKING:  # the specs load the YAML tables: imported when a command runs
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import RunSpec

PLANNER = "planner"

DESCRIPTION = """\
This run does not fit (or barely fits): which changes make it fit at the lowest throughput cost?

The answer leads with a ladder: from your run, the priced change that buys the most memory per
unit of throughput, re-estimated, repeated until the run fits with the headroom (expandable
segments first; the distributed optimizer, sequence parallelism and selective recompute before
full recompute, PP and TP), each rung with its saving, cumulative peak, throughput cost and
evidence label, and the exact change. Then the one-step table, built as follows.

Takes the same run description as estimate_memory.py, enumerates the changes you could make
at the same GPU count (expandable segments, LoRA input re-gather, selective/full recompute,
distributed optimizer / Megatron-FSDP, PP with and without VPP, TP, SP, CP, EP/ETP, micro-batch
size, CPU offloading), rejects the ones Megatron would refuse (with the reason), estimates the
peak memory of the rest and ranks those that fit with headroom by estimated throughput.
Throughput numbers are measured where measurements exist (Llama3-70B on 32xH100: TP 4->8 -28.4%,
PP 4->8 with DP halved -5.9%, mlp recompute ~-16%, ...), otherwise calibrated on them,
first-principles or an assumption, and unknown (ranked last) when nothing prices a change;
every row says which.
"""

EPILOG = """\
examples:
  # the seed's Llama3-70B SFT case (TP4 PP4 VPP5 DP2 on 32x H100 80GB)
  python3 scripts/plan_memory.py --example
  python3 scripts/plan_memory.py --example --json --top 3
  # your own run: same inputs as estimate_memory.py
  python3 scripts/plan_memory.py --preset llama3-70b --gpus 32 --tp 4 --pp 4 --vpp 5 \\
      --mbs 1 --gbs 32 --seq-length 4096 --sequence-parallel --gpu H100-80GB --headroom 10%
  python3 scripts/plan_memory.py --preset deepseek-v3 --gpus 1024 --tp 8 --ep 64 --etp 1 \\
      --mbs 1 --gbs 4096 --sequence-parallel --gpu-memory 80GiB --top 5
  python3 scripts/plan_memory.py --config run.yaml --preset llama3-70b --gpus 32 model.pipeline_model_parallel_size=8
  python3 scripts/plan_memory.py --megatron-args launch.sh --gpus 64 --json
  # every combination instead of one change at a time
  python3 scripts/plan_memory.py --example --sweep --top 5

exit codes: 0 a plan was made (including "nothing fits"), 2 bad usage or input.
"""

#: Assumed when neither --gpu nor --gpu-memory (nor the source) gives a size: the seed's card,
#: at the size its driver reports (81559 MiB = 79.6 GiB, from gpus.yaml), not a round 80 GiB
#: that no H100 has -- 0.4 GiB too generous in every fits/does-not-fit verdict.
DEFAULT_GPU = "H100-80GB"


def default_gpu_memory() -> tuple[int, str]:
    """(bytes, how to say it) for :data:`DEFAULT_GPU`, read from the one GPU table."""
    from memtune.estimate.plan_report import gib
    from memtune.spec.gpus import lookup_gpu, usable_memory
    from memtune.units import MIB

    usable = usable_memory(lookup_gpu(DEFAULT_GPU))
    return usable, f"{DEFAULT_GPU}: {usable // MIB}MiB = {gib(usable)}"


#: Static text: --help must run without PyYAML, so it cannot read the size from gpus.yaml.
_DEFAULT_HEADROOM = f"{BORDERLINE_SHARE:.0%}"
_MEMORY_DEFAULT = f"; default when no size is given: the usable memory of --gpu {DEFAULT_GPU}"


@click.command(
    "plan-memory",
    cls=Command,
    short_help="which changes make the run fit at the lowest throughput cost",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@run_input_options(memory_default=_MEMORY_DEFAULT)
@json_option()
@option(
    "--headroom",
    type=HEADROOM,
    default=_DEFAULT_HEADROOM,
    help=f"memory to keep free per GPU: a share of --gpu-memory (default {_DEFAULT_HEADROOM}, the band under "
    "which estimate_memory calls a fitting run BORDERLINE) or a size (4GiB)",
    section=PLANNER,
)
@option("--top", type=POSITIVE, default=10, metavar="N", help="show the N best rows (default 10)", section=PLANNER)
@option(
    "--expandable-segments",
    type=click.Choice(("on", "off", "unknown")),
    default="unknown",
    help="is PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True already set? (default unknown: offered, unless the "
    "--megatron-args launch script exports the setting)",
    section=PLANNER,
)
@option(
    "--gpus-per-node",
    type=POSITIVE,
    default=8,
    metavar="N",
    help="GPUs per NVLink domain; TP beyond it is rejected (default 8)",
    section=PLANNER,
)
@option("--sweep", is_flag=True, help="rank every combination, not one change at a time", section=PLANNER)
def command(**params: object) -> int:
    """The estimator's run inputs (the shared options, so both helpers read a run the same
    way) plus the planner's own options."""
    return _plan(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "plan_memory.py", argv)


def _load(args: SimpleNamespace) -> tuple[ModelSpec, RunSpec, int, list[str]]:
    """(model, run, GPU memory bytes, notes) through the shared run-input loader."""
    from memtune.commands.run_inputs import load_model_and_run

    inputs = load_model_and_run(args)
    notes = list(inputs.notes)
    memory = inputs.gpu_memory_bytes
    if memory is None:
        memory, said = default_gpu_memory()
        notes.append(f"GPU memory not given: assumed {said}; pass --gpu NAME or --gpu-memory")
    return inputs.model, inputs.run, memory, notes


def _plan(args: SimpleNamespace) -> int:
    if args.list_presets:
        from memtune.commands.run_inputs import print_presets

        print_presets(args.as_json)
        return 0
    from memtune.estimate import plan_report, planner
    from memtune.spec import run_spec as rs

    model, run, gpu, notes = _load(args)
    rs.validate(model, run)
    expandable = {"on": True, "off": False, "unknown": None}[args.expandable_segments]
    if expandable is None:  # not given: what the launch script exports, if it says
        expandable = run.expandable_segments
    settings = planner.PlanSettings(
        gpu_memory_bytes=gpu,
        headroom_bytes=args.headroom.bytes_of(gpu),
        expandable_segments=expandable,
        gpus_per_node=args.gpus_per_node,
    )
    if settings.limit_bytes <= 0:
        raise InputError(f"--headroom {args.headroom.text} leaves no memory of --gpu-memory {plan_report.gib(gpu)}")
    from memtune.estimate import ladder

    climbed = ladder.climb(model, run, settings)
    if args.sweep:
        result = planner.plan_sweep(model, run, settings)
    else:
        result = planner.plan(model, run, settings)
    if args.as_json:
        print_json(plan_report.to_json(result, args.top, notes, climbed))
    else:
        print(plan_report.to_text(result, args.top, notes, climbed))
    return 0
