#!/bin/bash
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
torchrun --nproc-per-node 8 pretrain_gpt.py \
    --tensor-model-parallel-size 2 --expert-model-parallel-size 4 --num-experts 64 \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 32 \
    --recompute-granularity selective --recompute-modules moe_act \
    --micro-batch-size 1 --global-batch-size 64 --bf16
