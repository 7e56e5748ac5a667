#!/usr/bin/env python3
"""Term-by-term decomposition of the estimate for the seed's Megatron Bridge rows (issue 12).

Why this exists: one seed row (Llama3-70B TP 8) is outside 5% while the other four are inside,
and a fix is only acceptable if it moves all five the right way. So instead of looking at one
row, this prints every term of the estimate on the GPU that sets it, side by side for the five
Llama3-70B rows, the term-by-term change from TP 4 to TP 8, and the same terms regrouped into
the phases of Bridge's *first* training iteration. Bridge prints ``torch.cuda.memory_stats``
once, after the first logged iteration (``training_log``: ``if report_memory_flag: ...
report_memory_flag = False``; the performance overrides set ``log_interval = 1``), while TE CUDA
graphs are captured only when ``step - start_iteration == cuda_graph_warmup_steps`` (3), i.e.
after that report. A phase the estimator uses (graph capture) may therefore lie outside the
window the seed's numbers were read in; the table shows what each reading implies.

The last block fits ``bytes = a x params + b x (params / DP)`` through two rows and predicts
the others. It is a diagnostic of which quantity the measured residual follows (parameters,
optimizer shard or activations), never a constant used by the estimator.

Usage:
    .venv/bin/python benchmarks/seed_decomposition.py [--json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from estimator_accuracy import bridge_cases  # noqa: E402
from memtune.estimate.estimator import estimate, layer_activations  # noqa: E402

GB = 1e9
LLAMA_ROWS = (
    ("TP4 PP4 DP2", "llama3-70b-sft-tp4-pp4-vpp5"),
    ("TP4 PP8 DP1", "llama3-70b-sft-tp4-pp8-vpp5"),
    ("TP8 PP4 DP1", "llama3-70b-sft-tp8-pp4-vpp5"),
    ("VPP 10", "llama3-70b-sft-tp4-pp4-vpp10"),
    ("mlp recompute", "llama3-70b-sft-recompute-mlp"),
)
LORA_ROW = "qwen3-8b-lora-tp2-s8192 baseline"


def _fp32_grad_copy(run, params: float) -> float:
    """fp32 gradient shard the mixed-precision optimizer creates at the step (bf16 grads only,
    full training): the same quantity the estimator's step phase charges."""
    if run.peft is not None or run.grad_reduce_in_fp32 or run.params_dtype == "fp32":
        return 0.0
    shard = max(1, run.dp * run.cp) if run.use_distributed_optimizer else 1
    return 4.0 * params / shard


def decompose(model, run, stage_index: int | None = None) -> dict[str, float]:
    """Every term of the estimate on one pipeline stage (default: the one that sets
    ``peak_allocated_bytes``), in bytes, plus the phase totals the estimator compares and the
    first-iteration phases."""
    est = estimate(model, run)
    if stage_index is None:
        stage = max(est.stages, key=lambda s: (s.allocated_bytes, -s.stage))
    else:
        stage = est.stages[stage_index]
    per_layer = layer_activations(model, run, False)
    layer_mbs = stage.in_flight_microbatches * stage.layers
    layer_total = layer_mbs * per_layer.stored
    param_b = 1 if run.fp8_param_gather else (4 if run.params_dtype == "fp32" else 2)
    copy = _fp32_grad_copy(run, stage.params)
    static = stage.weights + stage.gradients + stage.optimizer + stage.workspace
    steady = static + stage.activations + stage.optimizer_step
    # Adam keeps fp32 main params (created with the optimizer) and two fp32 moments (created
    # lazily by the first step), so before the first step only 4 of the 12 bytes exist.
    main_share = 4 / 12 if run.optimizer == "adam" and not run.use_precision_aware_optimizer else 1.0
    all_acts = stage.activations + stage.cuda_graphs  # eager: nothing lives in a graph pool yet
    first_fwd_bwd = stage.weights + stage.gradients + stage.optimizer * main_share + all_acts + stage.workspace
    first_step = static + copy
    return {
        "stage": stage.stage,
        "params": stage.params,
        "weights": stage.weights,
        "weights_beyond_primary": stage.weights - stage.params * param_b,
        "gradients": stage.gradients,
        "optimizer": stage.optimizer,
        "layer_mbs_in_flight": layer_mbs,
        "per_layer_stored": per_layer.stored,
        "per_layer_graphed": per_layer.graphed,
        "layer_activations": layer_total,
        "graph_pool": stage.cuda_graphs,
        "other_activations": stage.activations - (layer_total - stage.cuda_graphs),
        "workspace": stage.workspace,
        "fp32_grad_copy": copy,
        "steady": steady,
        "capture": stage.capture_bytes,
        "estimate": stage.allocated_bytes,
        "phase": "capture"
        if stage.capture_bytes > steady
        else ("optimizer step" if stage.optimizer_step else "fwd/bwd"),
        "first_fwd_bwd": first_fwd_bwd,
        "first_step": first_step,
        "first_iteration": max(first_fwd_bwd, first_step),
    }


