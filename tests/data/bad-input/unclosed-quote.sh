#!/bin/bash
export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True
torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 --num-layers 32
