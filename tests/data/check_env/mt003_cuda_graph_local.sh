#!/bin/bash
#SBATCH --nodes=4
#SBATCH --gpus-per-node=8
export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"
export CUDA_DEVICE_MAX_CONNECTIONS=1

srun --mpi=pmix python -u pretrain_gpt.py \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
    --cuda-graph-impl local --cuda-graph-scope attn mlp \
    --micro-batch-size 1 --global-batch-size 256 --bf16
