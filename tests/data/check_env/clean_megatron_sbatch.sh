#!/bin/bash
#SBATCH --job-name=gpt3-7b
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00

set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

TP=4
PP=2
CHECKPOINT_DIR=/lustre/ckpt/gpt3-7b
DATA_PATH=/lustre/data/my-gpt3_00_text_document

GPT_ARGS=(
    --num-layers 32
    --hidden-size 4096
)

cat > /tmp/notes.txt <<'NOTES'
export PYTORCH_CUDA_ALLOC_CONF=garbage
python not_a_command.py --use-nccl-ub
NOTES

srun --container-image=nvcr.io/nvidia/nemo:25.04 \
     --container-mounts=/lustre:/lustre \
     python pretrain_gpt.py \
        --tensor-model-parallel-size ${TP} \
        --pipeline-model-parallel-size $PP \
        --sequence-parallel \
        --num-layers 32 \
        --hidden-size 4096 \
        --num-attention-heads 32 \
        --seq-length 4096 \
        --max-position-embeddings 4096 \
        --micro-batch-size 1 \
        --global-batch-size 256 \
        --use-distributed-optimizer \
        --recompute-granularity selective \
        --bf16 \
        --save "$CHECKPOINT_DIR" \
        --data-path "${DATA_PATH}" 2>&1 | tee train.log
