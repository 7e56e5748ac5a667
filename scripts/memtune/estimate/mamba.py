"""Mamba layers of a hybrid pattern: what mamba_ssm's fused scan saves for backward."""

from __future__ import annotations

from memtune.estimate.attention import sp_divisor
from memtune.spec.model_spec import ModelSpec
from memtune.spec.run_spec import RunSpec


def mamba_activation_terms(model: ModelSpec, run: RunSpec) -> dict[str, float]:
    """Tensors one Mamba layer saves for backward (one micro-batch, one GPU), no recompute.

    Megatron-Core trains Mamba through mamba_ssm's ``mamba_split_conv1d_scan_combined``
    (MambaMixer with the memory-efficient path), whose autograd function keeps
    ``ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias,
    initial_states, seq_idx, rmsnorm_weight, rstd, ...)``: the in_proj output z|x|B|C|dt and
    the scan output before the gated norm (``out_x``, d_inner), with per-group fp32 ``rstd``;
    conv and scan states are recomputed in backward. Around it, the fused-norm in_proj keeps
    its input and normalised input (as an attention block's QKV does) and out_proj keeps its
    d_inner input; the residual dropout keeps its mask.
    """
    t = max(1, run.tp)
    spt = sp_divisor(run)
    tokens = run.seq_length / max(1, run.cp) * run.mbs
    h, d_inner = model.hidden_size, model.mamba_d_inner
    act = 2 if run.params_dtype != "fp32" else 4
    gemm_in = 1 if run.fp8 else act
    zxbcdt = 2 * d_inner + 2 * model.mamba_num_groups * model.mamba_state_dim + model.mamba_heads
    return {
        "mamba_norm_in": act * tokens * h / spt,
        "mamba_norm_out": gemm_in * tokens * h / spt,
        "mamba_zxbcdt": act * tokens * zxbcdt / t,
        "mamba_out_x": act * tokens * d_inner / t,
        "mamba_rstd": 4 * tokens * model.mamba_num_groups / t,
        "mamba_out_proj_in": gemm_in * tokens * d_inner / t,
        "mamba_dropout": (1 if run.hidden_dropout > 0 else 0) * tokens * h / spt,
    }
