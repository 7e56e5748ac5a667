"""Multi-token prediction: the MTP stage's extra embedding and each MTP depth's activations."""

from __future__ import annotations

from memtune.spec.model_spec import ModelSpec, embedding_params
from memtune.spec.run_spec import RunSpec


def mtp_layer_activations(run: RunSpec, layer_stored: float, hidden_elems: float) -> float:
    """What one MTP depth keeps for backward (bytes), its logits and loss aside.

    Without recompute: its transformer layer plus the two bf16 inputs of ``eh_proj``'s concat
    (``hidden_elems`` = tokens x hidden on this GPU). Under full recompute Megatron-Core
    checkpoints the depth (multi_token_prediction.py, MultiTokenPredictionLayer.forward:
    ``if self.config.recompute_granularity == 'full' and self.training:
    self._checkpointed_forward(...)``), which with ``recompute_method == 'uniform'`` keeps only
    the checkpoint's inputs ``hidden_states`` and ``decoder_input``; with ``'block'`` it warns
    "not supported for MTP yet. Skipping recompute." and keeps everything.
    """
    inputs = 2 * hidden_elems * 2
    if run.recompute_granularity == "full" and (run.recompute_method or "uniform") == "uniform":
        return inputs
    return layer_stored + inputs


def mtp_stage_embedding(model: ModelSpec, run: RunSpec, stage: int) -> float:
    """Embedding parameters (per GPU) that the multi-token-prediction stage builds for itself.

    The MTP modules embed the shifted input tokens again, so the stage that holds them (the
    last one) builds its own ``LanguageModelEmbedding`` (gpt_model.py: ``if self.pre_process or
    self.mtp_process: self.embedding = ...``) next to its output layer - "both embedding
    layer and output layer in the mtp process stage" (language_module.py,
    ``shared_embedding_or_output_weight``), tied or not. On the first stage (PP 1) it is the
    decoder's own embedding: nothing extra.
    """
    if not model.mtp_num_layers or run.pp == 1 or stage != run.pp - 1:
        return 0.0
    return embedding_params(model, max(1, run.tp)) / max(1, run.tp)
