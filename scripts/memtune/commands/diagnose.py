"""diagnose.py: read an OOM error or a training log; fragmentation or real capacity, and what to do.

Imports only the stdlib and stdlib-only memtune modules at the top, so --help works in a
bare interpreter; the scanner (pyyaml) and the table reader (markdown-it-py) are
imported after the arguments are parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import click

from memtune.cli import Command, argument, invoke, option, print_json
from memtune.commands.options import POSITIVE, json_option
from memtune.errors import InputError

DESCRIPTION = """\
Find every memory-related failure in an error message or a (multi-GB, multi-rank, .gz)
training log and answer with the matching row of SKILL.md's Failure Diagnosis table.

For a PyTorch allocator OOM it extracts the request, GPU total, free, allocated and
reserved-but-unallocated bytes and decides: fragmentation (the idle reserve could have
served the request: enable expandable segments), capacity (plan a memory change) or
impossible-request (larger than the GPU: a shape bug).  It also recognises NCCL, cuBLAS,
cuDNN and CUDA-driver OOMs (vLLM's sleep allocator, torch_memory_saver), Megatron config
errors (CPU offloading + PP, NCCL UB + expandable segments, CUDA graphs without
NCCL_GRAPH_REGISTER=0, VPP/PP divisibility, VPP micro-batch range) and allocator-config
errors.  Each finding says where (file:line, rank, GPU), the
cause, how to confirm, the fix and which helper to run next, then ranked actions that fit
the stack named in the text (Megatron, DeepSpeed, FSDP, vLLM, SGLang, verl, OpenRLHF,
ComfyUI, ...) and the PyTorch release its wording dates (expandable_segments is never
offered to a release that rejects it), evidence notes and a confidence; a summary says how
many ranks failed, the worst one, and whether they all failed the same way.  A GPU memory
failure in a wording no rule knows is still reported (unrecognized-gpu-memory-error).
A process the host killed for CPU RAM (kernel OOM killer, Slurm cgroup, Ray memory monitor,
OOMKilled; or only torchrun's exitcode -9 / a bare "Killed", with less confidence) is
host-oom: host-memory knobs, never GPU fixes."""

EPILOG = """\
examples:
  python3 scripts/diagnose.py train.log
  python3 scripts/diagnose.py logs/rank*.log.gz --json
  pbpaste | python3 scripts/diagnose.py -
  python3 scripts/diagnose.py err.txt --torch-version 2.0.1
  python3 scripts/diagnose.py --symptom "OOM on one rank only"

exit codes: 0 ran (findings or "no memory-related failure found"); 2 bad input
(missing file, directory, binary file, unreadable .gz) with a one-line reason."""


@click.command(
    "diagnose",
    cls=Command,
    short_help="which memory failure a log or error text shows, and what to do",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@argument("inputs", nargs=-1, metavar="[FILE]...", help_text="log files (plain or .gz); - reads standard input")
@json_option("print one JSON document: findings + summary (every field: references/json-output.md)")
@option("--symptom", metavar="TEXT", help="look a symptom up in the Failure Diagnosis table (fuzzy, ranked)")
@option("--limit", type=POSITIVE, default=3, metavar="N", help="rows to show for --symptom (default 3)")
@option(
    "--torch-version",
    metavar="X.Y[.Z]",
    help="the PyTorch that printed the log; overrides the release inferred from the message wording "
    "(decides whether expandable_segments is offered)",
)
def command(**params: object) -> int:
    return _diagnose(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "diagnose.py", argv)


def _diagnose(args: SimpleNamespace) -> int:
    if args.symptom is None and not args.inputs:
        raise InputError('give a log FILE (or - for standard input), or --symptom "TEXT"; see --help')
    if args.symptom is not None and args.inputs:
        raise InputError("use either log FILE(s) or --symptom, not both")
    torch_range = None
    if args.torch_version is not None:
        from memtune.diagnose import torch_era

        torch_range = torch_era.exact(args.torch_version)

    if args.symptom is not None:
        from memtune.diagnose import report as oom_report
        from memtune.diagnose import table as diagnosis_table
        from memtune.diagnose.symptom_route import route_for

        rows = diagnosis_table.load_rows()
        if not args.symptom.strip():
            raise InputError('--symptom needs some text, e.g. --symptom "OOM on one rank only"')
        matches = diagnosis_table.lookup_symptom(rows, args.symptom, limit=args.limit)
        # a change between two runs ("used to fit, now OOM after upgrading") is answered by
        # comparing the runs, before any single-failure row
        route = route_for(args.symptom)
        if args.as_json:
            print_json(
                {
                    "query": args.symptom,
                    "workflow": None
                    if route is None
                    else {
                        "name": route.route.name,
                        "title": route.route.title,
                        "because": route.because,
                        "steps": list(route.route.steps),
                    },
                    "matches": [
                        {
                            "score": m.score,
                            "symptom": m.row.symptom_md,
                            "cause": m.row.cause_md,
                            "confirm": m.row.confirm_md,
                            "fix": m.row.fix_md,
                        }
                        for m in matches
                    ],
                }
            )
        else:
            print(oom_report.render_symptom_matches(args.symptom, matches, route), end="")
        return 0

    from memtune.diagnose.run import diagnose_sources

    if list(args.inputs).count("-") > 1:
        raise InputError("- (standard input) can be given only once")
    # SKILL.md's table is parsed while the log is read
    report = diagnose_sources(list(args.inputs), torch_version=torch_range)
    if args.as_json:
        print_json(report)
    else:
        from memtune.diagnose import report as oom_report

        print(oom_report.render_text(report), end="")
    return 0
