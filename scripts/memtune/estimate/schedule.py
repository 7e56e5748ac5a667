"""The pipeline schedule and recompute: how many layer x micro-batch activation sets are
alive at a stage's peak (1F1B, interleaved), what full/selective recompute keeps and replays,
CPU offloading, and the CUDA-graph capture peak."""

from __future__ import annotations

import math

from memtune.estimate.activations import LayerActivations
from memtune.estimate.device import WORKSPACE_BYTES
from memtune.estimate.parameters import main_param_share
from memtune.spec.run_spec import RunSpec

#: Fine-grained activation offloading overlaps copies with compute: two layers' offloaded
#: tensors (the one in flight to/from host and the one being computed) stay on the GPU.
OFFLOAD_RESIDENT_LAYERS = 2


def interleaved_peak_layer_sets(run: RunSpec, stage: int, chunk_layers: tuple[int, ...]) -> float:
    """Peak layer x micro-batch activation sets on one stage of the interleaved 1F1B schedule
    whose chunks hold different numbers of layers, found by replaying the schedule.

    Megatron's order (schedules.py, forward_backward_pipelining_with_interleaving): forward
    number ``k`` runs chunk ``(k mod (g v)) div g`` (``g`` = micro-batches per virtual-stage
    group), backward number ``k`` runs the mirrored chunk ``v - 1 - that``; the stage first
    runs ``2 (pp - stage - 1) + (v - 1) g`` warm-up forwards, then alternates one forward and
    one backward. The alive set is periodic after one cycle of ``g v`` forwards, so replaying
    three groups per chunk finds the same peak as the whole step.
    """
    v, pp = len(chunk_layers), run.pp
    g = run.microbatch_group_size_per_vp_stage or pp
    m = min(run.num_microbatches, 3 * g + pp)
    total = m * v
    warmup = min(total, 2 * (pp - stage - 1) + (v - 1) * g)

    def chunk(k: int, forward: bool) -> int:
        c = (k % (g * v)) // g
        return c if forward else v - 1 - c

    alive = peak = 0.0
    backward = 0
    for k in range(total):
        alive += chunk_layers[chunk(k, True)]
        peak = max(peak, alive)
        if k >= warmup:
            alive -= chunk_layers[chunk(backward, False)]
            backward += 1
    return peak


def in_flight_layer_microbatches(
    run: RunSpec, stage: int, layers: int, chunk_layers: tuple[int, ...] | None = None
) -> float:
    """Layer x micro-batch activation sets alive at this stage's peak.

    1F1B: stage ``i`` runs ``pp - i - 1`` warm-up forwards before its first backward,
    so ``pp - i`` micro-batches are alive (fewer if the step has fewer micro-batches).
    Interleaved with ``v`` chunks of ``layers / v`` layers: Megatron warms up
    ``2(pp - i - 1) + (v - 1) * group`` chunk-forwards (group = micro-batches per
    virtual-stage group, default pp); the peak is that plus one, capped at all chunks.
    """
    pp, m = run.pp, run.num_microbatches
    if pp == 1:
        return float(layers)
    v = run.vpp_chunks
    if v == 1:
        return float(layers * min(pp - stage, m))
    if chunk_layers is not None and len(chunk_layers) == v:
        return interleaved_peak_layer_sets(run, stage, chunk_layers)
    group = run.microbatch_group_size_per_vp_stage or pp
    warmup = 2 * (pp - stage - 1) + (v - 1) * group
    chunks = min(warmup + 1, m * v)
    return layers / v * chunks


def microbatches_in_flight(run: RunSpec, stage: int) -> float:
    if run.pp == 1:
        return 1.0
    if run.vpp_chunks == 1:
        return float(min(run.pp - stage, run.num_microbatches))
    return in_flight_layer_microbatches(run, stage, run.vpp_chunks) / run.vpp_chunks


def recompute_layers(run: RunSpec, n: int, inflight_layers: float, stored: float, ckpt: float) -> float:
    """Activations the stage's decoder layers keep saved between forward and backward.

    Under full recompute a checkpointed group of ``recompute_num_layers`` keeps only its
    input (the uniform method checkpoints every group, the block method the first ``k``
    layers of each chunk and stores the rest in full). What a recompute re-materialises in
    backward is :func:`recompute_replay`, part of the backward working set.
    """
    if n == 0:
        return 0.0
    if run.recompute_granularity != "full":
        return inflight_layers * stored
    chunk_layers = n / run.vpp_chunks
    k = max(1, run.recompute_num_layers or 1)
    mbs_chunks = inflight_layers / chunk_layers  # chunk-micro-batches alive
    if (run.recompute_method or "uniform") == "uniform":
        return mbs_chunks * math.ceil(chunk_layers / k) * ckpt
    recomputed = min(k, chunk_layers)
    return mbs_chunks * (recomputed * ckpt + (chunk_layers - recomputed) * stored)


def recompute_replay(run: RunSpec, n: int, full: float, ckpt: float, stage_acts: list[LayerActivations]) -> float:
    """Bytes a recompute re-materialises for the layer(s) whose backward runs.

    Full recompute re-runs one checkpointed group (``k`` layers, uniform; one layer, block)
    and holds its full activations again. The re-run starts from the saved input itself
    (tensor_parallel/random.py, ``CheckpointFunction.backward``: ``detached_inputs =
    detach_variable(inputs)``, which shares the storage), so the group's input is not a
    second copy: ``k x full - ckpt``. Selective recompute likewise re-runs the checkpointed
    modules of the layer in backward and holds their outputs again
    (``CheckpointWithoutOutput._recompute``); offloaded tensors are not recomputed (their
    prefetch is charged as resident layers). Without this a stage of one layer and one
    micro-batch in flight would look cheaper under recompute than without it.
    """
    if n == 0:
        return 0.0
    if run.recompute_granularity == "full":
        chunk_layers = n / run.vpp_chunks
        k = max(1, run.recompute_num_layers or 1)
        layers = min(k, chunk_layers) if (run.recompute_method or "uniform") == "uniform" else min(1, k)
        return max(0.0, layers * full - ckpt)
    if run.recompute_granularity == "selective":
        return max((max(0.0, a.full - a.stored - a.offloaded) for a in stage_acts), default=0.0)
    return 0.0


def apply_offload(run: RunSpec, activations: float, layer_acts: float, n: int) -> float:
    if run.cpu_offloading and run.cpu_offloading_activations and n:
        share = min(n, run.cpu_offloading_num_layers) / n
        # Offloaded layers leave the GPU; one layer stays resident as the copy buffer.
        return activations - layer_acts * share + layer_acts / n
    return activations


def capture_bytes(run: RunSpec, weights: float, grads: float, optim: float, graph_pool: float) -> float:
    """Allocated bytes while CUDA graphs are captured (0 without graphs).

    Capture runs the graphed modules in the pipeline order of one step, so their saved
    tensors for all in-flight micro-batches are live allocations then; afterwards they belong
    to the graph's private pool (reserved, not counted as allocated). Capturing after
    ``cuda_graph_warmup_steps`` training steps means the optimizer states already exist;
    capturing at step 0 means only the fp32 main parameters (created with the optimizer) do.
    """
    if not graph_pool:
        return 0.0
    states = optim if run.cuda_graph_warmup_steps > 0 else optim * main_param_share(run)
    return weights + grads + states + WORKSPACE_BYTES + graph_pool
