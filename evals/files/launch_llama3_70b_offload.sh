#!/bin/bash
#SBATCH --job-name=llama3-70b-sft-offload
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
# Llama3-70B SFT with Megatron Bridge on 32x H100 80GB. The previous attempt OOMed, so
# this version turns on activation offloading to the CPU.

export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export NCCL_NVLS_ENABLE=0

srun --container-image=nvcr.io/nvidia/nemo:25.09 \
  python scripts/training/run_recipe.py \
    --recipe llama3_70b_finetune_config \
    model.tensor_model_parallel_size=4 \
    model.pipeline_model_parallel_size=4 \
    model.virtual_pipeline_model_parallel_size=3 \
    model.sequence_parallel=True \
    model.cpu_offloading=True \
    model.cpu_offloading_num_layers=4 \
    model.seq_length=4096 \
    train.micro_batch_size=1 \
    train.global_batch_size=32 \
    optimizer.use_distributed_optimizer=True
