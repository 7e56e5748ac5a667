"""trace_regression.py: memory went up between two runs or two commits; which change did it?

Imports only the stdlib, click and stdlib-only memtune modules at the top, so --help works
in a bare interpreter; the readers and the estimator are imported after parsing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from memtune.cli import Command, argument, invoke, option, print_json
from memtune.commands.options import GPU, SIZE, json_option, megatron_core_version_option
from memtune.commands.run_inputs import parse_memory
from memtune.commands.trace_text import render_config, render_explanation, render_measurement
from memtune.errors import EXIT_FINDINGS, EXIT_OK, InputError

if TYPE_CHECKING:
    from memtune.commands.trace_documents import (
        CommitStep,
        ConfigDocument,
        Explanation,
        KnobShare,
        MeasurementDocument,
    )
    from memtune.runtime.attribution import Attribution
    from memtune.runtime.flag_diff import FlagChangeJson
    from memtune.runtime.model import Measurements
    from memtune.spec.model_spec import ModelSpec
    from memtune.spec.run_spec import RunSpec

    _ThresholdBase = click.ParamType["Threshold"]
else:
    _ThresholdBase = click.ParamType

DESCRIPTION = """\
Say which change moved GPU memory between two runs A (before) and B (after). Each input's
kind is recognised from its content; nothing in a file is executed.

