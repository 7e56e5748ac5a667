#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node=8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --bf16
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
