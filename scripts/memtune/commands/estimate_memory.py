"""estimate_memory.py: How much memory will this Megatron run need per GPU, and where does it go?

Builds a ModelSpec + RunSpec from one source (preset, HF config, Megatron-LM flags, Megatron
Bridge YAML + Hydra overrides, or the embedded example), lets plain flags change the run,
and prints the per-pipeline-stage estimate (text table with bars, or --json).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from memtune.cli import InputError, make_parser, print_json

DESCRIPTION = """\
Estimate peak GPU memory per pipeline stage of a Megatron-Core / Megatron Bridge training run:
weights, gradients, optimizer states, activations (for the micro-batches in flight under the
1F1B / interleaved schedule), allocator-visible workspaces, and - on a separate line - runtime
overhead that PyTorch does not count (CUDA context, NCCL). Compares the peak with --gpu-memory.

Model from exactly one of --preset, --hf-config, --megatron-args, --config (a Bridge YAML; may be
combined with --preset/--hf-config for the architecture) or --example. Flags then override the run."""

EPILOG = """\
examples:
  estimate_memory.py --example
  estimate_memory.py --preset llama3-8b --gpus 8 --tp 2 --mbs 1 --gbs 128 --seq-length 8192 --sequence-parallel
  estimate_memory.py --preset deepseek-v3 --gpus 1024 --tp 2 --pp 16 --first-stage-layers 1 --ep 64 --etp 1 --mbs 1 --gbs 4096 --recompute full
  estimate_memory.py --hf-config ~/models/Qwen3-8B/config.json --gpus 2 --tp 2 --peft lora --regather --seq-length 8192
  estimate_memory.py --megatron-args launch.sh --gpus 64 --json
  estimate_memory.py --config run.yaml --preset llama3-70b --gpus 32 model.pipeline_model_parallel_size=8 train.global_batch_size=64
  estimate_memory.py --example --recompute-modules core_attn,mlp --gpu-memory 80GB