def _rows():
    cases = {name: (model, run, measured) for name, _, model, run, measured, _ in bridge_cases()}
    llama, first = [], []
    for label, case in LLAMA_ROWS:
        model, run, measured = cases[case]
        llama.append((label, run, measured, decompose(model, run)))
        first.append(decompose(model, run, 0))
    model, run, measured = cases[LORA_ROW]
    return llama, first, (run, measured, decompose(model, run), layer_activations(model, run, False))


def _fit(llama) -> dict[str, float]:
    """Solve measured = a*params + b*(params/DP) through the TP4-DP2 and TP8-DP1 rows."""
    (_, r1, m1, d1), (_, r2, m2, d2) = llama[0], llama[2]
    p1, s1 = d1["params"], d1["params"] / r1.dp
    p2, s2 = d2["params"], d2["params"] / r2.dp
    det = p1 * s2 - p2 * s1
    a = (m1 * s2 - m2 * s1) / det
    b = (p1 * m2 - p2 * m1) / det
    pred = {label: a * d["params"] + b * d["params"] / run.dp for label, run, _, d in llama}
    return {"a_bytes_per_param": a, "b_bytes_per_shard_param": b, "predicted": pred}


#: The per-term rows of the Llama3-70B table: (label, decomposition key[, divisor, format]);
#: the divisor is GB and the format two decimals unless given.
TERM_ROWS: tuple[tuple[Any, ...], ...] = (
    ("pipeline stage", "stage", 1, "{:>14.0f}"),
    ("parameters on the GPU (billion)", "params"),
    ("weights", "weights"),
    ("  of which fp8 column-wise copies", "weights_beyond_primary"),
    ("gradients (bf16 buffer)", "gradients"),
    ("optimizer (fp32 main + Adam, /DP)", "optimizer"),
    ("layer x micro-batches in flight", "layer_mbs_in_flight", 1, "{:>14.1f}"),
    ("saved per layer per micro-batch (MB)", "per_layer_stored", 1e6, "{:>14.1f}"),
    ("  of which inside the mlp graph (MB)", "per_layer_graphed", 1e6, "{:>14.1f}"),
    ("layer activations (all)", "layer_activations"),
    ("  of which CUDA-graph pool", "graph_pool"),
    ("other activations (loss, deferred...)", "other_activations"),
    ("workspaces", "workspace"),
    ("fp32 gradient copy at the step", "fp32_grad_copy"),
    ("phase: steady fwd/bwd/step", "steady"),
    ("phase: graph capture", "capture"),
)


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option("--json", "as_json", is_flag=True, help="print the decomposition as JSON")
def command(as_json: bool) -> int:
    llama, first, (lora_run, lora_measured, lora, lora_layer) = _rows()
    fit = _fit(llama)
    if as_json:
        out = {
            "llama3_70b": {label: {"measured": m, **d} for label, _, m, d in llama},
            "llama3_70b_stage0": {label: d for (label, _, _, _), d in zip(llama, first, strict=True)},
            "fit": fit,
            "qwen3_8b_lora": {"measured": lora_measured, "mbs": lora_run.mbs, "seq": lora_run.seq_length, **lora},
        }
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    def line(name, values, scale=GB, fmt="{:>14.2f}"):
        print(f"{name:<38}" + "".join(fmt.format(v / scale) for v in values))

    ds = [d for _, _, _, d in llama]
    print("Llama3-70B SFT, LLAMA3_70B_SFT_CONFIG_H100_FP8_CS_V1 rows (GB = 1e9 B; the GPU that sets the estimate)")
    print(f"{'term':<38}" + "".join(f"{label:>14}" for label, _, _, _ in llama))
    for name, key, *shown in TERM_ROWS:
        line(name, [d[key] for d in ds], *shown)
    print(f"{'estimate (phase)':<38}" + "".join(f"{d['estimate'] / GB:>8.2f} {d['phase'][:5]:<5}" for d in ds))
    line("measured", [m for _, _, m, _ in llama])
    print(f"{'error':<38}" + "".join(f"{d['estimate'] / m - 1:>+14.1%}" for (_, _, m, d) in llama))
    print("first logged iteration only (no graphs yet, Adam moments created at its step):")
    line("  iteration-1 fwd/bwd", [d["first_fwd_bwd"] for d in ds])
    line("  iteration-1 optimizer step", [d["first_step"] for d in ds])
    print(
        f"{'  error if read there':<38}" + "".join(f"{d['first_iteration'] / m - 1:>+14.1%}" for (_, _, m, d) in llama)
    )

    base, tp8 = first[0], first[2]
    print("\nTP4 PP4 DP2 -> TP8 PP4 DP1 on pipeline stage 0 (rank 0), change per term (GB):")
    keys = ("weights", "gradients", "optimizer", "layer_activations", "graph_pool", "other_activations")
    keys += ("fp32_grad_copy", "steady", "capture", "estimate", "first_fwd_bwd", "first_step")
    for key in keys:
        print(f"  {key:<36}{base[key] / GB:>8.2f} ->{tp8[key] / GB:>7.2f}  {(tp8[key] - base[key]) / GB:>+7.2f}")
    print(
        f"  {'measured (peak over the stages)':<36}{llama[0][2] / GB:>8.2f} ->{llama[2][2] / GB:>7.2f}  "
        f"{(llama[2][2] - llama[0][2]) / GB:>+7.2f}"
    )

    print(
        f"\nDiagnostic fit through TP4-DP2 and TP8-DP1: measured = {fit['a_bytes_per_param']:.2f} B x params"
        f" + {fit['b_bytes_per_shard_param']:.2f} B x params/DP (the estimator charges 4 + 12 at the step"
        " before the fp32 copy); predicted for the others:"
    )
    for label, _, m, _ in llama:
        print(f"  {label:<16}{fit['predicted'][label] / GB:>8.2f} GB vs {m / GB:.2f} measured")

    print(
        f"\nQwen3-8B LoRA TP2 seq {lora_run.seq_length}, micro-batch {lora_run.mbs} (assumed: Bridge's _peft_common; "
        f"the re-gather saving pins tokens per micro-batch), measured {lora_measured / GB:.2f} GB, "
        f"estimate {lora['estimate'] / GB:.2f} GB ({lora['estimate'] / lora_measured - 1:+.1%}):"
    )
    for key in ("weights", "gradients", "optimizer", "layer_activations", "other_activations", "workspace"):
        print(f"  {key:<36}{lora[key] / GB:>8.2f}")
    print(f"  saved per layer ({lora['layer_mbs_in_flight']:.0f} layers in flight), MB:")
    for name, value in lora_layer.terms:
        if value:
            print(f"    {name:<34}{value / 1e6:>8.1f}")
    print(
        f"    {'LoRA (adapters + gathered A input)':<34}{(lora_layer.stored - sum(v for _, v in lora_layer.terms)) / 1e6:>8.1f}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run :data:`command` under the helpers' runner: one-line usage errors, exit 2."""
    from memtune.cli import invoke

    return invoke(command, "seed_decomposition.py", argv)


if __name__ == "__main__":
    from memtune.cli import run

    run(main, "seed_decomposition.py")
