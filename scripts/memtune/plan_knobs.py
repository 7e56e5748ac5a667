"""The settings the memory planner may change, as one frozen value.

The planner reasons about a run through the knobs an engineer turns when a job does
not fit (parallel sizes, micro-batch size, recompute, optimizer sharding, offloading,
allocator settings). Keeping them in one small dataclass lets the cost model, the
legality checks and the candidate generator agree on names without depending on how
the estimator stores a run; ``memtune.planner`` converts to and from the estimator's
run object in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Knobs:
    """One training configuration as the planner sees it (Megatron-Core names in comments)."""

    world: int  # number of GPUs
    tp: int = 1  # tensor_model_parallel_size
    pp: int = 1  # pipeline_model_parallel_size
    vpp: int | None = None  # virtual_pipeline_model_parallel_size (None = no interleaving)
    cp: int = 1  # context_parallel_size
    ep: int = 1  # expert_model_parallel_size
    etp: int | None = None  # expert_tensor_parallel_size (None = same as tp)
    mbs: int = 1  # micro_batch_size
    gbs: int = 1  # global_batch_size
    seq: int = 4096  # seq_length
    sequence_parallel: bool = False
    recompute_granularity: str | None = None  # None | "selective" | "full"
    recompute_modules: tuple[str, ...] = ()
    recompute_method: str | None = None  # "uniform" | "block" (full recompute)
    recompute_num_layers: int | None = None
    distributed_optimizer: bool = False  # use_distributed_optimizer
    fsdp: bool = False  # use_megatron_fsdp
    cpu_offloading: bool = False
    cpu_offloading_num_layers: int = 0
    peft: str | None = None  # "lora" when LoRA/PEFT
    lora_regather: bool = False  # LoRA(sequence_parallel_input_regather=True)
    expandable_segments: bool | None = None  # PYTORCH_CUDA_ALLOC_CONF; None = unknown
    cuda_graphs: bool = False
    cuda_graph_full_iteration: bool = False
    nccl_ub: bool = False  # ddp.nccl_ub / --use-nccl-ub

    @property
    def vpp_size(self) -> int:
        return self.vpp if self.vpp and self.vpp > 1 else 1

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp else self.tp

    @property
    def dp(self) -> int:
        """Data-parallel size (0 when TP x PP x CP does not divide the world)."""
        model_parallel = self.tp * self.pp * self.cp
        return self.world // model_parallel if model_parallel and self.world % model_parallel == 0 else 0

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step on each pipeline (0 when GBS is not a multiple of MBS x DP)."""
        per_step = self.mbs * self.dp
        return self.gbs // per_step if per_step and self.gbs % per_step == 0 else 0

    @property
    def recompute_set(self) -> frozenset[str]:
        return frozenset(self.recompute_modules) if self.recompute_granularity == "selective" else frozenset()

    def with_(self, **changes: Any) -> "Knobs":
        return replace(self, **changes)

    def layout(self) -> str:
        """Short human label such as ``TP4 PP4 VPP5 DP2``."""
        parts = [f"TP{self.tp}", f"PP{self.pp}"]
        if self.vpp_size > 1:
            parts.append(f"VPP{self.vpp_size}")
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        if self.etp and self.etp != self.tp:
            parts.append(f"ETP{self.etp}")
        parts.append(f"DP{self.dp}")
        return " ".join(parts)

    def recompute_label(self) -> str:
        if self.recompute_granularity == "full":
            how = self.recompute_method or "uniform"
            return f"full ({how}, {self.recompute_num_layers or 1} layer(s))"
        if self.recompute_granularity == "selective":
            return "selective [" + ", ".join(self.recompute_modules) + "]"
        return "none"
