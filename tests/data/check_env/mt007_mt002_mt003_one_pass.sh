#!/bin/bash
# Megatron-FSDP run with NCCL user buffers and CUDA graphs; the allocator line has a
# lower-case boolean (PyTorch rejects it), and NCCL_GRAPH_REGISTER=0 is missing.
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true,max_split_size_mb:512
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nproc_per_node=8 --nnodes=1 pretrain_gpt.py \
    --use-megatron-fsdp \
    --data-parallel-sharding-strategy optim_grads_params \
    --use-nccl-ub \
    --cuda-graph-impl transformer_engine --cuda-graph-scope attn mlp \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --micro-batch-size 1 --global-batch-size 128 --bf16
