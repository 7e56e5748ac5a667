#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --use-distributed-optimizer --use-megatron-fsdp --micro-batch-size 1 --global-batch-size 64 --bf16
