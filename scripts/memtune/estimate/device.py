"""GPU memory the tensors of the model do not account for: allocator-visible workspaces,
the caching allocator's reserve above the allocated peak, and memory outside PyTorch (CUDA
context, libraries, NCCL). Measured on one H200 (references/memory-model.md, issue 25 section);
the device view of an estimate is built from these."""

from __future__ import annotations

from memtune.estimate.result import MemoryEstimate
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec
from memtune.units import MIB

#: GEMM workspaces that live in the PyTorch allocator (so they count as allocated), about 128 MiB
#: on Hopper: PyTorch's cuBLAS + cuBLASLt workspaces (64 MiB, measured without TE below) and
#: Transformer Engine's workspace for ordinary GEMMs (32 MiB + 1 KiB); what the dense goldens keep
#: allocated after a step beyond weights, gradients and optimizer states (100-114 MB) agrees.
WORKSPACE_BYTES = 128 * MIB
#: Transformer Engine's grouped-GEMM workspaces, a set apart from the ones above: one cuBLAS
#: workspace per compute stream (4 streams; 32 MiB + 1 KiB each on Hopper and newer, 4 MiB
#: before), created by the first grouped GEMM and kept for the run (cpp_extensions/gemm.py
#: ``get_cublas_workspace(..., grouped_gemm=True)`` is lru_cached; common/util/multi_stream.cpp).
#: Only MoE experts on the TE path with --moe-grouped-gemm (TEGroupedMLP) call it. Evidence: what
#: stays allocated after a step of the grouped-GEMM MoE goldens exceeds weights, gradients and
#: optimizer states by 117-146 MB more than the dense and non-grouped MoE goldens do.
TE_GROUPED_GEMM_WORKSPACE_BYTES = 4 * (32 * MIB + 1024)
#: cuBLAS + cuBLASLt workspaces PyTorch allocates through its caching allocator on Hopper
#: (2 x 32 MiB), measured as the 64 MiB that stays allocated after the first step of a
#: Megatron-Core run without Transformer Engine (H200 grid: 0.1875 GiB left after g01 =
#: the 0.125 GiB score buffer + 0.0625 GiB).
TORCH_WORKSPACE_BYTES = 64 * MIB
#: GPU memory outside PyTorch's allocator, measured on one H200 (CUDA 13, PyTorch 2.11,
#: environment_and_probes.json and measured.json): the CUDA context after ``torch.cuda.init``
#: (650,969,088 B used), the first NCCL communicator (1,236,074,496 B used after
#: ``init_process_group``), and the libraries' handles and kernel images loaded on first use
#: during the first training step (device used minus PyTorch reserved after every step:
#: 2,595,028,992 B). A further communicator (the distributed optimizer's group, g17 onwards)
#: added 408,944,640 B.
CUDA_CONTEXT_BYTES = 650_969_088
CUDA_LIBRARIES_BYTES = 2_595_028_992 - 1_236_074_496
NCCL_FIRST_GROUP_BYTES = 1_236_074_496 - 650_969_088
NCCL_BYTES_PER_GROUP = 408_944_640
#: Memory PyTorch's caching allocator reserves above its allocated peak (default allocator):
#: the median of max reserved / max allocated - 1 over the 22 dense H200 runs (7.1%, P90 15.9%);
#: MoE runs hold more (H200 MoE 9.4% and 11.7%; Megatron-LM's DeepSeek-V3 proxy report 12.5-17%).
#: With ``expandable_segments:True`` the dense median is 3.1% and MoE 0.3-1.7%.
ALLOCATOR_RESERVE_FRACTION = 0.071
ALLOCATOR_RESERVE_FRACTION_MOE = 0.12
ALLOCATOR_RESERVE_FRACTION_EXPANDABLE = 0.031
ALLOCATOR_RESERVE_FRACTION_EXPANDABLE_MOE = 0.017


def reserve_fraction(model: ModelSpec, expandable: bool = False) -> float:
    """The allocator's reserve as a share of the allocated step peak (see the constants)."""
    if expandable:
        return ALLOCATOR_RESERVE_FRACTION_EXPANDABLE_MOE if model.is_moe else ALLOCATOR_RESERVE_FRACTION_EXPANDABLE
    return ALLOCATOR_RESERVE_FRACTION_MOE if model.is_moe else ALLOCATOR_RESERVE_FRACTION


def device_peak_bytes(model: ModelSpec, est: MemoryEstimate, expandable: bool) -> int:
    """The device view of the most-loaded GPU with (True) or without expandable segments."""
    share = reserve_fraction(model, expandable)
    return max(s.total_bytes - s.reserve + int(share * (s.step_bytes + s.cuda_graphs)) for s in est.stages)


def process_groups(run: RunSpec) -> int:
    groups = 1  # data parallel
    for size in (run.tp, run.pp, run.cp, run.ep):
        if size > 1:
            groups += 1
    return groups


def uses_te_grouped_gemm(model: ModelSpec, run: RunSpec) -> bool | None:
    """Do the experts run TE's grouped GEMM (and so hold its own workspace set)? None when the
    input does not say (a Bridge config, preset or HF config without ``moe_grouped_gemm``):
    Megatron-Core's default is off, while Megatron Bridge's MoE model bridges turn it on
    (qwen3_moe_bridge.py, deepseek_v3_bridge.py, gpt_oss_bridge.py...), so the set is not counted
    and the assumption line says what it would add. A Megatron-LM line without
    ``--moe-grouped-gemm`` is off."""
    if not model.num_moe_experts or run.transformer_impl == "local" or run.moe_grouped_gemm is False:
        return False
    return True if run.moe_grouped_gemm else None
