#!/bin/bash
# Megatron-FSDP run with NCCL user buffers, inheriting the site-wide allocator setting.
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nproc_per_node=8 --nnodes=1 pretrain_gpt.py \
    --use-megatron-fsdp \
    --data-parallel-sharding-strategy optim_grads_params \
    --use-nccl-ub \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --micro-batch-size 1 --global-batch-size 128 --bf16