Two configurations (Megatron-LM launch scripts or flag mappings, Megatron Bridge YAMLs, or one
file at two git revisions with --git A..B -- FILE): the estimated peak per GPU of each, its
change (delta_bytes), and each changed knob applied ALONE on top of A (changes[].delta_bytes).
What no knob explains alone is interaction_bytes (the knobs' effect on each other), so the
knobs plus the interaction add up to the change exactly. A knob the estimator does not read is
listed as "unmodelled" with no byte figure: its effect is unknown, not zero. With --git, every
commit in the range that touched FILE is estimated and the first one whose peak exceeds the
GPU (--gpu, --gpu-memory, or the file's own) is named.

Two measurements (Megatron report_memory / Bridge memory logs, memory_summary, memory_stats,
nvidia-smi, memory snapshots): per-rank deltas of every figure and the change on the worst
rank; B regressed when a rank grew by more than --threshold (a CI gate: exit 1).

Two measurements and two configurations (the first of each kind is A): both of the above,
and which changed knob explains the measured change - or how much no modelled knob explains
(then the unmodelled knobs that changed are the candidates).

Values are bytes in --json (GiB in the text: 2^30 bytes)."""

EPILOG = """\
examples:
  python3 scripts/trace_regression.py before.sh after.sh --gpu H100-80GB
  python3 scripts/trace_regression.py old.yaml new.yaml --preset llama3-70b --gpus 32 --json
  python3 scripts/trace_regression.py --git v1..HEAD -- launch/train_70b.sh --gpu H100-80GB
  python3 scripts/trace_regression.py main.log pr.log --threshold 3%        # CI gate
  python3 scripts/trace_regression.py before.log after.log before.sh after.sh --gpus 64

exit codes: 0 traced, no measured regression (two configurations always 0); 1 the measurements
show B regressed beyond --threshold; 2 bad input (one line naming it)."""


@dataclass(frozen=True)
class Threshold:
    """How much growth counts as a regression: a share of A's peak or an absolute size."""

    text: str
    share: float | None = None
    size: int | None = None

    def bytes_of(self, base: int) -> int:
        return int(base * self.share) if self.share is not None else int(self.size or 0)


class ThresholdType(_ThresholdBase):
    """``5%`` of A's peak, or a size such as ``2GiB``."""

    name = "threshold"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "PCT|SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Threshold:
        if isinstance(value, Threshold):
            return value
        text = str(value).strip()
        if text.startswith("-"):
            self.fail(f"{text!r}: a threshold cannot be negative; use e.g. 5% or 2GiB", param, ctx)
        if text.endswith("%"):
            try:
                share = float(text[:-1])
            except ValueError:
                self.fail(f"{text!r} is not a percentage; use e.g. 5% or 2GiB", param, ctx)
            if not 0 <= share <= 1000:
                self.fail(f"{text!r}: give a percentage from 0% to 1000%", param, ctx)
            return Threshold(text, share=share / 100)
        try:
            return Threshold(text, size=parse_memory(text, allow_zero=True))
        except InputError:
            self.fail(f"{text!r}: expected a share of the peak like 5% or a size like 2GiB", param, ctx)


SOURCE = "run description"


@click.command(
    "trace-regression",
    cls=Command,
    short_help="which change (knob or commit) moved GPU memory between two runs",
    help=DESCRIPTION,
    epilog=EPILOG,
)
@argument(
    "inputs",
    nargs=-1,
    metavar="A B | FILE",
    help_text="A and B (before, after): two configurations, two measurements, or two of each; with --git the one file",
)
@option("--git", "git_range", metavar="A..B", help="trace one file across the commits of a git range")
@option(
    "--threshold",
    type=ThresholdType(),
    default="5%",
    help="growth that counts as a regression: a share of A's peak (5%, the default) or a size (2GiB)",
)
@option("--preset", metavar="NAME", help="model preset for a Bridge YAML that does not name its model", section=SOURCE)
@option("--hf-config", metavar="FILE", help="Hugging Face config.json for a Bridge YAML's model", section=SOURCE)
@megatron_core_version_option("Megatron-LM launch lines run with", SOURCE)
@option("--gpus", "--world-size", "gpus", type=click.IntRange(min=1), help="total GPUs, when a file does not say")
@option("--gpu", type=GPU, help="the GPU model: its usable memory is the limit (e.g. H100-80GB)")
@option("--gpu-memory", type=SIZE, help="the limit as a size (81559MiB, 79.6GiB); instead of --gpu")
@json_option("print one JSON document (every field: references/json-output.md)")
def command(**params: object) -> int:
    return _trace(SimpleNamespace(**params))


def main(argv: Sequence[str] | None = None) -> int:
    return invoke(command, "trace_regression.py", argv)


# ------------------------------------------------------------------------------ loading
@dataclass(frozen=True)
class Side:
    """One configuration side, loaded: where it came from, its specs and the GPU limit."""

    label: str
    kind: str
    model: ModelSpec
    run: RunSpec
    notes: tuple[str, ...]
    gpu_memory_bytes: int | None
    flags: dict[str, object] | None = None  # Megatron-LM flags, or the Bridge config mapping, as written


def _run_argv(args: SimpleNamespace, kind: str, path: str) -> list[str]:
    """The estimate_memory.py options that describe ``path`` under this command's options."""
    from memtune.runtime.sources import BRIDGE

    argv = ["--config" if kind == BRIDGE else "--megatron-args", path]
    if kind == BRIDGE:
        if args.preset:
            argv += ["--preset", args.preset]
        if args.hf_config:
            argv += ["--hf-config", args.hf_config]
    elif args.megatron_core_version:
        argv += ["--megatron-core-version", args.megatron_core_version]
    if args.gpus:
        argv += ["--gpus", str(args.gpus)]
    if args.gpu:
        argv += ["--gpu", args.gpu]
    if args.gpu_memory is not None:
        argv += ["--gpu-memory", args.gpu_memory.text]
    return argv


def load_config(args: SimpleNamespace, path: str, label: str | None = None) -> Side:
    """The specs of the configuration at ``path`` (``label`` names it in messages)."""
    from memtune.commands.options import parse_run_options
    from memtune.commands.run_inputs import load_model_and_run
    from memtune.runtime.sources import MEASUREMENT, MEGATRON, classify

    name = label or path
    kind = classify(path)
    if kind == MEASUREMENT:
        raise InputError(f"{name}: this is a run's measurement; comparing measurements needs two logs or snapshots")
    if kind != "bridge-config" and (args.preset or args.hf_config):
        raise InputError(f"{name}: a Megatron-LM launch script carries its model; drop --preset/--hf-config")
    if kind == "bridge-config" and args.megatron_core_version:
        raise InputError(
            f"{name}: --megatron-core-version applies to Megatron-LM launch lines (their flag defaults); "
            "a Bridge config states its own settings - drop it"
        )
    try:
        inputs = load_model_and_run(parse_run_options(_run_argv(args, kind, path)))
    except InputError as exc:
        text = str(exc)
        raise InputError(text if label is None else text.replace(path, label)) from None
    flags = None
    if kind == MEGATRON:
        from memtune.readers.megatron_args import load_megatron_args

        flags = load_megatron_args(path)
    else:
        from memtune.readers.bridge_config import load_bridge_yaml

        flags = load_bridge_yaml(path)
    return Side(name, kind, inputs.model, inputs.run, inputs.notes, inputs.gpu_memory_bytes, flags)


def _bridge_reader(args: SimpleNamespace, folder: str) -> Callable[[dict[str, object]], tuple[ModelSpec, RunSpec]]:
    """Reads a Bridge config mapping the way side A was read (same options), through a file:
    the loader takes paths, and going through it keeps presets and ``_memtune`` metadata."""
    from memtune.commands.options import parse_run_options
    from memtune.commands.run_inputs import load_model_and_run
    from memtune.runtime.sources import BRIDGE

    count = 0

    def read(cfg: dict[str, object]) -> tuple[ModelSpec, RunSpec]:
        import yaml

        nonlocal count
        count += 1
        path = Path(folder) / f"trial{count}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        inputs = load_model_and_run(parse_run_options(_run_argv(args, BRIDGE, str(path))))
        return inputs.model, inputs.run

    return read


def _limit(a: Side, b: Side) -> int | None:
    """The GPU memory to compare with: the flag's (same on both sides), else B's file's, else A's."""
    return b.gpu_memory_bytes or a.gpu_memory_bytes


# ------------------------------------------------------------------------------ running
def _trace(args: SimpleNamespace) -> int:
    if args.gpu and args.gpu_memory is not None:
        raise InputError("give --gpu or --gpu-memory, not both")
    if args.git_range:
        return _trace_git(args)
    from memtune.runtime.sources import MEASUREMENT, classify

    if len(args.inputs) not in (2, 4):
        raise InputError(
            f"give two inputs A (before) and B (after), or two measurements and two configurations; got "
            f"{len(args.inputs)} (or --git A..B -- FILE; see --help)"
        )
    kinds = [classify(p) for p in args.inputs]
    measured = [p for p, k in zip(args.inputs, kinds, strict=True) if k == MEASUREMENT]
    configs = [p for p, k in zip(args.inputs, kinds, strict=True) if k != MEASUREMENT]
    if len(measured) not in (0, 2) or len(configs) not in (0, 2):
        raise InputError(
            f"A and B must be the same kind: got {len(measured)} measurement(s) ({', '.join(measured) or '-'}) "
            f"and {len(configs)} configuration(s) ({', '.join(configs) or '-'}); give two of each kind"
        )
    if args.megatron_core_version and not configs:
        raise InputError(
            "--megatron-core-version reads Megatron-LM launch lines; two measurements have none - drop it, "
            "or add the two runs' launch scripts"
        )
    doc: ConfigDocument | None = None
    if configs:
        a, b = (load_config(args, p) for p in configs)
        from memtune.runtime.attribution import attribute

        attribution = attribute(a.model, a.run, b.model, b.run)
        doc = _config_document(a, b, attribution, _limit(a, b), args.threshold, args)
    if not measured and doc is not None:
        _emit(args, doc)
        return EXIT_OK
    measurement = _measurement_document(args, measured[0], measured[1])
    if doc is None:
        _emit_measurement(args, measurement)
        return EXIT_FINDINGS if measurement["regressed"] else EXIT_OK
    doc["mode"] = "measurement+config"
    doc["measured"] = measurement
    doc["explanation"] = _explain(doc, measurement)
    doc["regressed"] = measurement["regressed"]
    doc["threshold_bytes"] = measurement["threshold_bytes"]
    _emit(args, doc)
    return EXIT_FINDINGS if doc["regressed"] else EXIT_OK


def _measurement_document(args: SimpleNamespace, path_a: str, path_b: str) -> MeasurementDocument:
    """Per-rank deltas of two measurements (E1's reader does the reading)."""
    from memtune.runtime.measured_diff import Threshold as Limit
    from memtune.runtime.measured_diff import compare
    from memtune.runtime.read import read_measurements
    from memtune.runtime.verdicts import trend_verdict

    a, b = read_measurements([path_a]), read_measurements([path_b])

    def trend(side: Measurements, rank: int) -> str | None:
        measured = side.rank(rank)
        return None if measured is None else trend_verdict(measured).kind

    threshold: Threshold = args.threshold
    diff = compare(a, b, Limit(share=threshold.share, size=threshold.size))
    notes = [f"A: {n}" for n in a.notes] + [f"B: {n}" for n in b.notes]
    if diff.only_in_a or diff.only_in_b:
        notes.append(
            f"ranks measured on one side only (not compared): A {list(diff.only_in_a)}, B {list(diff.only_in_b)}"
        )
    if diff.figure is None:
        raise InputError(
            f"{path_a} and {path_b} share no memory figure to compare (e.g. one is nvidia-smi only and the other "
            "a report_memory log without device memory); give two measurements of the same kind"
        )
    return {
        "mode": "measurement",
        "a": {"source": path_a, "kind": "measurement", "formats": list(a.kinds), "peak_bytes": diff.peak_a},
        "b": {"source": path_b, "kind": "measurement", "formats": list(b.kinds), "peak_bytes": diff.peak_b},
        "figure": diff.figure,
        "delta_bytes": diff.delta_bytes,
        "threshold_bytes": diff.threshold_bytes,
        "resolution_bytes": diff.resolution_bytes,
        "regressed": diff.regressed,
        "regressed_ranks": list(diff.regressed_ranks),
        "ranks": [
            {
                "rank": r.rank,
                "figure": r.figure,
                "a_bytes": r.a_bytes,
                "b_bytes": r.b_bytes,
                "delta_bytes": r.delta_bytes,
                "threshold_bytes": r.threshold_bytes,
                "regressed": r.regressed,
                "trend_a": trend(a, r.rank),
                "trend_b": trend(b, r.rank),
                "figures": [
                    {"figure": f.figure, "a_bytes": f.a_bytes, "b_bytes": f.b_bytes, "delta_bytes": f.delta_bytes}
                    for f in r.figures
                    if f.a_bytes is not None or f.b_bytes is not None
                ],
            }
            for r in diff.ranks
        ],
        "only_in_a": list(diff.only_in_a),
        "only_in_b": list(diff.only_in_b),
        "notes": notes,
    }


#: The estimate "accounts for" a measured change when what is left is within this share of it
#: (or within EXPLAINED_FLOOR bytes, for small changes): allocator rounding and the reserve the
#: estimate does not model move a measurement by about that much.
EXPLAINED_SHARE = 0.2
EXPLAINED_FLOOR = 512 * 2**20


def _worst_figure(measured: MeasurementDocument, figure: str, side: str) -> int | None:
    values = [
        value
        for r in measured["ranks"]
        for f in r["figures"]
        if f["figure"] == figure and (value := f["a_bytes"] if side == "a" else f["b_bytes"]) is not None
    ]
    return max(values) if values else None


def _explain(doc: ConfigDocument, measured: MeasurementDocument) -> Explanation:
    """Which changed knob explains the measured change, and what the estimate leaves over.

    The estimator prices tensors (what max_memory_allocated counts), so the knobs are held
    against the measured change of peak *allocated* when both sides have it; the growth of the
    allocator's reserve on top of that (peak reserved minus peak allocated) is reported apart,
    as no knob of the estimate moves it."""
    headline = measured["delta_bytes"]
    if headline is None:  # both sides were measured by the same figure, so this does not happen
        raise InputError("the two measurements share no worst-rank figure: nothing to explain")
    alloc_a = _worst_figure(measured, "peak_allocated_bytes", "a")
    alloc_b = _worst_figure(measured, "peak_allocated_bytes", "b")
    allocated = None if alloc_a is None or alloc_b is None else alloc_b - alloc_a
    reserve = headline - allocated if allocated is not None and measured["figure"] == "peak_reserved_bytes" else None
    measured_delta = allocated if allocated is not None else headline
    estimated_delta = int(doc["delta_bytes"])
    left = measured_delta - estimated_delta
    tolerance = max(int(abs(measured_delta) * EXPLAINED_SHARE), EXPLAINED_FLOOR)
    shares: list[KnobShare] = [
        {
            "knob": c["knob"],
            "delta_bytes": c["delta_bytes"],
            "share_of_measured": (c["delta_bytes"] / measured_delta)
            if abs(measured_delta) >= EXPLAINED_FLOOR
            else None,
        }
        for c in doc["changes"]
        if c["delta_bytes"] is not None
    ]
    candidates = list(doc["unmodelled"])
    if abs(left) <= tolerance:
        verdict = "explained"
    elif candidates:
        verdict = "unmodelled-candidates"
    else:
        verdict = "unexplained"
    return {
        "verdict": verdict,
        "figure": "peak_allocated_bytes" if allocated is not None else measured["figure"],
        "measured_delta_bytes": measured_delta,
        "allocator_reserve_delta_bytes": reserve,
        "estimated_delta_bytes": estimated_delta,
        "unexplained_bytes": left,
        "tolerance_bytes": tolerance,
        "main_cause": doc["main_cause"],
        "knobs": shares,
        "candidates": candidates,
    }


def _trace_git(args: SimpleNamespace) -> int:
    from memtune.runtime import sources
    from memtune.runtime.attribution import attribute

    if len(args.inputs) != 1:
        raise InputError("--git A..B traces one file: give its path after the range (--git A..B -- FILE)")
    path = args.inputs[0]
    cwd = Path.cwd()
    start, end = sources.split_range(args.git_range)
    first, last = sources.resolve(start, cwd), sources.resolve(end, cwd)
    revisions = sources.commits_between(first, last, path, cwd)
    with tempfile.TemporaryDirectory(prefix="memtune-trace-") as tmp:

        def at(rev: str) -> Side:
            folder = Path(tmp) / rev
            folder.mkdir(exist_ok=True)
            copy = folder / Path(path).name
            copy.write_bytes(sources.show(rev, path, cwd))
            return load_config(args, str(copy), label=f"{path}@{rev[:12]}")

        a = at(first)
        b = at(last)
        attribution = attribute(a.model, a.run, b.model, b.run)
        limit = _limit(a, b)
        from memtune.estimate.estimator import estimate

        steps: list[CommitStep] = []
        crossing: CommitStep | None = None
        over_before = limit is not None and estimate(a.model, a.run).peak_bytes > limit
        for rev in revisions:
            try:
                side = b if rev.commit == last else at(rev.commit)
                peak: int | None = estimate(side.model, side.run).peak_bytes
                problem = ""
            except InputError as exc:
                peak, problem = None, str(exc)
            fits = None if limit is None or peak is None else peak <= limit
            step: CommitStep = {
                "commit": rev.commit,
                "subject": rev.subject,
                "peak_bytes": peak,
                "fits": fits,
                "problem": problem,
            }
            steps.append(step)
            if crossing is None and not over_before and fits is False:
                crossing = step
    doc = _config_document(a, b, attribution, limit, args.threshold, args)
    doc["git"] = {
        "range": args.git_range,
        "path": path,
        "start": first,
        "end": last,
        "over_limit_at_start": over_before,
        "commits": steps,
        "first_over_limit": crossing,
    }
    if limit is None:
        doc["notes"].append("no GPU limit (--gpu NAME or --gpu-memory SIZE): the crossing commit cannot be named")
    _emit(args, doc)
    return EXIT_OK


def _config_document(
    a: Side, b: Side, at: Attribution, limit: int | None, threshold: Threshold, args: SimpleNamespace | None = None
) -> ConfigDocument:
    cause = at.main_cause()
    allowed = threshold.bytes_of(at.peak_a)
    flag_rows: list[FlagChangeJson] | None = None
    if a.flags is not None and b.flags is not None and a.kind == b.kind == "megatron-args":
        from memtune.commands.run_inputs import parse_megatron_core_release
        from memtune.runtime.flag_diff import flag_changes

        version = parse_megatron_core_release(args.megatron_core_version if args else None)
        flag_rows = [c.to_json() for c in flag_changes(a.flags, b.flags, a.run.world_size, mcore_version=version)]
    elif a.flags is not None and b.flags is not None and a.kind == b.kind == "bridge-config" and args is not None:
        from memtune.runtime.config_diff import key_changes

        with tempfile.TemporaryDirectory(prefix="memtune-keys-") as folder:
            flag_rows = [c.to_json() for c in key_changes(a.flags, b.flags, _bridge_reader(args, folder))]
    notes = [f"A: {n}" for n in a.notes if n.startswith("WARNING")] + [
        f"B: {n}" for n in b.notes if n.startswith("WARNING")
    ]
    doc: ConfigDocument = {
        "mode": "config",
        "a": {"source": a.label, "kind": a.kind, "peak_bytes": at.peak_a, "peak_stage": at.peak_stage_a},
        "b": {"source": b.label, "kind": b.kind, "peak_bytes": at.peak_b, "peak_stage": at.peak_stage_b},
        "delta_bytes": at.delta_bytes,
        "changes": [c.to_json() for c in at.changes],
        "interaction_bytes": at.interaction_bytes,
        "main_cause": cause.knob.name if cause else None,
        "unmodelled": [c.knob.name for c in at.unmodelled]
        + [f["flag"] for f in flag_rows or () if f["status"] == "not-modelled"],
        "gpu_memory_bytes": limit,
        "fits_a": None if limit is None else at.peak_a <= limit,
        "fits_b": None if limit is None else at.peak_b <= limit,
        "threshold_bytes": allowed,
        "regressed": at.delta_bytes > allowed,
        "notes": notes,
    }
    if flag_rows is not None:
        doc["flags"] = flag_rows
    return doc


# ------------------------------------------------------------------------------ output
def _emit_measurement(args: SimpleNamespace, doc: MeasurementDocument) -> None:
    print_json(doc) if args.as_json else print(render_measurement(doc))


def _emit(args: SimpleNamespace, doc: ConfigDocument) -> None:
    if args.as_json:
        print_json(doc)
    elif doc["mode"] == "measurement+config":
        print(render_measurement(doc["measured"]))
        print()
        print(render_config(doc))
        print()
        print(render_explanation(doc["explanation"]))
    else:
        print(render_config(doc))
