"""The run description shared by estimate_memory.py and plan_memory.py.

Both helpers take the same inputs - one model/run source (preset, HF config, Megatron-LM
flags, Megatron Bridge YAML + Hydra overrides, or the embedded seed example), plain flags
that change the run, and the GPU memory. The click options live once in
:mod:`memtune.commands.options` (the ``run_input_options`` decorators both commands wear);
:func:`load_model_and_run` turns the parsed option values into a :class:`RunInputs`, so a new
option reaches both helpers and neither reaches into the other's private functions.

Reading a source is the readers' job: each source has one entry point that reads its file
once and says what it assumed (``read_hf_config``, ``read_megatron_args`` - flags, assumptions
and the launcher's world size from one parse - and ``load_bridge_yaml``, which also turns a
Python recipe away with what to pass instead). This module only picks the source the user
named, checks that the sources do not conflict, and applies the plain flags on top.

Only the standard library and stdlib-only memtune modules are imported at top level
(``--help`` must work without PyYAML); loaders that need YAML are imported lazily.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING

from memtune.errors import InputError
from memtune.units import GIB, KIB, MIB, TIB

if TYPE_CHECKING:  # the specs import the YAML-backed tables: imported lazily at run time
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import RunSpec

_UNITS = {
    "": GIB,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": TIB,
    "k": KIB,
    "m": MIB,
    "g": GIB,
    "t": TIB,
}

#: GPU names --help lists; kept here because --help must not need PyYAML (a test checks each
#: is a name in data/gpus.yaml that has a usable size).
GPU_NAMES_FOR_HELP = (
    "H100-80GB",
    "H100-NVL",
    "H200",
    "H20",
    "GH200",
    "A100-40GB",
    "A100-80GB",
    "B200",
    "GB200",
    "B300",
    "L40S",
    "L4",
    "A10",
    "A40",
    "V100-32GB",
    "MI300X",
)

#: Plain flag (option name) -> RunSpec field it sets when given.
_FLAG_FIELDS = {
    "tp": "tp",
    "pp": "pp",
    "vpp": "vpp",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "mbs": "mbs",
    "gbs": "gbs",
    "seq_length": "seq_length",
    "gpus": "world_size",
    "sp": "sequence_parallel",
    "dist_opt": "use_distributed_optimizer",
    "grad_fp32": "grad_reduce_in_fp32",
    "attention_backend": "attention_backend",
    "lora_dim": "lora_dim",
    "regather": "sequence_parallel_input_regather",
    "recompute_method": "recompute_method",
    "recompute_num_layers": "recompute_num_layers",
    "fsdp": "use_megatron_fsdp",
    "precision": "params_dtype",
    "fp8_param_gather": "fp8_param_gather",
    "first_stage_layers": "num_layers_in_first_pipeline_stage",
    "last_stage_layers": "num_layers_in_last_pipeline_stage",
}


@dataclass(frozen=True)
class GivenSize:
    """A size as the user wrote it (``80GB``) and the bytes it means: the text decides the
    marketing-size warning, the bytes everything else."""

    text: str
    nbytes: int


@dataclass(frozen=True)
class RunInputs:
    """A loaded run: the model, the run after the plain flags, what was assumed, the GPU size."""

    model: ModelSpec
    run: RunSpec
    notes: tuple[str, ...]  # assumptions the loader made (shown with the result)
    gpu_memory_bytes: int | None  # --gpu-memory, else the config's/example's own value, else None


def parse_memory(text: str, allow_zero: bool = False) -> int:
    """'80GB' -> 80e9, '80GiB' / '80G' / '80' -> 80 x 2^30, '81559MiB' -> bytes.

    Zero is refused unless ``allow_zero`` (a GPU has memory; a headroom may be none)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise InputError(f"--gpu-memory {text!r}: expected a size like 80GB, 80GiB or 81559MiB")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"--gpu-memory {text!r}: must be positive")
    return int(value)


def print_presets(as_json: bool) -> None:
    """--list-presets: the names one a line, or with --json one document naming each
    preset's source."""
    from memtune.cli import print_json
    from memtune.spec import presets

    names = presets.preset_names()
    if as_json:
        print_json({"presets": [{"name": n, "source": presets.preset_source(n)} for n in names]})
    else:
        print("\n".join(names))


