#!/bin/bash
#SBATCH --job-name=llama3-70b-sft
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8

export CUDA_DEVICE_MAX_CONNECTIONS=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

srun python pretrain_gpt.py \
    --tensor-model-parallel-size 4 \
    --pipeline-model-parallel-size 4 \
    --sequence-parallel \
    --num-layers 80 \
    --hidden-size 8192 \
    --num-attention-heads 64 \
    --seq-length 4096 \
    --max-position-embeddings 4096 \
    --micro-batch-size 1 \
    --global-batch-size 32 \
    --use-distributed-optimizer \
    --bf16
