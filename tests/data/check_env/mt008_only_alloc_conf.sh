#!/bin/bash
export PYTORCH_ALLOC_CONF=expandable_segments:True
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --bf16
