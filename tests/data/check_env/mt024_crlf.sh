#!/bin/bash
# saved on Windows: every line ends in CR LF
#SBATCH --nodes=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
torchrun --nproc-per-node 8 pretrain_gpt.py \
  --num-layers 32 --tensor-model-parallel-size 2
