"""Hostile inputs for the denial-of-service tests and benchmarks/input_bounds.py, built on the fly.

Each builder writes one file and returns its path, so nothing large is committed. The
shapes follow the security probe of issue 16: YAML "billion laughs" (nine levels of nine
aliases), 100k levels of nesting, self-doubling shell variables, an array appended to
itself, and a recipe with thousands of assignments.
"""

from __future__ import annotations

from pathlib import Path

NESTING = 100_000


def _laughs(indent: str = "") -> list[str]:
    lines = [f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        lines.append(f"{indent}a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    return lines


def yaml_bomb_in_peft(dest: Path) -> Path:
    """The bomb used as a value the helpers read: ``peft.target_modules: *a9``."""
    text = [
        "laughs:",
        *_laughs("  "),
        "model:",
        "  tensor_model_parallel_size: 2",
        "peft:",
        "  _target_: megatron.bridge.peft.lora.LoRA",
        "  target_modules: *a9",
    ]
    dest.write_text("\n".join(text) + "\n")
    return dest


def yaml_bomb_unused(dest: Path) -> Path:
    """The bomb under a top-level key no helper uses (still walked when flattening)."""
    dest.write_text("\n".join(["unused:", *_laughs("  "), "model:", "  tensor_model_parallel_size: 2"]) + "\n")
    return dest


def yaml_deep(dest: Path, key: str = "model") -> Path:
    dest.write_text(f"{key}: " + "[" * NESTING + "]" * NESTING + "\n")
    return dest


def json_deep(dest: Path) -> Path:
    dest.write_text("[" * NESTING + "]" * NESTING)
    return dest


def oversized(dest: Path, size: int = 3 << 20, line: str = "# padding\n") -> Path:
    """A text file past the input size limit (valid text, so only the size is wrong)."""
    dest.write_text(line * (size // len(line) + 1))
    return dest


def doubling_script(dest: Path) -> Path:
    """12 lines of A=$A$A$A$A: 4^12 times the first value (gigabytes in bash too)."""
    lines = ["#!/bin/bash", "A=" + "x" * 1000, *["A=$A$A$A$A"] * 12, "torchrun train.py --lr $A"]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def self_appending_array(dest: Path) -> Path:
    """An array appended to itself ten times, then used."""
    lines = ["#!/bin/bash", "A=(--num-layers 32)", *['A+=("${A[@]}")'] * 10, 'torchrun pretrain_gpt.py "${A[@]}"']
    dest.write_text("\n".join(lines) + "\n")
    return dest


def long_recipe(dest: Path, assignments: int = 5000) -> Path:
    """A Bridge recipe with thousands of ``cfg.model.x = n`` lines and one LoRA call."""
    lines = ["from megatron.bridge.peft.lora import LoRA", "", "def build(cfg):"]
    lines += [f"    cfg.model.setting_{i} = {i}" for i in range(assignments)]
    lines += ["    cfg.peft = LoRA(target_modules=['linear_qkv', 'linear_fc1'], dim=16)", "    return cfg"]
    dest.write_text("\n".join(lines) + "\n")
    return dest
