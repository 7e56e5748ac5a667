"""estimate_memory.py: How much memory will this Megatron run need per GPU, and where does it go?

Builds a ModelSpec + RunSpec from one source (preset, HF config, Megatron-LM flags, Megatron
Bridge YAML + Hydra overrides, or the embedded example), lets plain flags change the run,
and prints the per-pipeline-stage estimate (text table with bars, or --json).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import Command, invoke, option, print_json
from memtune.commands.options import OUTPUT, json_option, run_input_options
from memtune.commands.run_inputs import load_model_and_run, print_presets
from memtune.units import GIB

if TYPE_CHECKING:  # the specs and the estimator load the YAML tables: imported when a command runs
    from memtune.estimate.result import MemoryEstimate
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import RunSpec

DESCRIPTION = """\
Estimate peak GPU memory per pipeline stage of a Megatron-Core / Megatron Bridge training run:
weights, gradients, optimizer states, activations (for the micro-batches in flight under the
1F1B / interleaved schedule) and allocator-visible workspaces - the allocated view, what
torch.cuda.max_memory_allocated reports - and the device view nvidia-smi shows: that plus the
allocator's reserve and memory outside PyTorch (CUDA context, libraries, NCCL), measured on an H200.
The verdict compares the device view with the GPU's usable memory: FITS, BORDERLINE (under 10% free)
or DOES NOT FIT; --gpu NAME (the size the driver reports) or --gpu-memory SIZE (units: MiB/GiB =
2^20/2^30 bytes, MB/GB = 10^6/10^9 bytes; a bare number is GiB). A run that declares a feature the
model has no term for (linear-attention variants) is refused rather than estimated as something else.

Model from exactly one of --preset, --hf-config, --megatron-args, --config (a Bridge YAML; may be
combined with --preset/--hf-config for the architecture) or --example. Flags then override the run."""

EPILOG = """\
examples:
  python3 scripts/estimate_memory.py --example
  python3 scripts/estimate_memory.py --preset llama3-8b --gpus 8 --tp 2 --mbs 1 --gbs 128 --seq-length 8192 --sequence-parallel
  python3 scripts/estimate_memory.py --preset deepseek-v3 --gpus 1024 --tp 2 --pp 16 --first-stage-layers 1 --ep 64 --etp 1 --mbs 1 --gbs 4096 --recompute full
  python3 scripts/estimate_memory.py --hf-config ~/models/Qwen3-8B/config.json --gpus 2 --tp 2 --peft lora --regather --seq-length 8192
  python3 scripts/estimate_memory.py --megatron-args launch.sh --gpus 64 --json
  python3 scripts/estimate_memory.py --config run.yaml --preset llama3-70b --gpus 32 model.pipeline_model_parallel_size=8 train.global_batch_size=64
  python3 scripts/estimate_memory.py --example --recompute-modules core_attn,mlp --gpu H100-80GB
  python3 scripts/estimate_memory.py --example --gpu-memory 81559MiB   # the MiB figure nvidia-smi prints

exit codes: 0 estimate printed (whether or not it fits), 2 bad input (one line naming it)."""


def gib(value: float) -> str:
    """A byte count as GiB in the table's 8-character column."""
    return f"{value / GIB:8.2f}"


def _bar(value: int, peak: int, width: int = 24) -> str:
    filled = int(round(width * value / peak)) if peak else 0
    return "#" * filled + "." * (width - filled)


