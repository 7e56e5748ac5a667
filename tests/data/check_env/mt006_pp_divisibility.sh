#!/bin/bash
# ESM2-650M shape (33 layers) on 2 pipeline stages (bionemo-recipes issue 784)
python -m torch.distributed.run --nproc-per-node 2 train.py \
    --pipeline-model-parallel-size 2 \
    --num-layers 33 --hidden-size 1280 --num-attention-heads 20 \
    --micro-batch-size 2 --global-batch-size 16
