"""What an estimate returns: per-stage byte counts and the two views of them.

The **allocated** view (``allocated_bytes``, ``peak_allocated_bytes``) is what
``torch.cuda.max_memory_allocated`` reports; the **device** view (``total_bytes``, ``peak_bytes``)
adds the allocator's reserve, CUDA-graph pools and memory outside PyTorch - what nvidia-smi
shows and what the fit verdict (estimate/verdict.py) compares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage (the most-loaded GPU of it), in bytes."""

    stage: int
    layers: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int
    overhead: int
    params: int
    in_flight_microbatches: float
    optimizer_step: int = 0  # fp32 gradient copies at the optimizer step beyond the (freed) activations
    cuda_graphs: int = 0  # activations held in CUDA-graph private pools (reserved, not "allocated")
    capture_bytes: int = 0  # allocated while the CUDA graphs are being captured
    reserve: int = 0  # caching-allocator reserve above the allocated peak (device view only)

    @property
    def step_bytes(self) -> int:
        """Tensors allocated at the training step's peak."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.workspace + self.optimizer_step

    @property
    def allocated_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would report (tensors only): the larger of
        the training-step peak and the CUDA-graph capture peak."""
        return max(self.step_bytes, self.capture_bytes)

    @property
    def total_bytes(self) -> int:
        """The device view (what nvidia-smi shows at the peak): the step's tensors, the
        allocator's reserve above them, CUDA-graph pools and memory outside PyTorch."""
        return self.step_bytes + self.reserve + self.cuda_graphs + self.overhead

    @property
    def model_state_bytes(self) -> int:
        """Weights + gradients + optimizer states: the static part people ask for first."""
        return self.weights + self.gradients + self.optimizer

    def components(self) -> dict[str, int]:
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "optimizer_step": self.optimizer_step,
            "workspace": self.workspace,
            "cuda_graphs": self.cuda_graphs,
            "allocator_reserve": self.reserve,
            "overhead": self.overhead,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "layers": self.layers,
            "total_bytes": self.total_bytes,
            "allocated_bytes": self.allocated_bytes,
            "model_state_bytes": self.model_state_bytes,
            "components": self.components(),
            "parameters": self.params,
            "in_flight_microbatches": self.in_flight_microbatches,
        }


@dataclass(frozen=True)
class MemoryEstimate:
    stages: tuple[StageEstimate, ...]
    parameters_total: int
    parameters_per_gpu_max: int
    assumptions: tuple[str, ...]
    gpus_per_stage: int = 1

    @property
    def peak_stage(self) -> int:
        return max(self.stages, key=lambda s: (s.total_bytes, -s.stage)).stage

    @property
    def peak_bytes(self) -> int:
        return self.stages[self.peak_stage].total_bytes

    @property
    def peak_allocated_bytes(self) -> int:
        return max(s.allocated_bytes for s in self.stages)

    @property
    def model_state_total_bytes(self) -> int:
        """Weights + gradients + optimizer states summed over every GPU of the run
        (each stage's GPU times the GPUs that hold a copy or a shard like it)."""
        return sum(s.model_state_bytes for s in self.stages) * self.gpus_per_stage

    @property
    def warnings(self) -> tuple[str, ...]:
        """The assumptions that can change the answer (shown first)."""
        return tuple(a for a in self.assumptions if a.startswith("WARNING"))

    @property
    def last_stage(self) -> StageEstimate:
        return self.stages[-1]

    def to_json(self) -> dict[str, Any]:
        """The JSON document of references/json-output.md (extra keys are additive)."""
        return {
            "peak_bytes": self.peak_bytes,
            "peak_stage": self.peak_stage,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "model_state_bytes": self.stages[self.peak_stage].model_state_bytes,
            "model_state_total_bytes": self.model_state_total_bytes,
            "stages": [s.to_json() for s in self.stages],
            "parameters": {"total": self.parameters_total, "per_gpu_max": self.parameters_per_gpu_max},
            "assumptions": list(self.assumptions),
        }
