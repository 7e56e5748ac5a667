#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512

srun python pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --bf16