def render_text(model: ModelSpec, run: RunSpec, est: MemoryEstimate, notes: list[str], gpu_memory: int | None) -> str:
    from memtune.spec.model_spec import count_parameters

    lines = [
        f"Model {model.name}: {est.parameters_total / 1e9:.2f} B parameters"
        + (f" ({count_parameters(model).active / 1e9:.2f} B active)" if model.is_moe else "")
        + f", {est.parameters_per_gpu_max / 1e9:.3f} B on the most-loaded GPU",
        "",
        "Per pipeline stage (GiB, one GPU of each stage):",
    ]
    show_step = any(s.optimizer_step for s in est.stages)
    show_graphs = any(s.cuda_graphs for s in est.stages)
    header = f"  {'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} {'activ':>8}"
    header += f" {'step+':>8}" if show_step else ""
    header += f" {'wkspace':>8}" + (f" {'graphs':>8}" if show_graphs else "")
    header += f" {'alloc':>8} {'reserve':>8} {'outside':>8} {'device':>8}"
    lines.append(header)
    peak = est.peak_bytes
    for s in est.stages:
        mark = "*" if s.stage == est.peak_stage else " "
        row = f" {mark}{s.stage:>5} {s.layers:>6} {gib(s.weights)} {gib(s.gradients)} {gib(s.optimizer)} {gib(s.activations)}"
        row += f" {gib(s.optimizer_step)}" if show_step else ""
        row += f" {gib(s.workspace)}" + (f" {gib(s.cuda_graphs)}" if show_graphs else "")
        row += f" {gib(s.allocated_bytes)} {gib(s.reserve)} {gib(s.overhead)} {gib(s.total_bytes)}"
        row += f"  {_bar(s.total_bytes, peak)}"
        lines.append(row)
    top = est.stages[est.peak_stage]
    lines.append(
        f"  * most-loaded stage: {top.stage}: device view {top.total_bytes / GIB:.2f} GiB "
        f"= {top.total_bytes / 1e9:.2f} GB (what nvidia-smi shows) = max allocated by PyTorch "
        f"{top.allocated_bytes / GIB:.2f} GiB + allocator reserve {top.reserve / GIB:.2f} GiB + outside PyTorch "
        f"{top.overhead / GIB:.2f} GiB"
        + (f" + CUDA graphs {top.cuda_graphs / GIB:.2f} GiB" if top.cuda_graphs else "")
        + f"; activations of {top.in_flight_microbatches:g} in-flight micro-batch(es)"
    )
    lines.append(
        f"  model state (weights + gradients + optimizer states) {top.model_state_bytes / GIB:.2f} GiB on that GPU; "
        f"whole model {est.model_state_total_bytes / GIB:.2f} GiB over all GPUs"
    )
    if show_step:
        lines.append(
            "  step+ = fp32 copies of bf16 gradients at the optimizer step, beyond the activations freed by then"
        )
    if show_graphs:
        lines.append(
            "  graphs = activations saved inside CUDA-graph-captured modules (graph memory pool: reserved, "
            "not counted by max_memory_allocated after capture)"
        )
    lines.append("")
    lines.append("Assumptions:")
    for a in [*notes, *est.assumptions]:
        lines.append(f"  - {a}")
    if gpu_memory:
        from memtune.estimate.verdict import fit_verdict

        lines.append("")
        lines.append(f"Verdict: {fit_verdict(est.peak_bytes, gpu_memory).sentence()}")
    return "\n".join(lines)


@click.command(
    "estimate-memory",
    cls=Command,
    short_help="peak memory per GPU for each pipeline stage, and where it goes",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@run_input_options()
@json_option()
@option("--plot", metavar="FILE.svg", help="also draw each stage's components against the GPU (SVG)", section=OUTPUT)
def command(**params: object) -> int:
    return _estimate(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "estimate_memory.py", argv)


def _estimate(args: SimpleNamespace) -> int:
    if args.list_presets:
        print_presets(args.as_json)
        return 0
    from memtune.estimate.estimator import estimate
    from memtune.estimate.softmax_dtype import softmax_dtype_note

    plot = None
    if args.plot is not None:
        from memtune.runtime.svg import check_plot_path

        plot = check_plot_path(args.plot)
    inputs = load_model_and_run(args)
    model, run, notes = inputs.model, inputs.run, list(inputs.notes)
    if run.gbs is None and run.pp > 1:
        # With PP > 1 the global batch decides how many micro-batches are in flight on the
        # first stages: leaving it out can understate activations several-fold.
        notes.insert(
            0,
            f"WARNING: no global batch (--gbs) with PP {run.pp}: assumed one micro-batch per "
            "data-parallel rank per step, so the pipeline never fills and early stages' activations "
            "are understated; pass --gbs",
        )
    elif run.gbs is None:
        notes.append(
            "global batch not given: one micro-batch per data-parallel rank per step "
            "(pipeline warm-up then holds fewer micro-batches; pass --gbs)"
        )
    est = estimate(model, run)
    # An unstated softmax dtype that moves the peak (unfused attention): the other reading
    # leads the output, so nobody quotes one of two defaults as the answer.
    softmax = softmax_dtype_note(model, run, est)
    if softmax is not None:
        notes.insert(0, softmax.warning())
    gpu_memory = inputs.gpu_memory_bytes
    if plot is not None:
        from memtune.runtime.plots import estimate_chart
        from memtune.runtime.svg import write_svg

        write_svg(plot, estimate_chart(est, gpu_memory, model.name))
    warnings = [n for n in notes if n.startswith("WARNING")] + list(est.warnings)
    if args.as_json:
        doc = est.to_json()
        doc["assumptions"] = [*notes, *doc["assumptions"]]
        doc["warnings"] = warnings
        if softmax is not None:
            doc["softmax_dtype"] = softmax.to_json()
        doc["model"] = model.name
        if gpu_memory:
            from memtune.estimate.verdict import fit_verdict

            verdict = fit_verdict(est.peak_bytes, gpu_memory)
            doc["gpu_memory_bytes"] = gpu_memory
            doc["fits"] = verdict.fits
            doc["verdict"] = verdict.to_json()
        print_json(doc)
        return 0
    for warning in warnings:  # first, where nobody can miss them
        print(warning)
    if warnings:
        print()
    print(render_text(model, run, est, notes, gpu_memory))
    if plot is not None:
        print(f"\nChart written to {plot}")
    return 0
