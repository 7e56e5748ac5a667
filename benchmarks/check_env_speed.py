#!/usr/bin/env python3
"""How long check_env takes on a 5,000-line launch script (target: under one second).

Builds a realistic sbatch script (SBATCH header, exports, arrays, heredoc, loops, comments,
many srun/torchrun commands with line continuations and Megatron flags / Hydra overrides),
then times the whole check (parse + all rules) in-process and as a fresh subprocess
(interpreter start-up and imports included). Prints the figures; asserts nothing.

usage: python3 benchmarks/check_env_speed.py [--lines 5000] [--repeat 5]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

BLOCK = """\
# ---- stage {i} ------------------------------------------------------------
export RUN_{i}=stage{i}
TP_{i}=4
GPT_ARGS_{i}=(
    --num-layers 80
    --hidden-size 8192
    --num-attention-heads 64
)
cat > /tmp/notes_{i}.txt <<'EOF'
export PYTORCH_CUDA_ALLOC_CONF=not-parsed
EOF
for x in 1 2 3; do echo "warmup $x"; done
srun --container-image=nvcr.io/nvidia/nemo:25.04 --container-mounts=/lustre:/lustre \\
    python pretrain_gpt.py ${{GPT_ARGS_{i}[@]}} \\
        --tensor-model-parallel-size ${{TP_{i}}} \\
        --pipeline-model-parallel-size 4 \\
        --num-virtual-stages-per-pipeline-rank 5 \\
        --micro-batch-size 1 --global-batch-size 32 \\
        --recompute-granularity selective --recompute-modules core_attn \\
        --use-distributed-optimizer --bf16 \\
        --save "/lustre/ckpt/$RUN_{i}" 2>&1 | tee "log_{i}.txt"
torchrun --nproc_per_node 8 run_recipe.py model.tensor_model_parallel_size=4 +peft=lora -pp 2 -vp 5
"""


def build_script(lines: int) -> str:
    head = [
        "#!/bin/bash",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=8",
        "set -euo pipefail",
        "export CUDA_DEVICE_MAX_CONNECTIONS=1",
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "export NCCL_GRAPH_REGISTER=0",
    ]
    out = list(head)
    i = 0
    while len(out) < lines:
        out.extend(BLOCK.format(i=i).splitlines())
        i += 1
    return "\n".join(out[:lines]) + "\n"


@click.command(help=(__doc__ or "").splitlines()[0])
@click.option("--lines", type=click.IntRange(min=1), default=5000, help="launch-script lines (default 5000)")
@click.option("--repeat", type=click.IntRange(min=1), default=5, help="in-process runs (default 5)")
def command(**params: Any) -> int:
    args = SimpleNamespace(**params)
    from memtune.check import check_rules
    from memtune.readers import run_view

    text = build_script(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "big_launch.sh")
        Path(path).write_text(text)
        times = []
        findings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            view = run_view.build(run_view.Inputs(scripts=[path], torch_version="2.8"))
            findings = check_rules.run_all(view)
            times.append(time.perf_counter() - start)
        cmd = [
            sys.executable,
            str(REPO / "scripts" / "check_env.py"),
            "--script",
            path,
            "--torch-version",
            "2.8",
            "--json",
        ]
        start = time.perf_counter()
        result = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
    commands = len(view.script.commands) if view.script else 0
    print(f"script: {args.lines} lines, {commands} commands, {len(view.script.env) if view.script else 0} env settings")
    print(
        f"in-process check (parse + all rules): best {min(times):.3f} s, median {sorted(times)[len(times) // 2]:.3f} s over {args.repeat} runs"
    )
    print(f"check_env.py subprocess (start-up + imports + check): {wall:.3f} s, exit {result.returncode}")
    print(f"findings: {len(findings)} ({', '.join(sorted({f.rule for f in findings})) or 'none'})")
    print(f"target < 1.000 s: {'met' if max(min(times), wall) < 1.0 else 'NOT met'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run :data:`command` under the helpers' runner: one-line usage errors, exit 2."""
    from memtune.cli import invoke

    return invoke(command, "check_env_speed.py", argv)


if __name__ == "__main__":
    from memtune.cli import run

    run(main, "check_env_speed.py")