def load_model_and_run(args: SimpleNamespace) -> RunInputs:
    """The model and run described by ``args`` (the options of memtune.commands.options;
    ``args.gpu_memory`` is a :class:`GivenSize` or None).

    Raises InputError for conflicting or missing sources; does not validate the run's
    legality (callers decide whether an illegal run is an error or a finding).
    """
    model, run, notes, extras = _load_source(args)
    run = _apply_flags(args, run)
    from memtune.spec.run_spec import peft_without_regather

    lacking = peft_without_regather(run)
    if lacking and run.sequence_parallel_input_regather:  # e.g. --peft dora over a LoRA config that set it
        run = run.with_(sequence_parallel_input_regather=False)
        notes = [*notes, f"WARNING: {lacking} has no sequence_parallel_input_regather: estimated without re-gather"]
    if getattr(args, "fsdp", None):  # --fsdp names the strategy: the reader's "not given" line no longer holds
        notes = [n for n in notes if "sharding-strategy not given" not in n and "sharding_strategy not given" not in n]
    gpu_name = getattr(args, "gpu", None)
    if gpu_name and args.gpu_memory:
        raise InputError("give --gpu or --gpu-memory, not both (--gpu sets the memory from the GPU's real size)")
    if gpu_name:
        from memtune.spec.gpus import lookup_gpu, usable_memory

        gpu = lookup_gpu(gpu_name)
        usable = usable_memory(gpu)
        notes.append(f"GPU {gpu.name}: {usable / GIB:.1f} GiB usable ({gpu.source})")
        return RunInputs(model=model, run=run, notes=tuple(notes), gpu_memory_bytes=usable)
    given: GivenSize | None = args.gpu_memory
    if given is not None:
        memory: int | None = given.nbytes
    else:
        memory_text = extras.get("gpu_memory")
        memory = parse_memory(str(memory_text)) if memory_text else None
    if memory and given is not None:
        from memtune.spec.gpus import bare_number_note, marketing_size_warning

        note = marketing_size_warning(given.text, memory) or bare_number_note(given.text, memory)
        if note and note.startswith("WARNING"):
            notes.insert(0, note)
        elif note:
            notes.append(note)
    return RunInputs(model=model, run=run, notes=tuple(notes), gpu_memory_bytes=memory)


def megatron_core_version(args: SimpleNamespace) -> tuple[int, ...] | None:
    """The parsed --megatron-core-version. It changes how a Megatron-LM line is read (flag defaults
    that moved between releases); a Bridge config or preset names its own settings, so it is
    refused there rather than silently ignored."""
    text = getattr(args, "megatron_core_version", None)
    if text is None:
        return None
    if not getattr(args, "megatron_args", None):
        raise InputError(
            "--megatron-core-version applies to a --megatron-args launch line (Megatron-LM's flag defaults); "
            "drop it for this source"
        )
    return parse_megatron_core_release(text)


def parse_megatron_core_release(text: str | None) -> tuple[int, ...] | None:
    """``0.18``, ``0.18.0`` or Megatron-LM's tag spelling ``core_v0.18.0`` -> ``(0, 18, 0)``."""
    from memtune.readers.alloc_conf import parse_version

    if text is not None:
        text = re.sub(r"^(?:core_r|core_v|v)(?=\d)", "", str(text).strip())
    return parse_version(text, "--megatron-core-version")


