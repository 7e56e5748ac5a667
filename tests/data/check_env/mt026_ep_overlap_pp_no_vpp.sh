#!/bin/bash
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
    --expert-model-parallel-size 8 --num-experts 64 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \
    --overlap-moe-expert-parallel-comm \
    --num-layers 48 --hidden-size 2048 --num-attention-heads 32 \
    --micro-batch-size 1 --global-batch-size 256 --bf16
