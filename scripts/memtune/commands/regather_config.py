"""regather_config.py: is LoRA sequence_parallel_input_regather eligible for this run, what to write, what it saves."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, TypedDict

import click

from memtune.cli import Command, invoke, option, print_json
from memtune.commands.options import POSITIVE, json_option, overrides_argument
from memtune.errors import EXIT_OK, InputError
from memtune.units import GIB

if TYPE_CHECKING:  # the run view, the rules and the estimator load PyYAML: imported when a decision runs
    from memtune.estimate.regather import Eligibility, RecipeCall, RegatherInputs
    from memtune.readers.run_view import RunView
    from memtune.spec.model_spec import ModelSpec


class ModuleRow(TypedDict):
    """One LoRA target module and why it is (not) eligible."""

    module: str
    eligible: bool
    reason: str


class Change(TypedDict):
    """The text to write, in the form of the user's config (python / yaml / hydra)."""

    form: str
    text: str


class SeedReference(TypedDict):
    """The measured Qwen3-8B figure the saving is compared with."""

    model: str
    tp: int
    seq_length: int
    saving_bytes: int
    throughput_change: float


class RegatherReport(TypedDict):
    """The --json document (schema: data/schemas/output/regather_config.schema.json)."""

    eligible: bool
    already_enabled: bool
    modules: list[ModuleRow]
    fallbacks: list[str]
    change: Change
    saving_bytes_per_gpu: int | None
    model: str | None
    assumptions: list[str]
    seed_reference: SeedReference


DESCRIPTION = """\
Decide whether Megatron Bridge's LoRA option sequence_parallel_input_regather helps this run,
per target module (column-parallel linear_qkv / linear_fc1 are eligible; row-parallel
linear_proj / linear_fc2 and expert adapters are not; TP=1, sequence parallel off, CUDA graphs,
CPU activation offloading and overlapping full-layer or MLP recompute fall back), print the
change in the form your config uses (Python recipe snippet keeping your LoRA settings, Bridge
YAML, or a Hydra override), and estimate the activation memory saved per GPU.

Takes the same inputs as check_env.py (--script, --config, --env-file, overrides) plus the
PEFT settings; the model comes from --preset, the script's Megatron-LM flags or the YAML."""

EPILOG = """\
examples:
  python3 scripts/regather_config.py --preset qwen3-8b --tp 2 --seq-length 8192
  python3 scripts/regather_config.py --config lora_qwen3_8b.yaml --form python --json
  python3 scripts/regather_config.py --recipe my_recipe.py --preset qwen3-8b --tp 2 --seq-length 8192
  python3 scripts/regather_config.py --script finetune.sh --lora-dim 16 --target-modules linear_qkv,linear_proj
seed measurement (H100, SQuAD): Qwen3-8B TP2 seq 8192 saved 4.731 GB (47.545 -> 42.814 GB), -6.74% throughput"""


# helper options -> the Bridge config path they override
OPTION_PATHS = {
    "tp": "model.tensor_model_parallel_size",
    "pp": "model.pipeline_model_parallel_size",
    "seq_length": "model.seq_length",
    "mbs": "train.micro_batch_size",
    "lora_dim": "peft.dim",
    "lora_alpha": "peft.alpha",
    "target_modules": "peft.target_modules",
}


