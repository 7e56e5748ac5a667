"""The softmax dtype of unfused attention, when the input leaves it unsaid.

With attention unfused and the softmax run by PyTorch, the score tensors are the largest
activations, and their size depends on the softmax dtype: fp32 keeps 6 bytes per score element
and needs 10 more in backward, bf16 keeps 2 and needs 4 (estimate/attention.py). The two
defaults disagree: Megatron-LM's CLI runs it in bf16 unless ``--attention-softmax-in-fp32`` (or
``--apply-query-key-layer-scaling``) is given, while Megatron-Core's ``TransformerConfig``
defaults to fp32. A script that builds the config directly and a launch line written for it
therefore describe different runs; on the H200 grid the choice moves the peak by a third.

An agent quotes the estimate as a fact, so when the input did not say and the choice moves the
peak by more than :data:`MATERIAL_SHARE`, the estimate keeps the CLI's reading and carries the
other one next to it (a leading WARNING and the ``softmax_dtype`` JSON object)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memtune.estimate.attention import attention_kernel
from memtune.estimate.estimator import estimate
from memtune.estimate.result import MemoryEstimate
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec
from memtune.units import GIB

#: Below this share of the peak the two readings are within the model's own spread: no note.
MATERIAL_SHARE = 0.03


@dataclass(frozen=True)
class SoftmaxDtypeNote:
    """The estimate under the dtype assumed (bf16, Megatron-LM's CLI) and under fp32."""

    peak_bytes: int
    peak_allocated_bytes: int
    alternate_peak_bytes: int
    alternate_peak_allocated_bytes: int
    estimated_with: str = "bf16"
    alternate: str = "fp32"

    @property
    def difference_share(self) -> float:
        """(alternate - estimate) / estimate of the device-view peak."""
        return self.alternate_peak_bytes / self.peak_bytes - 1 if self.peak_bytes else 0.0

    def warning(self) -> str:
        return (
            "WARNING: softmax dtype not stated (unfused attention, softmax in PyTorch): estimated with "
            f"Megatron-LM's default (bf16 softmax) = {self.peak_bytes / GIB:.2f} GiB device view "
            f"({self.peak_allocated_bytes / GIB:.2f} GiB allocated); with fp32 softmax (Megatron-Core "
            f"TransformerConfig's default, --attention-softmax-in-fp32) = {self.alternate_peak_bytes / GIB:.2f} GiB "
            f"({self.alternate_peak_allocated_bytes / GIB:.2f} GiB allocated), {self.difference_share:+.0%}; "
            "a script that builds TransformerConfig itself runs fp32: pass --attention-softmax-in-fp32 to say so"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "stated": False,
            "estimated_with": self.estimated_with,
            "alternate": self.alternate,
            "alternate_peak_bytes": self.alternate_peak_bytes,
            "alternate_peak_allocated_bytes": self.alternate_peak_allocated_bytes,
            "difference_share": round(self.difference_share, 4),
        }


def softmax_dtype_matters(run: RunSpec) -> bool:
    """The softmax dtype enters the estimate: unfused attention with the softmax in PyTorch
    (the fused scale-mask-softmax kernel and flash/fused attention keep bf16 whatever it says)."""
    return attention_kernel(run) == "unfused" and not run.masked_softmax_fusion


def softmax_dtype_note(model: ModelSpec, run: RunSpec, est: MemoryEstimate | None = None) -> SoftmaxDtypeNote | None:
    """The other reading of an unstated softmax dtype, or None when the input stated it, the
    dtype does not enter the estimate, or the two peaks differ by no more than MATERIAL_SHARE.
    ``est`` is the estimate of ``run`` when the caller already has it."""
    if run.attention_softmax_in_fp32 is not None or not softmax_dtype_matters(run):
        return None
    est = est if est is not None else estimate(model, run)
    alt = estimate(model, run.with_(attention_softmax_in_fp32=True))
    if abs(alt.peak_bytes - est.peak_bytes) <= MATERIAL_SHARE * est.peak_bytes:
        return None
    return SoftmaxDtypeNote(
        peak_bytes=est.peak_bytes,
        peak_allocated_bytes=est.peak_allocated_bytes,
        alternate_peak_bytes=alt.peak_bytes,
        alternate_peak_allocated_bytes=alt.peak_allocated_bytes,
    )


__all__ = ["MATERIAL_SHARE", "SoftmaxDtypeNote", "softmax_dtype_matters", "softmax_dtype_note"]
