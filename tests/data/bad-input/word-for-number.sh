#!/bin/bash
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers thirty-two --hidden-size 4096
