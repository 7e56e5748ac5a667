"""plan_memory.py: this run does not fit - which change makes it fit at the lowest throughput cost?"""

from __future__ import annotations

import re
from typing import Sequence

from memtune.cli import InputError, make_parser, print_json

DESCRIPTION = """\
This run does not fit (or barely fits): which change makes it fit at the lowest throughput cost?

Takes the same run description as estimate_memory.py, enumerates the changes you could make
at the same GPU count (expandable segments, LoRA input re-gather, selective/full recompute,
distributed optimizer / Megatron-FSDP, PP with and without VPP, TP, SP, CP, EP/ETP, micro-batch
size, CPU offloading), rejects the ones Megatron would refuse (with the reason), estimates the
peak memory of the rest and ranks those that fit with headroom by estimated throughput.
Throughput numbers are measured where measurements exist (Llama3-70B on 32xH100: TP 4->8 -28.4%,
PP 4->8 with DP halved -5.9%, mlp recompute ~-16%, ...) and otherwise first-principles
estimates; every row says which.
"""

EPILOG = """\
examples:
  # the seed's Llama3-70B SFT case (TP4 PP4 VPP5 DP2 on 32x H100 80GB)
  python3 scripts/plan_memory.py --example
  python3 scripts/plan_memory.py --example --json --top 3
  # your own run: same inputs as estimate_memory.py
  python3 scripts/plan_memory.py --preset llama3-70b --gpus 32 --tp 4 --pp 4 --vpp 5 \\
      --mbs 1 --gbs 32 --seq-length 4096 --gpu-memory 80GiB --headroom 10%
  python3 scripts/plan_memory.py --config bridge.yaml model.tensor_model_parallel_size=4 --gpus 64
  # every combination instead of one change at a time
  python3 scripts/plan_memory.py --example --sweep --top 5

exit codes: 0 a plan was made (including "nothing fits"), 2 bad usage or input.
"""

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1024**3, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}


def parse_size(text: str, what: str) -> int:
    """'80GiB', '80GB', '81559MiB' or a bare number of GiB -> bytes (positive)."""
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{what} {text!r} is not a size; use e.g. 80GiB, 80GB or 81559MiB")
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if value <= 0:
        raise InputError(f"{what} must be positive, got {text!r}")
    return int(value)


def parse_headroom(text: str, gpu_bytes: int) -> int:
    """'10%' of the GPU memory, or an absolute size such as '4GiB'."""
    t = str(text).strip()
    if t.endswith("%"):
        try:
            share = float(t[:-1])
        except ValueError:
            raise InputError(f"--headroom {text!r} is not a percentage; use e.g. 10%") from None
        if not 0 <= share < 100:
            raise InputError(f"--headroom {text!r} must be between 0% and 100%")
        return int(gpu_bytes * share / 100)
    return parse_size(t, "--headroom")


def build_parser():
    parser = make_parser("plan_memory.py", DESCRIPTION, EPILOG)
    inputs = _input_arguments()
    if inputs is not None:
        inputs[0](parser)
    if not any("--gpu-memory" in a.option_strings for a in parser._actions):
        parser.add_argument("--gpu-memory", metavar="SIZE", help="memory per GPU, e.g. 80GiB (default 80GiB)")
    parser.add_argument("--example", action="store_true",
                        help="plan the seed's Llama3-70B SFT run (TP4 PP4 VPP5 DP2, 32x H100 80GB)")
    parser.add_argument("--headroom", default="10%", metavar="SIZE|PCT",
                        help="memory to keep free per GPU: a share of --gpu-memory (10%%, the default) or a size (4GiB)")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="show the N best rows (default 10)")
    parser.add_argument("--expandable-segments", choices=("on", "off", "unknown"), default="unknown",
                        help="is PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True already set? (default unknown: offered)")
    parser.add_argument("--gpus-per-node", type=int, default=8, metavar="N",
                        help="GPUs per NVLink domain; TP beyond it is rejected (default 8)")
    parser.add_argument("--sweep", action="store_true", help="rank every combination, not one change at a time")
    parser.add_argument("--json", action="store_true", help="print one JSON document (same content as the table)")
    return parser


def _input_arguments():
    """The estimator's shared input options: (add_arguments, load) or None if absent."""
    try:
        from memtune import run_inputs  # type: ignore[attr-defined]
    except ImportError:
        return None
    return run_inputs.add_input_arguments, run_inputs.load_model_and_run


def _load(args):
    """(model, run, gpu memory bytes) from --example or the estimator's inputs."""
    from memtune import throughput_cost as tc

    if args.example:
        table = tc.load_costs()
        spec = table.raw["workloads"]["llama3_70b_sft_32xh100"]
        model, run = tc.anchor_workload(table.raw, "llama3_70b_sft_32xh100")
        gpu = parse_size(args.gpu_memory or spec["gpu_memory"], "--gpu-memory")
        return model, run, gpu
    inputs = _input_arguments()
    if inputs is None:
        raise InputError("no run given: use --example (run inputs come with estimate_memory.py's options)")
    model, run = inputs[1](args)[:2]
    gpu = parse_size(args.gpu_memory or "80GiB", "--gpu-memory")
    return model, run, gpu


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.top < 1:
        raise InputError(f"--top must be at least 1, got {args.top}")
    if args.gpus_per_node < 1:
        raise InputError(f"--gpus-per-node must be at least 1, got {args.gpus_per_node}")
    from memtune import plan_report, planner
    from memtune import run_spec as rs

    model, run, gpu = _load(args)
    rs.validate(model, run)
    expandable = {"on": True, "off": False, "unknown": None}[args.expandable_segments]
    settings = planner.PlanSettings(gpu_memory_bytes=gpu, headroom_bytes=parse_headroom(args.headroom, gpu),
                                    expandable_segments=expandable, gpus_per_node=args.gpus_per_node)
    if settings.limit_bytes <= 0:
        raise InputError(f"--headroom {args.headroom} leaves no memory of --gpu-memory {plan_report.gib(gpu)}")
    if args.sweep:
        result = planner.plan_sweep(model, run, settings)
    else:
        result = planner.plan(model, run, settings)
    if args.json:
        print_json(plan_report.to_json(result, args.top))
    else:
        print(plan_report.to_text(result, args.top))
    return 0
