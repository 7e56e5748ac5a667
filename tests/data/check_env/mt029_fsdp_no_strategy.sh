#!/bin/bash
# Megatron-FSDP turned on with the other switches Megatron-LM's Megatron-FSDP guide asks for
# (docs/discussions/megatron-fsdp-user-guide), but without --data-parallel-sharding-strategy.
unset CUDA_DEVICE_MAX_CONNECTIONS
torchrun --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 \
    --use-megatron-fsdp \
    --no-gradient-accumulation-fusion \
    --use-distributed-optimizer \
    --ckpt-format fsdp_dtensor
