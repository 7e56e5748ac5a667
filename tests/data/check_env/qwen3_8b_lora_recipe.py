# Megatron Bridge recipe shape (seed: cfg.peft = LoRA(...) with the recipe's LoRA settings kept); never executed by the tests.
from megatron.bridge.peft.lora import LoRA
from megatron.bridge.recipes.qwen.qwen3 import qwen3_8b_finetune_config

def build():
    cfg = qwen3_8b_finetune_config()
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.sequence_parallel = True
    cfg.peft = LoRA(
        target_modules=["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
        dim=RANK,
        alpha=32,
        dropout=0.05,
    )
    return cfg
