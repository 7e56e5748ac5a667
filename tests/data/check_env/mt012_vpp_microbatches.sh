#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# Llama3-70B, TP4 PP4 VPP5 on 32 GPUs -> DP 2; GBS 4 gives only 2 micro-batches
srun python pretrain_gpt.py \
    --tensor-model-parallel-size 4 \
    --pipeline-model-parallel-size 4 \
    --num-virtual-stages-per-pipeline-rank 5 \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
    --micro-batch-size 1 --global-batch-size 4 --bf16