exit codes: 0 estimate printed (whether or not it fits), 2 bad input (one line naming it)."""

GIB = 1024**3
_UNITS = {"": GIB, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1024, "mib": 1024**2, "gib": GIB, "tib": 1024**4, "k": 1024, "m": 1024**2, "g": GIB, "t": 1024**4}


def parse_memory(text: str) -> int:
    """'80GB' -> 80e9, '80GiB' / '80G' / '80' -> 80 x 2^30, '81559MiB' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise InputError(f"--gpu-memory {text!r}: expected a size like 80GB, 80GiB or 81559MiB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise InputError(f"--gpu-memory {text!r}: must be positive")
    return int(value)


def _positive(name: str):
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise InputError(f"{name} {text!r}: expected a positive integer") from None
        if value <= 0:
            raise InputError(f"{name} {value}: must be a positive integer")
        return value
    return convert


def build_parser():
    p = make_parser("estimate_memory.py", DESCRIPTION, EPILOG)
    src = p.add_argument_group("model / run source")
    src.add_argument("--preset", help="model preset name (see --list-presets)")
    src.add_argument("--list-presets", action="store_true", help="print the known presets and exit")
    src.add_argument("--hf-config", metavar="FILE", help="Hugging Face config.json")
    src.add_argument("--megatron-args", metavar="FILE",
                     help="Megatron-LM launch script, or YAML/JSON mapping {'--flag': value}")
    src.add_argument("--config", metavar="FILE", help="Megatron Bridge ConfigContainer YAML")
    src.add_argument("--example", action="store_true",
                     help="the seed's Llama3-70B SFT run (TP4/PP4/VPP5/DP2, 32 x H100 80GB)")
    src.add_argument("overrides", nargs="*", metavar="key.path=value",
                     help="Hydra-style overrides for --config/--example (a.b=v, +a.b=v, ++a.b=v, ~a.b)")
    par = p.add_argument_group("parallelism and batch")
    for flag, helptext in (("--tp", "tensor parallel"), ("--pp", "pipeline parallel"),
                           ("--vpp", "virtual pipeline chunks per rank"), ("--cp", "context parallel"),
                           ("--ep", "expert parallel"), ("--etp", "expert tensor parallel"),
                           ("--mbs", "micro-batch size"), ("--gbs", "global batch size"),
                           ("--seq-length", "sequence length")):
        par.add_argument(flag, type=_positive(flag), help=helptext)
    par.add_argument("--gpus", "--world-size", dest="gpus", type=_positive("--gpus"), help="total GPUs")
    par.add_argument("--first-stage-layers", type=_positive("--first-stage-layers"), metavar="N",
                     help="uneven PP: decoder layers on the first stage (num_layers_in_first_pipeline_stage)")
    par.add_argument("--last-stage-layers", type=_positive("--last-stage-layers"), metavar="N",
                     help="uneven PP: decoder layers on the last stage (num_layers_in_last_pipeline_stage)")
    par.add_argument("--sequence-parallel", dest="sp", action="store_true", default=None)
    par.add_argument("--no-sequence-parallel", dest="sp", action="store_false")
    mem = p.add_argument_group("memory features")
    mem.add_argument("--recompute", choices=("none", "selective", "full"), help="activation recompute granularity")
    mem.add_argument("--recompute-modules", help="selective modules, comma separated (core_attn,mlp,layernorm,moe_act,moe,...)")
    mem.add_argument("--recompute-method", choices=("uniform", "block"))
    mem.add_argument("--recompute-num-layers", type=_positive("--recompute-num-layers"))
    mem.add_argument("--dist-opt", dest="dist_opt", action="store_true", default=None, help="distributed optimizer")
    mem.add_argument("--no-dist-opt", dest="dist_opt", action="store_false")
    mem.add_argument("--fsdp", action="store_true", default=None, help="Megatron-FSDP (optim_grads_params)")
    mem.add_argument("--precision", choices=("bf16", "fp16", "fp32"))
    mem.add_argument("--fp8", metavar="RECIPE", help="fp8 GEMMs (delayed, tensorwise, mxfp8, blockwise) or 'none'")
    mem.add_argument("--fp8-param-gather", action="store_true", default=None)
    mem.add_argument("--grad-fp32", dest="grad_fp32", action="store_true", default=None, help="fp32 main grads")
    mem.add_argument("--no-grad-fp32", dest="grad_fp32", action="store_false")
    mem.add_argument("--attention-backend", choices=("auto", "flash", "fused", "unfused", "local"))
    mem.add_argument("--cpu-offload-layers", type=int, metavar="N", help="CPU-offload activations of N layers")
    mem.add_argument("--peft", choices=("none", "lora", "dora"))
    mem.add_argument("--lora-dim", type=_positive("--lora-dim"))
    mem.add_argument("--regather", dest="regather", action="store_true", default=None,
                     help="LoRA sequence_parallel_input_regather")
    mem.add_argument("--no-regather", dest="regather", action="store_false")
    out = p.add_argument_group("output")
    out.add_argument("--gpu-memory", metavar="SIZE", help="GPU memory for the verdict (80GB, 80GiB, 81559MiB)")
    out.add_argument("--json", action="store_true", help="print one JSON document")
    return p


def _load(args) -> tuple[Any, Any, list[str], dict[str, Any]]:
    """(model, run, assumptions, extras) from the chosen source."""
    from memtune import presets
    from memtune.model_spec import ModelSpec
    from memtune.run_spec import RunSpec

    sources = [n for n in ("hf_config", "megatron_args", "example") if getattr(args, n)]
    if len(sources) > 1:
        raise InputError("choose one model source: --hf-config, --megatron-args or --example")
    extras: dict[str, Any] = {}
    base: ModelSpec | None = None
    if args.hf_config:
        from memtune.hf_config import load_hf_config

        base = load_hf_config(args.hf_config)
    if args.preset:
        if args.hf_config:
            raise InputError("give either --preset or --hf-config, not both")
        base = presets.load_preset(args.preset)
    if args.megatron_args:
        from memtune.megatron_args import load_megatron_args, specs_from_megatron_args

        if base is not None:
            raise InputError("--megatron-args carries the model itself; drop --preset/--hf-config")
        if args.overrides:
            raise InputError("Hydra overrides apply to --config/--example, not to --megatron-args")
        model, run, notes = specs_from_megatron_args(load_megatron_args(args.megatron_args), world_size=args.gpus)
        return model, run, notes, extras
    if args.config or args.example:
        from memtune.bridge_config import load_bridge_yaml, specs_from_bridge
        from memtune.overrides import apply_overrides

        if args.example:
            from memtune.paths import DATA_DIR

            cfg = load_bridge_yaml(DATA_DIR / "examples" / "llama3-70b-sft-32gpu.yaml")
            if args.config:
                raise InputError("give either --config or --example, not both")
        else:
            cfg = load_bridge_yaml(args.config)
        cfg = apply_overrides(cfg, args.overrides)
        meta = cfg.pop("_memtune", None) or {}
        if base is None and meta.get("preset"):
            base = presets.load_preset(str(meta["preset"]))
        extras.update(meta)
        gpus = args.gpus or meta.get("gpus")
        model, run, notes = specs_from_bridge(cfg, world_size=gpus, base=base)
        return model, run, notes, extras
    if args.overrides:
        raise InputError(f"override {args.overrides[0]!r} needs --config or --example")
    if base is None:
        raise InputError("no model given: use --preset NAME, --hf-config, --megatron-args, --config or --example "
                         f"(presets: {', '.join(presets.preset_names())})")
    notes = []
    tp, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    gpus = args.gpus or tp * pp * cp
    if not args.gpus:
        notes.append(f"GPU count not given: assumed {gpus} (one data-parallel replica); pass --gpus")
    if args.dist_opt is None:
        notes.append("distributed optimizer on (Megatron Bridge recipe default); --no-dist-opt to change")
    run = RunSpec(world_size=gpus, use_distributed_optimizer=True, sequence_parallel=tp > 1)
    return base, run, notes, extras


def _apply_flags(args, run):
    changes: dict[str, Any] = {}
    mapping = {"tp": "tp", "pp": "pp", "vpp": "vpp", "cp": "cp", "ep": "ep", "etp": "etp", "mbs": "mbs",
               "gbs": "gbs", "seq_length": "seq_length", "gpus": "world_size", "sp": "sequence_parallel",
               "dist_opt": "use_distributed_optimizer", "grad_fp32": "grad_reduce_in_fp32",
               "attention_backend": "attention_backend", "lora_dim": "lora_dim",
               "regather": "sequence_parallel_input_regather", "recompute_method": "recompute_method",
               "recompute_num_layers": "recompute_num_layers", "fsdp": "use_megatron_fsdp",
               "precision": "params_dtype", "fp8_param_gather": "fp8_param_gather",
               "first_stage_layers": "num_layers_in_first_pipeline_stage",
               "last_stage_layers": "num_layers_in_last_pipeline_stage"}
    for attr, field in mapping.items():
        value = getattr(args, attr)
        if value is not None:
            changes[field] = value
    if args.recompute is not None:
        changes["recompute_granularity"] = None if args.recompute == "none" else args.recompute
    if args.recompute_modules:
        changes["recompute_modules"] = tuple(m.strip() for m in args.recompute_modules.split(",") if m.strip())
        changes.setdefault("recompute_granularity", "selective")
    if args.fp8 is not None:
        changes["fp8"] = None if args.fp8.lower() == "none" else args.fp8
    if args.cpu_offload_layers is not None:
        if args.cpu_offload_layers < 0:
            raise InputError(f"--cpu-offload-layers {args.cpu_offload_layers}: must not be negative")
        changes["cpu_offloading"] = args.cpu_offload_layers > 0
        changes["cpu_offloading_num_layers"] = args.cpu_offload_layers
    if args.peft is not None:
        changes["peft"] = None if args.peft == "none" else args.peft
    return run.with_(**changes) if changes else run


def _bar(value: int, peak: int, width: int = 24) -> str:
    filled = int(round(width * value / peak)) if peak else 0
    return "#" * filled + "." * (width - filled)


def render_text(model, run, est, notes: list[str], gpu_memory: int | None) -> str:
    from memtune.model_spec import count_parameters

    gib = lambda b: f"{b / GIB:8.2f}"  # noqa: E731
    lines = [f"Model {model.name}: {est.parameters_total / 1e9:.2f} B parameters"
             + (f" ({count_parameters(model).active / 1e9:.2f} B active)" if model.is_moe else "")
             + f", {est.parameters_per_gpu_max / 1e9:.3f} B on the most-loaded GPU",
             "", "Per pipeline stage (GiB, one GPU of each stage):"]
    show_step = any(s.optimizer_step for s in est.stages)
    show_graphs = any(s.cuda_graphs for s in est.stages)
    header = f"  {'stage':>5} {'layers':>6} {'weights':>8} {'grads':>8} {'optim':>8} {'activ':>8}"
    header += f" {'step+':>8}" if show_step else ""
    header += f" {'wkspace':>8}" + (f" {'graphs':>8}" if show_graphs else "") + f" {'overhead':>8} {'total':>8}"
    lines.append(header)
    peak = est.peak_bytes
    for s in est.stages:
        mark = "*" if s.stage == est.peak_stage else " "
        row = f" {mark}{s.stage:>5} {s.layers:>6} {gib(s.weights)} {gib(s.gradients)} {gib(s.optimizer)} {gib(s.activations)}"
        row += f" {gib(s.optimizer_step)}" if show_step else ""
        row += f" {gib(s.workspace)}" + (f" {gib(s.cuda_graphs)}" if show_graphs else "")
        row += f" {gib(s.overhead)} {gib(s.total_bytes)}  {_bar(s.total_bytes, peak)}"
        lines.append(row)
    top = est.stages[est.peak_stage]
    lines.append(f"  * most-loaded stage: {top.stage} ({top.total_bytes / GIB:.2f} GiB = {top.total_bytes / 1e9:.2f} GB; "
                 f"max allocated by PyTorch {top.allocated_bytes / GIB:.2f} GiB, runtime overhead {top.overhead / GIB:.2f} GiB; "
                 f"activations of {top.in_flight_microbatches:g} in-flight micro-batch(es))")
    if show_step:
        lines.append("  step+ = fp32 copies of bf16 gradients at the optimizer step, beyond the activations freed by then")
    if show_graphs:
        lines.append("  graphs = activations saved inside CUDA-graph-captured modules (graph memory pool: reserved, "
                     "not counted by max_memory_allocated after capture)")
    lines.append("")
    lines.append("Assumptions:")
    for a in [*notes, *est.assumptions]:
        lines.append(f"  - {a}")
    if gpu_memory:
        lines.append("")
        head = gpu_memory - est.peak_bytes
        pct = head / gpu_memory
        if head < 0:
            verdict = (f"DOES NOT FIT: needs {est.peak_bytes / GIB:.1f} GiB, GPU has {gpu_memory / GIB:.1f} GiB "
                       f"(short by {-head / GIB:.1f} GiB). Next: plan_memory.py with the same arguments.")
        elif pct < 0.10:
            verdict = (f"BORDERLINE: {head / GIB:.1f} GiB ({pct:.0%}) headroom of {gpu_memory / GIB:.1f} GiB; allocator "
                       "fragmentation can still OOM - set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
        else:
            verdict = f"FITS: {head / GIB:.1f} GiB ({pct:.0%}) headroom of {gpu_memory / GIB:.1f} GiB."
        lines.append(f"Verdict: {verdict}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from memtune import presets

    if args.list_presets:
        for name in presets.preset_names():
            print(name)
        return 0
    from memtune.estimator import estimate

    model, run, notes, extras = _load(args)
    run = _apply_flags(args, run)
    if run.gbs is None:
        notes.append("global batch not given: one micro-batch per data-parallel rank per step "
                     "(pipeline warm-up then holds fewer micro-batches; pass --gbs)")
    est = estimate(model, run)
    memory_text = args.gpu_memory or extras.get("gpu_memory")
    gpu_memory = parse_memory(str(memory_text)) if memory_text else None
    if args.json:
        doc = est.to_json()
        doc["assumptions"] = [*notes, *doc["assumptions"]]
        doc["model"] = model.name
        if gpu_memory:
            doc["gpu_memory_bytes"] = gpu_memory
            doc["fits"] = est.peak_bytes <= gpu_memory
        print_json(doc)
        return 0
    print(render_text(model, run, est, notes, gpu_memory))
    return 0
