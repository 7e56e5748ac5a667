"""How many GPUs a launch script asks for, and which line decided it.

A job's GPU count lives in up to four places, and the one that wins depends on who starts
the processes: the ``#SBATCH`` directives (which also define the ``SLURM_*`` variables the
job sees), ``srun``'s own options, ``mpirun``'s, and the per-node launcher (``torchrun``,
``python -m torch.distributed.run``, ``deepspeed``). The launcher nearest the training
program decides the processes per node; the scheduler decides the node count unless the
launcher names one. Both readers (check_env's run view and the estimator) ask
:func:`read_world`, so the two helpers never disagree on a script's world size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from memtune.readers.launch.script import Command, LaunchScript, world_size_assumptions

#: Marks a Word note that says a ``SLURM_*`` value came from an ``#SBATCH`` directive: a
#: source to name, not a guess to warn about.
SLURM_SOURCE = "which Slurm sets from #SBATCH"

_SBATCH_LINE = re.compile(r"^#SBATCH[ \t]+(.*)$", re.MULTILINE)


def sbatch_directives(text: str) -> dict[str, tuple[str, int]]:
    """``{option: (value, line)}`` of the ``#SBATCH`` lines in ``text`` (short options as
    written: ``N``, ``n``, ``G``), read before the shell so the ``SLURM_*`` variables they
    define are known from the first command on."""
    out: dict[str, tuple[str, int]] = {}
    for match in _SBATCH_LINE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        words = match.group(1).split("#", 1)[0].split()
        i = 0
        while i < len(words):
            word = words[i]
            if word.startswith("--"):
                key, eq, value = word[2:].partition("=")
                out[key] = (value, line)
            elif word.startswith("-") and len(word) >= 2:
                key, value = word[1], word[2:]
                if not value and i + 1 < len(words) and not words[i + 1].startswith("-"):
                    value = words[i + 1]
                    i += 1
                out[key] = (value, line)
            i += 1
    return out


def _gpu_count(text: str) -> str:
    """'8' / 'h100:8' / 'gpu:8' / 'gpu:a100:8' -> '8' (the count is the last field)."""
    return text.split(":")[-1].split("(")[0].strip()


def slurm_variables(sbatch: Mapping[str, tuple[str, int]]) -> dict[str, tuple[str, int, str]]:
    """``{SLURM_NAME: (value, line, directive)}`` that Slurm defines in the job from its
    ``#SBATCH`` directives (only plain numbers: a placeholder defines nothing)."""
    out: dict[str, tuple[str, int, str]] = {}

    def define(names: tuple[str, ...], key: str, value: str | None = None) -> None:
        if key not in sbatch:
            return
        given, line = sbatch[key]
        value = given if value is None else value
        if not value.isdigit():
            return
        written = f"--{key}={given}" if len(key) > 1 else f"-{key} {given}"
        for name in names:
            out[name] = (value, line, written)

    for key in ("nodes", "N"):
        if key in sbatch:
            define(("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), key, sbatch[key][0].split("-")[0])
    define(("SLURM_NTASKS_PER_NODE",), "ntasks-per-node")
    if "gpus-per-node" in sbatch:
        count = _gpu_count(sbatch["gpus-per-node"][0])
        define(("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"), "gpus-per-node", count)
    elif "gres" in sbatch and sbatch["gres"][0].startswith("gpu"):
        define(("SLURM_GPUS_ON_NODE",), "gres", _gpu_count(sbatch["gres"][0]))
    for key in ("ntasks", "n"):
        define(("SLURM_NTASKS", "SLURM_NPROCS"), key)
    return out


@dataclass(frozen=True)
class WorldReading:
    """The launcher's GPU count (None when it cannot be read), how it was decided, and
    the one line the helpers print about it."""

    gpus: int | None
    decided_by: str  # e.g. "torchrun --nproc_per_node (line 40) x #SBATCH --nodes (line 3)"
    note: str  # starts with "WARNING" when the count is unknown or rests on a guess
    line: int

    @property
    def warns(self) -> bool:
        return self.note.startswith("WARNING")


# (option key in Command.launcher_options or "sbatch.<key>", how a person writes it)
_PER_NODE = (
    ("torchrun.nproc_per_node", "torchrun --nproc_per_node"),
    ("torchrun.nproc-per-node", "torchrun --nproc-per-node"),
    ("deepspeed.num_gpus", "deepspeed --num_gpus"),
    ("deepspeed.num-gpus", "deepspeed --num-gpus"),
    ("srun.ntasks-per-node", "srun --ntasks-per-node"),
    ("mpirun.npernode", "mpirun -npernode"),
    ("mpirun.N", "mpirun -N"),
    ("mpiexec.npernode", "mpiexec -npernode"),
    ("sbatch.ntasks-per-node", "#SBATCH --ntasks-per-node"),
    ("sbatch.gpus-per-node", "#SBATCH --gpus-per-node"),
    ("sbatch.gres", "#SBATCH --gres"),
)
_NODES = (
    ("torchrun.nnodes", "torchrun --nnodes"),
    ("deepspeed.num_nodes", "deepspeed --num_nodes"),
    ("deepspeed.num-nodes", "deepspeed --num-nodes"),
    ("srun.nodes", "srun --nodes"),
    ("srun.N", "srun -N"),
    ("sbatch.nodes", "#SBATCH --nodes"),
    ("sbatch.N", "#SBATCH -N"),
)
_TOTAL = (
    ("mpirun.np", "mpirun -np"),
    ("mpirun.n", "mpirun -n"),
    ("mpiexec.np", "mpiexec -np"),
    ("mpiexec.n", "mpiexec -n"),
    ("srun.ntasks", "srun --ntasks"),
    ("srun.n", "srun -n"),
    ("sbatch.ntasks", "#SBATCH --ntasks"),
    ("sbatch.n", "#SBATCH -n"),
    ("sbatch.gpus", "#SBATCH --gpus"),
    ("sbatch.G", "#SBATCH -G"),
)


def _pick(
    table: tuple[tuple[str, str], ...], options: Mapping[str, str], sbatch: Mapping[str, tuple[str, int]], line: int
) -> tuple[str, str] | None:
    """(value, 'who (line N)') of the first option in ``table`` the script gives."""
    for key, spoken in table:
        if key.startswith("sbatch."):
            got = sbatch.get(key[len("sbatch.") :])
            if got is not None and (key != "sbatch.gres" or got[0].startswith("gpu")):
                value = _gpu_count(got[0]) if key in ("sbatch.gres", "sbatch.gpus-per-node") else got[0]
                return value, f"{spoken} (line {got[1]})"
        elif key in options:
            return options[key], f"{spoken} (line {line})"
    return None


def _number(text: str, range_sep: str) -> int:
    """An option's count: a torchrun range '1:4' takes its upper end, a Slurm range '2-4' its
    lower end (what the job can count on); raises ValueError for anything else."""
    if range_sep == ":" and ":" in text:
        text = text.split(":")[-1]
    elif range_sep == "-" and "-" in text.strip("-"):
        text = text.split("-")[0]
    return int(text)


def read_world(script: LaunchScript, command: Command | None) -> WorldReading | None:
    """The GPU count the job asks for, or None when neither launcher nor scheduler says."""
    options = dict(command.launcher_options) if command is not None else {}
    line = command.line if command is not None else 0
    sbatch = script.sbatch
    per_node = _pick(_PER_NODE, options, sbatch, line)
    nodes = _pick(_NODES, options, sbatch, line)
    total = None if per_node is not None else _pick(_TOTAL, options, sbatch, line)
    if per_node is None and total is None:
        if nodes is None or command is None or not command.launcher:
            return None
        launcher = command.launcher[-1]
        return WorldReading(
            None,
            nodes[1],
            f"WARNING: world size unresolved: {nodes[1]} gives {nodes[0]} node(s) but {launcher} names no "
            "processes per node; pass --gpus N",
            line,
        )
    picked = [p for p in (per_node, nodes, total) if p is not None]
    unresolved = [f"{who.split(' (')[0]} {value}" for value, who in picked if "$" in value or "`" in value]
    if unresolved:
        return WorldReading(
            None,
            " x ".join(who for _, who in picked),
            f"WARNING: world size unresolved: the launcher takes {' and '.join(unresolved)} from the "
            f"environment at run time (line {line}); pass --gpus N - without it the estimate assumes the "
            "smallest world the parallel sizes allow, which overstates sharded optimizer memory",
            line,
        )
    try:
        if total is not None:
            gpus = _number(total[0], "")
            decided = f"{gpus} process(es) in all ({total[1]})"
        else:
            assert per_node is not None
            gpn = _number(per_node[0], ":")
            count = _number(nodes[0], ":" if nodes[1].startswith("torchrun") else "-") if nodes else 1
            gpus = gpn * count
            where = f"{nodes[1]}" if nodes else "one node: no node count given"
            decided = f"{gpn} per node ({per_node[1]}) x {count} node(s) ({where})"
    except ValueError:
        values = " x ".join(repr(value) for value, _ in picked)
        return WorldReading(
            None,
            " x ".join(who for _, who in picked),
            f"WARNING: world size unreadable from the launcher ({values}); pass --gpus N",
            line,
        )
    notes = world_size_assumptions(command) if command is not None else []
    sources = [n for n in notes if SLURM_SOURCE in n]
    guesses = [n for n in notes if SLURM_SOURCE not in n]
    via = f"; {'; '.join(sources)}" if sources else ""
    if guesses:
        note = f"WARNING: world size {gpus} = {decided}{via} assumes: {'; '.join(guesses)}; pass --gpus N for the real count"
    else:
        note = f"world size {gpus} = {decided}{via}"
    return WorldReading(gpus, decided + via, note, line)
