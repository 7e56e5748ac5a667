#!/bin/bash
# r02_layernorm (tests/data/estimator/h100-mcore/layernorm_recompute_errors.json): the launch line of
# a run that stopped at its first step with NameError: name 'FP8GlobalStateManager' is not defined
torchrun --nproc-per-node 1 pretrain_gpt.py \
    --num-layers 4 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --ffn-hidden-size 5632 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size 1 \
    --global-batch-size 1 \
    --vocab-size 32000 \
    --make-vocab-size-divisible-by 128 \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --normalization RMSNorm \
    --position-embedding-type rope \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --bf16 \
    --optimizer adam \
    --transformer-impl local \
    --no-bias-swiglu-fusion \
    --no-bias-gelu-fusion \
    --no-bias-dropout-fusion \
    --no-masked-softmax-fusion \
    --no-rope-fusion \
    --no-gradient-accumulation-fusion \
    --group-query-attention \
    --num-query-groups 4 \
    --swiglu \
    --untie-embeddings-and-output-weights \
    --disable-bias-linear \
    --attention-softmax-in-fp32 \
    --recompute-granularity selective \
    --recompute-modules layernorm
