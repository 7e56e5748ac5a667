"""The attention kernel a run uses and what its score tensors cost.

Flash/fused kernels keep only softmax statistics; unfused attention keeps a
batch x heads x sq x sk score tensor per layer, whose bytes depend on where the softmax runs
(the fused scale-mask-softmax kernel, or PyTorch in fp32 / bf16)."""

from __future__ import annotations

from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec

#: Unfused (``local``) attention keeps per score element (b x heads x sq x sk) what autograd
#: saves between forward and backward, and needs more while one layer's softmax runs backward.
#: See :func:`unfused_score_bytes` and references/memory-model.md (H200 grid, g01-g20).
UNFUSED_SOFTMAX_BYTES = 2
UNFUSED_DROPOUT_BYTES = 3


def attention_kernel(run: RunSpec) -> str:
    """'flash' (fused/flash kernels: no score matrix kept) or 'unfused'."""
    backend = (run.attention_backend or "auto").lower()
    if backend in ("unfused", "local") or run.transformer_impl == "local":
        return "unfused"
    return "flash"


def sp_divisor(run: RunSpec) -> int:
    return run.tp if (run.sequence_parallel and run.tp > 1) else 1


def score_elements(model: ModelSpec, run: RunSpec) -> float:
    """Attention-score elements of one layer on one GPU: micro-batch x local heads x sq x sk."""
    return run.mbs * (model.num_attention_heads / max(1, run.tp)) * (run.seq_length / max(1, run.cp)) * run.seq_length


def torch_softmax_attention(run: RunSpec) -> bool:
    """Megatron-Core's local attention with the softmax in PyTorch (``--no-masked-softmax-fusion``):
    the path the H200 grid measured term by term. With the fused scale-mask-softmax kernel the
    constants calibrated on the Megatron-LM goldens (which run it) stay in force."""
    return run.transformer_impl == "local" and attention_kernel(run) == "unfused" and not run.masked_softmax_fusion


def unfused_score_bytes(run: RunSpec) -> tuple[float, float]:
    """(bytes saved per score element until backward, extra bytes per element while one
    layer's attention runs backward) for unfused attention.

    Megatron-Core's ``FusedScaleMaskSoftmax`` without its fused kernel
    (``forward_torch_softmax``) casts the bf16 scores to fp32 when softmax runs in fp32,
    masks, runs ``torch.nn.Softmax`` (which saves its fp32 output) and casts the
    probabilities back to bf16, which the probabilities-times-value ``bmm`` saves: 4 + 2 bytes.
    In backward the softmax holds its saved fp32 output, the fp32 gradient coming in and the
    fp32 gradient it writes, while the bf16 probabilities' gradient is still alive: the
    measured peak is 10 bytes per element above the saved 6 (H200 grid: g06 - g01 and
    g04 - g05 give 9.9 and 10.4). With softmax in bf16 the softmax output is the tensor both
    keep (2 bytes), and backward holds three more bf16 tensors of its size: the gradient the
    ``bmm`` backward writes, the one the softmax backward writes and a third allocated after
    them and freed first - the softmax backward's temporary or the in-place causal mask's
    backward (``masked_fill_``), which the snapshot cannot tell apart; every GPT run builds that
    mask (6; measured on an H100, tests/data/estimator/h100-mcore: the memory snapshot of x11
    shows the three, and 4 left every long-sequence record 5-9% low); the fused
    scale-mask-softmax kernel writes its gradient in place (2).

    Attention dropout (``torch.nn.Dropout`` in training) keeps a 1-byte mask; its output
    replaces the bf16 probabilities as what ``bmm`` saves, so on the fp32 path the probabilities
    are freed and only the mask is new (g08 - g01: +0.21 GiB measured, 4 layers x 1 byte x
    67.1 M elements = 0.25 GiB less the mask of the layer already in backward). On the bf16 paths
    the softmax still keeps its output, so the dropout output (2) is new as well; in backward
    the dropped probabilities are freed first, leaving 3 more (H100: b08, b09, b15, x05 within
    0.6%).
    """
    dropout = run.attention_dropout > 0
    if run.masked_softmax_fusion:
        # The kernel reads bf16 scores, computes in fp32 internally and returns bf16.
        return (2.0 + (3 if dropout else 0), 2.0 - (1 if dropout else 0))
    if run.attention_softmax_in_fp32:
        return (6.0 + (1 if dropout else 0), 10.0 - (1 if dropout else 0))
    return (2.0 + (3 if dropout else 0), 6.0 - (3 if dropout else 0))