@click.command(
    "regather-config",
    cls=Command,
    short_help="whether LoRA sequence_parallel_input_regather applies, the change and the saving",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@overrides_argument("[KEY=VALUE]...", "Hydra-style overrides applied last")
@option("--script", multiple=True, metavar="FILE", help="bash / sbatch launch script")
@option("--config", multiple=True, metavar="FILE", help="Megatron Bridge YAML")
@option("--env-file", multiple=True, metavar="FILE", help="KEY=VALUE lines")
@option(
    "--recipe",
    metavar="FILE.py",
    help="Python recipe that builds cfg.peft = LoRA(...): read, never run or edited; the answer prints your call with the change, its arguments kept",
)
@option("--preset", metavar="NAME", help="model preset for the memory estimate (e.g. qwen3-8b)")
@option("--tp", type=POSITIVE, help="tensor parallel size (overrides the config)")
@option("--pp", type=POSITIVE, help="pipeline parallel size")
@option("--seq-length", type=POSITIVE, help="sequence length")
@option("--mbs", type=POSITIVE, help="micro-batch size (default 1)")
@option("--no-sequence-parallel", is_flag=True, help="sequence parallelism is off")
@option("--lora-dim", type=POSITIVE, help="LoRA rank")
@option("--lora-alpha", type=int, help="LoRA alpha")
@option(
    "--target-modules",
    metavar="A,B",
    help="LoRA target modules (default: linear_qkv,linear_proj,linear_fc1,linear_fc2)",
)
@option(
    "--form",
    type=click.Choice(("auto", "python", "yaml", "hydra")),
    default="auto",
    help="how to print the change (auto: like your config)",
)
@option("--world-size", "--gpus", "world_size", type=POSITIVE, metavar="N", help="GPU count")
@json_option()
def command(**params: object) -> int:
    return _decide(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "regather_config.py", argv)


def _decide(args: SimpleNamespace) -> int:
    if not (args.config or args.script or args.overrides or args.recipe or args.preset or args.env_file or args.tp):
        raise InputError(
            "nothing to decide on: give --preset NAME --tp N, --config FILE, --script FILE or --recipe FILE.py"
        )
    if args.target_modules is not None and not [m for m in args.target_modules.split(",") if m.strip()]:
        raise InputError(
            f"--target-modules {args.target_modules!r} names no module; e.g. --target-modules linear_qkv,linear_fc1"
        )
    from memtune.readers import run_view

    overrides = list(args.overrides)
    for name, path in OPTION_PATHS.items():
        value = getattr(args, name)
        if value is not None:
            overrides.append(f"{path}=[{value}]" if name == "target_modules" else f"{path}={value}")
    view = run_view.build(
        run_view.Inputs(
            env_files=list(args.env_file),
            scripts=list(args.script),
            configs=list(args.config),
            overrides=[o for o in overrides],
            world_size=args.world_size,
        )
    )
    if not (args.config or args.script or args.overrides):
        view.config_form = None  # only helper flags: answer with a recipe snippet
    # --tp N > 1 without a config: assume sequence parallelism is on (LoRA + SP is the question)
    if not view.has("sequence_parallel") and (args.tp or 0) > 1 and not args.no_sequence_parallel:
        view.settings["sequence_parallel"] = run_view.Value(
            True, "assumed (--tp > 1; pass --no-sequence-parallel if off)", "sequence_parallel", "cli"
        )
    if args.no_sequence_parallel:
        view.settings["sequence_parallel"] = run_view.Value(False, "command line", "--no-sequence-parallel", "cli")
    recipe_calls = []
    if args.recipe:
        from memtune.estimate.regather import find_lora_calls

        recipe_calls = find_lora_calls(args.recipe)
        if not recipe_calls:
            raise InputError(f"{args.recipe}: no LoRA(...) / DoRA(...) call found; give the file that sets cfg.peft")
        call = recipe_calls[-1]
        _apply_recipe_settings(view, args.recipe)
        for key, text in call.kwargs:
            if key in ("dim", "alpha", "target_modules", "sequence_parallel_input_regather"):
                overrides_value = text.replace("'", "").replace('"', "").replace(" ", "")
                view_key = {
                    "dim": "lora_dim",
                    "alpha": "lora_alpha",
                    "target_modules": "lora_target_modules",
                    "sequence_parallel_input_regather": "regather",
                }[key]
                converted, ok = run_view.coerce(overrides_value, run_view.rules_data()["settings"][view_key]["type"])
                if ok:
                    view.settings[view_key] = run_view.Value(
                        converted, f"{call.path}:{call.line}", f"{key}={text}", "recipe"
                    )
        kind = "dora" if call.name.lower().endswith("dora") else "lora"  # the class the recipe builds
        view.settings.setdefault("peft", run_view.Value(kind, f"{call.path}:{call.line}", call.name, "recipe"))
    report = build_report(
        view, args.preset, "python" if args.recipe and args.form == "auto" else args.form, recipe_calls
    )
    if args.as_json:
        print_json(report)
    else:
        print(render_text(report))
    return EXIT_OK


def _apply_recipe_settings(view: RunView, path: str) -> None:
    """``cfg.model.tensor_model_parallel_size = 2`` in the recipe counts like a config key
    (options given to this helper still win)."""
    from memtune.estimate.regather import find_recipe_settings
    from memtune.readers import run_view

    specs = run_view.rules_data()["settings"]
    for dotted, value, line in find_recipe_settings(path):
        for name, spec in specs.items():
            if dotted not in spec.get("paths", []):
                continue
            current = view.settings.get(name)
            if current is not None and current.source == "command line":
                continue
            converted, ok = run_view.coerce(value, spec.get("type", "str"))
            if ok:
                view.settings[name] = run_view.Value(converted, f"{path}:{line}", f"cfg.{dotted} = {value!r}", "recipe")
        view.flat.setdefault(dotted, (value, f"{path}:{line}", f"cfg.{dotted} = {value!r}"))


def _lora_settings(view: RunView) -> dict[str, object]:
    """The user's LoRA settings (YAML / overrides), to keep them in the printed change."""
    out: dict[str, object] = {}
    for key, (value, _source, _text) in view.flat.items():
        if key.startswith("peft.") and key.count(".") == 1:
            out[key.split(".", 1)[1]] = value
    return out


def build_report(
    view: RunView, preset: str | None, form: str, recipe_calls: Sequence[RecipeCall] = ()
) -> RegatherReport:
    from memtune.check import check_rules
    from memtune.estimate import regather

    model, model_notes = _model(view, preset)
    if model is not None and model.is_moe and not view.has("num_experts"):
        from memtune.readers import run_view

        view.settings["num_experts"] = run_view.Value(model.num_moe_experts, "model", "num_moe_experts", "derived")
    inp = check_rules.regather_inputs(view)
    decision = regather.decide(inp)
    already = view.get("regather") is True and not inp.peft_without_field
    lora = _lora_settings(view)
    if form == "auto":
        form = (
            "yaml"
            if view.config_form == "yaml"
            else ("hydra" if view.config_form in ("hydra", "megatron") else "python")
        )
    if form == "python" and recipe_calls:
        text = regather.recipe_call_snippet(recipe_calls[-1])
    elif form == "python":
        text = regather.recipe_snippet(lora)
    elif form == "yaml":
        text = "peft:\n  sequence_parallel_input_regather: true"
        if view.config_path:
            text += f"   # add under the existing peft: section of {view.config_path}"
        text += f"\n# or, as an override: {regather.hydra_override()}"
    else:
        where = (
            f" (append to the training command at {view.script.path}:{view.command.line})"
            if view.script and view.command
            else ""
        )
        text = regather.hydra_override() + where
    if inp.peft_without_field:  # no field to write: never hand out a keyword the class lacks
        text = f"none: {inp.peft_without_field} has no sequence_parallel_input_regather (only LoRA has it)"
    saving, assumptions, model_name = estimate_saving(view, model, model_notes, inp, decision)
    modules: list[ModuleRow] = [
        {"module": d.module, "eligible": d.eligible, "reason": d.reason} for d in decision.decisions
    ]
    return {
        "eligible": decision.any_eligible,
        "already_enabled": already,
        "modules": modules,
        "fallbacks": list(decision.run_fallbacks),
        "change": {"form": form, "text": text},
        "saving_bytes_per_gpu": saving,
        "model": model_name,
        "assumptions": assumptions,
        "seed_reference": {
            "model": "Qwen3-8B",
            "tp": 2,
            "seq_length": 8192,
            "saving_bytes": int(regather.SEED_QWEN3_8B_SAVING_BYTES),
            "throughput_change": -0.0674,
        },
    }


def estimate_saving(
    view: RunView, model: ModelSpec | None, model_notes: list[str], inp: RegatherInputs, decision: Eligibility
) -> tuple[int | None, list[str], str | None]:
    """Bytes per GPU saved, from the estimator's activation model (None when no model)."""
    from memtune.estimate import regather

    assumptions = list(model_notes)
    if model is None:
        return (
            None,
            ["no model size known: give --preset NAME, Megatron-LM model flags in --script, or model.* in --config"],
            None,
        )
    if not decision.any_eligible:
        return 0, ["no eligible adapter: nothing is saved"], model.name
    given = {key: view.get(key) for key in ("seq_length", "mbs", "pp", "vpp", "gbs", "world_size", "lora_dim")}
    saving, defaulted = regather.saving_estimate(model, inp, given)
    assumptions.extend(defaulted)
    fraction = min((d.eligible_layer_fraction for d in decision.decisions if d.eligible), default=1.0)
    if fraction < 1.0:
        saving = int(saving * fraction)
        assumptions.append(
            f"block recompute replays {1 - fraction:.0%} of each stage's layers; saving scaled to the rest"
        )
    assumptions.append(
        "activations of the most-loaded pipeline stage, all micro-batches in flight (estimator activation model)"
    )
    return saving, assumptions, model.name


def _model(view: RunView, preset: str | None) -> tuple[ModelSpec | None, list[str]]:
    assumptions: list[str] = []
    if preset:
        from memtune.spec.presets import load_preset

        return load_preset(preset), assumptions
    if view.flags:
        from memtune.readers.megatron_args import specs_from_megatron_args

        mapping = {
            f"--{name}": (flag.values[0] if len(flag.values) == 1 else (list(flag.values) or True))
            for name, flag in view.flags.items()
        }
        try:
            model, _run, used = specs_from_megatron_args(mapping)
        except InputError:
            model = None
        else:
            return model, list(used)
    section = {
        key[6:]: value for key, (value, _s, _t) in view.flat.items() if key.startswith("model.") and key.count(".") == 1
    }
    if all(section.get(k) is not None for k in ("num_layers", "hidden_size", "num_attention_heads")):
        from memtune.readers.bridge_config import model_from_bridge

        if section.get("vocab_size") is None and section.get("padded_vocab_size") is None:
            section["vocab_size"] = 32000
            assumptions.append("vocab_size 32000 (not in the config; it does not change the re-gather saving)")
        import os

        model = model_from_bridge(section)
        return model.with_(name=f"{os.path.basename(str(view.config_path or 'config'))} (model section)"), assumptions
    return None, assumptions


def render_text(report: RegatherReport) -> str:
    lines = []
    verdict = "eligible" if report["eligible"] else "not eligible (falls back to the default path)"
    lines.append(
        f"sequence_parallel_input_regather: {verdict}" + ("; already enabled" if report["already_enabled"] else "")
    )
    width = max((len(item["module"]) for item in report["modules"]), default=0)
    for item in report["modules"]:
        mark = "yes" if item["eligible"] else "no "
        lines.append(f"  {mark} {item['module']:<{max(width, 12)}} {item['reason']}")
    if report["eligible"] and not report["already_enabled"]:
        lines.append(f"\nchange ({report['change']['form']}):")
        lines.extend("  " + line for line in report["change"]["text"].splitlines())
    saving = report["saving_bytes_per_gpu"]
    if saving is not None:
        lines.append(
            f"\nestimated activation memory saved per GPU: {saving / 1e9:.3f} GB ({saving / GIB:.3f} GiB), model {report['model']}"
        )
    for note in report["assumptions"]:
        lines.append(f"  assumption: {note}")
    ref = report["seed_reference"]
    lines.append(
        f"reference: {ref['model']} TP{ref['tp']} seq {ref['seq_length']} measured {ref['saving_bytes'] / 1e9:.3f} GB saved, "
        f"{ref['throughput_change']:+.2%} throughput"
    )
    return "\n".join(lines)
