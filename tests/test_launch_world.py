"""World size from the scheduler and the launchers (memtune.readers.launch.world).

Each case is a launch pattern people use; the reading must give the GPU count the job gets
and name the option that decided it, or say plainly that it cannot be read.
"""

from __future__ import annotations

import pytest

from memtune.readers.launch.commands import parse_text
from memtune.readers.launch.world import read_world, sbatch_directives, slurm_variables

PROGRAM = "pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 8"


def _world(text: str) -> tuple[int | None, str]:
    script = parse_text(text, "job.sh")
    reading = read_world(script, script.training_command())
    assert reading is not None
    return reading.gpus, reading.note


@pytest.mark.parametrize(
    "text,gpus,decided",
    [
        # #SBATCH --nodes defines SLURM_NNODES for the launcher (issue 26: was "unresolved")
        (
            f"#!/bin/bash\n#SBATCH --nodes=24\nNNODES=$SLURM_NNODES\ntorchrun --nproc_per_node 8 --nnodes $NNODES {PROGRAM}\n",
            192,
            "#SBATCH --nodes=24 (line 2)",
        ),
        # srun's options survive `bash -c` (issue 26: was silently 1 GPU)
        (f'srun --nodes=4 --ntasks-per-node=4 bash -c "python {PROGRAM}"\n', 16, "srun --ntasks-per-node"),
        (
            f"#SBATCH -N 2\n#SBATCH --gres=gpu:8\nsrun torchrun --nnodes $SLURM_JOB_NUM_NODES "
            f"--nproc-per-node $SLURM_GPUS_ON_NODE {PROGRAM}\n",
            16,
            "#SBATCH --gres=gpu:8",
        ),
        (f"#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\nsrun python {PROGRAM}\n", 16, "#SBATCH --ntasks-per-node"),
        (f"mpirun -np 16 --allow-run-as-root python {PROGRAM}\n", 16, "mpirun -np"),
        (f"deepspeed --num_gpus 8 --num_nodes 2 {PROGRAM}\n", 16, "deepspeed --num_gpus"),
        (
            f"#SBATCH --gpus-per-node=h100:4\n#SBATCH --nodes=3\nsrun torchrun --nproc_per_node=$SLURM_GPUS_PER_NODE "
            f"--nnodes=$SLURM_NNODES {PROGRAM}\n",
            12,
            "#SBATCH --gpus-per-node=h100:4",
        ),
    ],
)
def test_world_size_names_what_decided_it(text: str, gpus: int, decided: str) -> None:
    got, note = _world(text)
    assert got == gpus, note
    assert decided in note and not note.startswith("WARNING")


def test_the_launcher_wins_over_the_directive() -> None:
    # torchrun's own count is what runs, whatever #SBATCH asked for per node
    got, note = _world(
        f"#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\nsrun torchrun --nproc_per_node 4 --nnodes 2 {PROGRAM}\n"
    )
    assert got == 8 and "torchrun --nproc_per_node" in note


def test_a_script_variable_is_not_replaced_by_the_scheduler() -> None:
    got, _ = _world(
        f"#SBATCH --nodes=4\nSLURM_NNODES=1\ntorchrun --nproc_per_node 8 --nnodes $SLURM_NNODES {PROGRAM}\n"
    )
    assert got == 8


def test_a_placeholder_directive_is_unreadable_not_guessed() -> None:
    got, note = _world(f"#SBATCH --nodes=your_nodes\n#SBATCH --ntasks-per-node=8\nsrun python {PROGRAM}\n")
    assert got is None and note.startswith("WARNING: world size unreadable")


def test_an_unset_scheduler_variable_stays_unresolved() -> None:
    got, note = _world(f"torchrun --nproc_per_node 8 --nnodes $SLURM_NNODES {PROGRAM}\n")
    assert got is None and note.startswith("WARNING: world size unresolved") and "$SLURM_NNODES" in note


def test_sbatch_directives_and_the_variables_they_define() -> None:
    directives = sbatch_directives("#SBATCH -N 3 --gres=gpu:a100:8\n#SBATCH --ntasks=24 # tasks\necho\n")
    assert directives == {"N": ("3", 1), "gres": ("gpu:a100:8", 1), "ntasks": ("24", 2)}
    variables = slurm_variables(directives)
    assert variables["SLURM_NNODES"][0] == "3" and variables["SLURM_GPUS_ON_NODE"][0] == "8"
    assert variables["SLURM_NTASKS"][:2] == ("24", 2)
    assert "SLURM_GPUS_PER_NODE" not in variables  # --gres does not set it


def test_a_loop_value_every_pass_agrees_on_is_known() -> None:
    text = (
        'CONFIGS=("2,1,8" "4,1,8")\n'
        'for C in "${CONFIGS[@]}"; do\n'
        "  IFS=',' read -r TP PP EP <<< \"$C\"\n"
        f"  torchrun --nproc_per_node 8 {PROGRAM} --tensor-model-parallel-size $TP "
        "--pipeline-model-parallel-size $PP --expert-model-parallel-size $EP\n"
        "done\n"
    )
    script = parse_text(text, "loop.sh")
    command = script.training_command()
    assert command is not None
    words = [w.text for w in command.program_args]
    assert words[words.index("--pipeline-model-parallel-size") + 1] == "1"
    assert words[words.index("--expert-model-parallel-size") + 1] == "8"
    assert words[words.index("--tensor-model-parallel-size") + 1] == "$TP"  # 2 in one pass, 4 in the other
    assert any("the loop runs 2 passes" in note for note in script.notes)