def _load_source(args: SimpleNamespace) -> tuple[ModelSpec, RunSpec, list[str], dict[str, object]]:
    """(model, run, assumptions, extras) from the chosen source."""
    from memtune.spec import presets
    from memtune.spec.run_spec import RunSpec

    sources = [n for n in ("hf_config", "megatron_args", "example") if getattr(args, n)]
    if len(sources) > 1:
        raise InputError("choose one model source: --hf-config, --megatron-args or --example")
    mcore_version = megatron_core_version(args)
    extras: dict[str, object] = {}
    base: ModelSpec | None = None
    model_notes: list[str] = []  # what the model source assumed (HF config reader)
    if args.hf_config:
        from memtune.readers.hf_config import read_hf_config

        reading = read_hf_config(args.hf_config)
        base, model_notes = reading.model, list(reading.notes)
    if args.preset:
        if args.hf_config:
            raise InputError("give either --preset or --hf-config, not both")
        base = presets.load_preset(args.preset)
    if args.megatron_args:
        from memtune.readers.megatron_args import read_megatron_args, specs_from_megatron_args

        if base is not None:
            raise InputError("--megatron-args carries the model itself; drop --preset/--hf-config")
        if args.overrides:
            raise InputError("Hydra overrides apply to --config/--example, not to --megatron-args")
        launch = read_megatron_args(args.megatron_args)
        flags, assumed = launch.flags, launch.assumed
        world, world_note = args.gpus, None
        if world is None and "--world-size" not in flags and launch.world is not None:
            world, world_note = launch.world.gpus, launch.world.note
        try:
            model, run, notes = specs_from_megatron_args(
                flags, world_size=world, assumed=assumed, mcore_version=mcore_version
            )
            if launch.alloc_conf is not None:
                from memtune.readers.alloc_conf import parse as parse_alloc_conf

                name, value = launch.alloc_conf
                run = run.with_(expandable_segments=parse_alloc_conf(value).expandable_segments)
                notes = [*notes, f"allocator from the script: {name}={value}"]
            if world_note:
                notes = [world_note, *notes] if world_note.startswith("WARNING") else [*notes, world_note]
        except InputError as exc:  # a bad flag value: say which file holds it
            raise InputError(f"{args.megatron_args}: {exc}") from None
        if world_note and world_note.startswith("WARNING") and args.gpus is None:
            from memtune.spec.run_spec import violations

            problems = violations(model, run)
            if problems:  # illegal only because of a guessed GPU count: lead with that, then the arithmetic
                raise InputError(
                    f"{args.megatron_args}: {world_note[len('WARNING: ') :]} "
                    f"(with the {run.world_size} GPU(s) assumed instead: {problems[0]})"
                )
        return model, run, notes, extras
    if args.config or args.example:
        from memtune.readers.bridge_config import load_bridge_yaml, specs_from_bridge
        from memtune.spec.overrides import apply_overrides

        if args.example:
            from memtune.files.paths import DATA_DIR

            if args.config:
                raise InputError("give either --config or --example, not both")
            cfg = load_bridge_yaml(DATA_DIR / "examples" / "llama3-70b-sft-32gpu.yaml")
        else:
            cfg = load_bridge_yaml(args.config)
        from memtune.readers.bridge_nested import flat_override

        cfg = apply_overrides(cfg, [flat_override(o) for o in args.overrides], known=_known_config_keys())
        meta = cfg.pop("_memtune", None) or {}
        if base is None and meta.get("preset"):
            base = presets.load_preset(str(meta["preset"]))
        extras.update(meta)
        gpus = args.gpus or meta.get("gpus")
        forced = frozenset(o.lstrip("+").split("=", 1)[0] for o in args.overrides if o.startswith("+"))
        model, run, notes = specs_from_bridge(cfg, world_size=gpus, base=base, forced=forced)
        return model, run, _with_model_notes(model_notes, notes), extras
    if args.overrides:
        raise InputError(f"override {args.overrides[0]!r} needs --config or --example")
    if base is None:
        raise InputError(
            "no model given: use --preset NAME, --hf-config, --megatron-args, --config or --example "
            f"(presets: {', '.join(presets.preset_names())})"
        )
    notes = []
    tp, pp, cp = args.tp or 1, args.pp or 1, args.cp or 1
    from memtune.spec.run_spec import assumed_world_note, smallest_world

    ep, etp = args.ep or 1, args.etp
    gpus = args.gpus or smallest_world(tp, pp, cp, ep, etp, moe=base.is_moe)
    if not args.gpus:
        notes.append(assumed_world_note(gpus, tp, pp, cp, ep, etp))
    if base.is_moe and ep > 1 and etp is None and tp > 1:
        notes.append(
            f"--etp not given: expert TP follows TP ({tp}), as in Megatron-LM and Megatron-Core; "
            "Megatron Bridge sets it to 1 when EP > 1 (pass --etp 1 for a Bridge run)"
        )
    if args.dist_opt is None:
        notes.append("distributed optimizer on (Megatron Bridge recipe default); --no-dist-opt to change")
    if args.mbs is None:
        notes.append("micro-batch size not given: assumed 1 (activations scale with it); pass --mbs")
    run = RunSpec(world_size=gpus, use_distributed_optimizer=True, sequence_parallel=tp > 1)
    return base, run, _with_model_notes(model_notes, notes), extras


def _with_model_notes(model_notes: list[str], notes: list[str]) -> list[str]:
    """The model reader's notes with the run's: warnings first (where nobody misses them),
    then the model's assumptions, then the run's."""
    warnings = [n for n in model_notes if n.startswith("WARNING")]
    return [*warnings, *[n for n in model_notes if not n.startswith("WARNING")], *notes]


def _known_config_keys() -> frozenset[str]:
    """Config keys a plain override may misspell: those the checks read plus every
    architecture field under ``model.`` (the Bridge reader takes ModelSpec names there)."""
    from memtune.readers.run_view import known_paths
    from memtune.spec.model_spec import model_field_names

    return known_paths() | {f"model.{name}" for name in model_field_names()}


def _apply_flags(args: SimpleNamespace, run: RunSpec) -> RunSpec:
    """The run with every plain flag that was given applied on top of the source."""
    changes: dict[str, object] = {}
    for attr, field in _FLAG_FIELDS.items():
        value = getattr(args, attr)
        if value is not None:
            changes[field] = value
    if args.recompute is not None:
        changes["recompute_granularity"] = None if args.recompute == "none" else args.recompute
    if args.recompute_modules:
        changes["recompute_modules"] = tuple(m.strip() for m in args.recompute_modules.split(",") if m.strip())
        changes.setdefault("recompute_granularity", "selective")
    if args.fsdp:  # the help's promise: Megatron-FSDP sharding everything, whatever the source said
        from memtune.spec.run_spec import FSDP_FULL_SHARD

        changes.update(FSDP_FULL_SHARD)
    if args.fp8 is not None:
        changes["fp8"] = None if args.fp8 == "none" else args.fp8
    if args.cpu_offload_layers is not None:
        if args.cpu_offload_layers < 0:
            raise InputError(f"--cpu-offload-layers {args.cpu_offload_layers}: must not be negative")
        changes["cpu_offloading"] = args.cpu_offload_layers > 0
        changes["cpu_offloading_num_layers"] = args.cpu_offload_layers
    if args.peft is not None:
        changes["peft"] = None if args.peft == "none" else args.peft
    run = run.with_(**changes) if changes else run
    if args.regather:
        from memtune.spec.run_spec import peft_without_regather

        lacking = peft_without_regather(run)
        if lacking:
            raise InputError(
                f"--regather: {lacking} has no sequence_parallel_input_regather (only Megatron Bridge's LoRA has it); "
                "drop --regather"
            )
    return run
