#!/bin/bash
# c01_h1024_l4_gpt2: the run gpu/measure.py makes (1 GPU, TP=PP=DP=1)
torchrun --nproc-per-node 1 pretrain_gpt.py \
    --num-layers 4 \
    --hidden-size 1024 \
    --num-attention-heads 16 \
    --ffn-hidden-size 4096 \
    --seq-length 1024 \
    --max-position-embeddings 1024 \
    --micro-batch-size 4 \
    --global-batch-size 4 \
    --vocab-size 50304 \
    --make-vocab-size-divisible-by 128 \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --normalization LayerNorm \
    --position-embedding-type learned_absolute \
    --attention-dropout 0.1 \
    --hidden-dropout 0.1 \
    --bf16 \
    --optimizer adam \
    --transformer-impl local \
    --no-bias-swiglu-fusion \
    --no-bias-gelu-fusion \
    --no-bias-dropout-fusion \
    --no-masked-softmax-fusion \
    --attention-softmax-in-fp32 \
    --no-rope-fusion \
    --no-gradient-accumulation-fusion
