#!/bin/bash
#SBATCH --job-name=llama3-70b-pretrain
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
# Llama3-70B pretraining on 32x H100 80GB (Megatron-LM, TP4/PP4/VPP5).

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export NCCL_IB_SL=1

srun --container-image=nvcr.io/nvidia/nemo:25.09 \
  python pretrain_gpt.py \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
    --group-query-attention --num-query-groups 8 --ffn-hidden-size 28672 \
    --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights \
    --seq-length 8192 --max-position-embeddings 8192 \
    --tensor-model-parallel-size 4 --sequence-parallel \
    --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 \
    --micro-batch-size 1 --global-batch-size 128 \
    --bf16 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --use-nccl-ub \
    --cuda-graph-impl transformer_engine --cuda-graph-scope attn \
    --recompute-granularity selective --recompute-modules core_attn \
    --train-iters 5000 --lr 1.5e-4 --min-lr 1.5e-5 --lr-decay-style cosine \
    --data-path /lustre/data/pile_text_document --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model meta-llama/Meta-Llama-3-70B \
    --save /lustre/ckpt/llama3-70b --save-interval 500 --log-interval 1
