"""Family-wide invariants of the estimator and planner on the real configs of tests/data/hf-configs.

The helpers were calibrated on a few shapes (Llama3-70B, Qwen3-8B, DeepSeek-V3); an agent quotes
them on any model. These tests hold every estimable real config.json to properties that follow
from how Megatron-Core lays a model out, whatever the calibration (metamorphic tests):

* sharding: per-GPU weights + gradients + optimizer never grow when TP or PP doubles (DP kept)
  or when EP doubles (GPUs kept); the distributed optimizer never grows optimizer state; LoRA
  never holds more static memory than full fine-tuning;
* activations: full recompute <= selective <= none on every stage; a larger micro-batch or
  sequence never lowers them; CP 2x keeps exactly what half the sequence keeps (flash
  attention: nothing is quadratic in the sequence); sequence parallelism never adds (without
  LoRA, whose un-regathered adapters legitimately keep the gathered input);
* bookkeeping: the parameter count is the layout's own only through vocabulary padding, and
  the per-GPU shards of all stages put back together (TP-sharded parts times TP, replicated
  parts once, routed experts times EP x ETP) are the model;
* sanity: nothing negative, NaN or beyond what the layout could physically hold;
* the planner: ``plan_memory.py --json`` exits 0, validates against its schema, everything it
  calls "fits" is below the limit it derived from the GPU's usable memory, every row's peak is
  the estimator's for that row's run, and the ladder's cumulative steps never raise the peak.

The default run checks a bounded deterministic grid (a few layouts per model); the hypothesis
sweep over the whole layout space is marked slow.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helper_cli import invoke
from memtune.errors import InputError
from memtune.estimate import ladder as ld
from memtune.estimate import planner as pl
from memtune.estimate.estimator import MemoryEstimate, StageEstimate, device_peak_bytes, estimate
from memtune.readers.hf_config import read_hf_config
from memtune.spec.gpus import lookup_gpu, usable_memory
from memtune.spec.model_spec import (
    ModelSpec,
    count_parameters,
    hybrid_layer_params,
    layer_params,
    mtp_layer_params,
)
from memtune.spec.run_spec import RunSpec, violations
from test_output_schemas import assert_valid

DATA = Path(__file__).parent / "data" / "hf-configs"
REFUSED = {"Qwen3.5-35B-A3B", "Qwen3-Next-80B-A3B-Thinking"}  # linear attention: refused on purpose
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / "config.json").is_file() and p.name not in REFUSED)
GPUS = ("H100-80GB", "A100-40GB", "B200")
#: Weights (2) + TE's fp8 weight cache (2) + fp32 main grads (4) + fp32 master copy and Adam
#: moments (12), with room for LoRA adapters: no GPU ever holds more per parameter it stores.
MAX_STATIC_BYTES_PER_PARAM = 24
#: Activations beyond this per GPU are a unit or overflow bug, for layouts that keep at most
#: :data:`SANE_TOKENS` tokens per micro-batch on a GPU.
SANE_ACTIVATIONS = 10 * 10**12
SANE_TOKENS = 32768
#: Stage totals are float sums truncated to bytes: equal estimates may differ by a byte.
ROUNDING = 8


@cache
def model(folder: str) -> ModelSpec:
    return read_hf_config(DATA / folder / "config.json").model


def legal(m: ModelSpec, run: RunSpec) -> bool:
    return not violations(m, run)


def static(stage: StageEstimate) -> int:
    return stage.weights + stage.gradients + stage.optimizer


def max_static(e: MemoryEstimate) -> int:
    return max(static(s) for s in e.stages)


def describe(run: RunSpec) -> str:
    return (
        f"W{run.world_size} TP{run.tp} PP{run.pp} VPP{run.vpp} CP{run.cp} EP{run.ep} ETP{run.etp} "
        f"mbs{run.mbs} gbs{run.gbs} seq{run.seq_length} SP{int(run.sequence_parallel)} {run.recompute} "
        f"distopt{int(run.use_distributed_optimizer)} peft={run.peft} fp8={run.fp8}"
    )


# ------------------------------------------------------------------ layouts
def layout(m: ModelSpec, draw: random.Random) -> RunSpec | None:
    """One layout drawn from the space the brief names (None when the draw is illegal):
    8..1024 GPUs, TP/PP/CP/EP/VPP, mbs, seq 2k..128k, recompute modes, dist-opt, LoRA, fp8."""
    tp, pp, cp = draw.choice((1, 2, 4, 8)), draw.choice((1, 2, 4, 8, 16)), draw.choice((1, 1, 2, 4))
    dp = draw.choice((1, 2, 4, 8, 16, 32))
    world = tp * pp * cp * dp
    if not 8 <= world <= 1024:
        return None
    experts = m.num_moe_experts or 0
    mbs, microbatches = draw.choice((1, 1, 2, 4)), draw.choice((1, 4, 8, 16))
    granularity = draw.choice((None, "selective", "full"))
    run = RunSpec(
        world_size=world,
        tp=tp,
        pp=pp,
        cp=cp,
        vpp=draw.choice((None, None, 2, 3, 4)),
        ep=draw.choice((1, 2, 4, 8, 16, 32, 64)) if experts else 1,
        etp=draw.choice((None, 1)) if experts else None,
        mbs=mbs,
        gbs=mbs * dp * microbatches,
        seq_length=draw.choice((2048, 4096, 8192, 32768, 131072)),
        sequence_parallel=tp > 1 and draw.random() < 0.7,
        recompute_granularity=granularity,
        recompute_method=draw.choice(("uniform", "block")) if granularity == "full" else None,
        recompute_num_layers=draw.choice((1, 2, 4)) if granularity == "full" else None,
        use_distributed_optimizer=draw.random() < 0.5,
        peft=draw.choice((None, None, "lora")),
        fp8=draw.choice((None, None, "tensorwise")),
    )
    return run if legal(m, run) else None


def layouts(folder: str, count: int) -> list[RunSpec]:
    """``count`` legal layouts of one model, the same on every run (seeded by the model)."""
    m, draw, out = model(folder), random.Random(folder), []
    for _ in range(200 * count):
        run = layout(m, draw)
        if run is not None:
            out.append(run)
            if len(out) == count:
                break
    return out


def grid(count: int = 6) -> Iterator[tuple[str, RunSpec]]:
    for folder in FOLDERS:
        for run in layouts(folder, count):
            yield folder, run


# ------------------------------------------------------------------ the properties
def replicated_parameters(m: ModelSpec) -> int:
    """Parameters every TP rank holds whole: norms, routers, row-parallel biases."""
    if m.is_hybrid:
        total = sum(hybrid_layer_params(m, kind).replicated for kind in m.layer_kinds())
    else:
        total = sum(layer_params(m, moe).replicated for moe in m.moe_layers())
    if m.mtp_num_layers:
        total += m.mtp_num_layers * mtp_layer_params(m).replicated
    return total + m.layer_norm_width * m.hidden_size


def check_sharding(m: ModelSpec, run: RunSpec) -> list[str]:
    out = []
    base = max_static(estimate(m, run))
    for knob in ("tp", "pp"):  # doubled with DP kept: the world doubles
        wider = run.with_(**{knob: 2 * getattr(run, knob)}, world_size=2 * run.world_size)
        if legal(m, wider) and max_static(estimate(m, wider)) > base:
            out.append(f"static grew when {knob} doubled: {base} -> {max_static(estimate(m, wider))}")
    if not run.use_distributed_optimizer:  # without sharding over DP, the same GPUs suffice
        for knob in ("tp", "pp"):
            wider = run.with_(**{knob: 2 * getattr(run, knob)})
            if legal(m, wider) and max_static(estimate(m, wider)) > base:
                out.append(f"static grew when {knob} doubled on the same GPUs")
    if m.is_moe:
        wider = run.with_(ep=2 * run.ep)
        if legal(m, wider) and max_static(estimate(m, wider)) > base:
            out.append(f"static grew when EP doubled: {base} -> {max_static(estimate(m, wider))}")
    plain = estimate(m, run.with_(use_distributed_optimizer=False)).stages
    sharded = estimate(m, run.with_(use_distributed_optimizer=True)).stages
    out += [
        f"dist-opt grew stage {a.stage}'s optimizer"
        for a, b in zip(plain, sharded, strict=True)
        if b.optimizer > a.optimizer
    ]
    out += [
        f"dist-opt grew stage {a.stage}'s total"
        for a, b in zip(plain, sharded, strict=True)
        if b.total_bytes > a.total_bytes
    ]
    full = estimate(m, run.with_(peft=None)).stages
    lora = estimate(m, run.with_(peft="lora")).stages
    out += [
        f"LoRA static above full FT on stage {a.stage}"
        for a, b in zip(full, lora, strict=True)
        if static(b) > static(a)
    ]
    return out


def check_activations(m: ModelSpec, run: RunSpec) -> list[str]:
    out = []
    none = run.with_(recompute_granularity=None, recompute_method=None, recompute_num_layers=None)
    if legal(m, none):
        n = estimate(m, none).stages
        s = estimate(m, none.with_(recompute_granularity="selective")).stages
        f = estimate(m, none.with_(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1))
        for a, b, c in zip(f.stages, s, n, strict=True):
            if not a.activations <= b.activations + ROUNDING <= c.activations + 2 * ROUNDING:
                out.append(f"stage {c.stage}: full {a.activations} sel {b.activations} none {c.activations}")
    base = estimate(m, run).stages
    for grown in (run.with_(mbs=2 * run.mbs, gbs=2 * (run.gbs or run.mbs)), run.with_(seq_length=2 * run.seq_length)):
        if legal(m, grown):
            more = estimate(m, grown).stages
            out += [
                f"activations fell with {describe(grown)}"
                for a, b in zip(base, more, strict=True)
                if b.activations + ROUNDING < a.activations
            ]
    if run.tp > 1 and run.peft is None:
        off = estimate(m, run.with_(sequence_parallel=False)).stages
        on = estimate(m, run.with_(sequence_parallel=True)).stages
        out += [
            f"SP grew stage {a.stage}" for a, b in zip(off, on, strict=True) if b.activations > a.activations + ROUNDING
        ]
    split = run.with_(cp=2 * run.cp, world_size=2 * run.world_size)
    half = run.with_(seq_length=run.seq_length // 2)
    if legal(m, split) and legal(m, half):
        for a, b in zip(estimate(m, split).stages, estimate(m, half).stages, strict=True):
            if not math.isclose(a.activations, b.activations, rel_tol=1e-9, abs_tol=64):
                out.append(f"CP x2 stage {a.stage}: {a.activations} vs half sequence {b.activations}")
    return out


def check_bookkeeping(m: ModelSpec, run: RunSpec) -> list[str]:
    out = []
    e = estimate(m, run)
    h, vocab = m.hidden_size, m.padded_vocab_size(run.tp)
    matrices = 2 if m.untie_embeddings_and_output_weights else 1
    padding = (vocab - m.vocab_size) * h * matrices
    if e.parameters_total - padding != count_parameters(m).total:
        out.append(f"parameter count {e.parameters_total} - padding {padding} != {count_parameters(m).total}")
    padded = count_parameters(m, padded_tp=run.tp)
    replicated, experts = replicated_parameters(m), padded.expert
    copies = 0  # what pipelining adds: the last stage's own output matrix / MTP embedding
    if run.pp > 1 and not m.untie_embeddings_and_output_weights:
        copies += vocab * h
    if run.pp > 1 and m.mtp_num_layers:
        copies += padded.embedding
    sharded = padded.total - replicated - experts + copies
    expected = sharded / run.tp + replicated + experts / (run.ep * run.expert_tp)
    got = sum(s.params for s in e.stages)
    if abs(got - expected) > run.pp:  # one int() per stage
        out.append(f"per-GPU shards sum to {got} per TPxEP group, expected {expected:.0f}")
    for s in e.stages:
        for name, value in s.components().items():
            if value < 0 or value != value:
                out.append(f"stage {s.stage} {name} = {value}")
        if static(s) > MAX_STATIC_BYTES_PER_PARAM * e.parameters_total:
            out.append(f"stage {s.stage} static {static(s)} beyond {MAX_STATIC_BYTES_PER_PARAM} B/param")
        if run.seq_length * run.mbs / run.cp <= SANE_TOKENS and s.activations > SANE_ACTIVATIONS:
            out.append(f"stage {s.stage} activations {s.activations / 1e12:.1f} TB")
        if not 0 < s.allocated_bytes <= s.total_bytes:
            out.append(f"stage {s.stage} allocated {s.allocated_bytes} vs total {s.total_bytes}")
    return out


CHECKS = {"sharding": check_sharding, "activations": check_activations, "bookkeeping": check_bookkeeping}


def test_every_estimable_real_config_is_in_the_grid():
    assert len(FOLDERS) == 23  # every folder of tests/data/hf-configs but the refused ones
    assert all(len(layouts(folder, 6)) == 6 for folder in FOLDERS)


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("folder", FOLDERS)
def test_invariants_hold_on_a_bounded_grid(folder: str, check: str):
    m = model(folder)
    failures = [f"{describe(run)}: {msg}" for run in layouts(folder, 6) for msg in CHECKS[check](m, run)]
    assert failures == []


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(folder=st.sampled_from(FOLDERS), seed=st.integers(0, 2**32 - 1))
def test_invariants_hold_across_the_layout_space(folder: str, seed: int):
    m, draw = model(folder), random.Random(seed)
    run = next((r for r in (layout(m, draw) for _ in range(400)) if r is not None), None)
    if run is None:
        return
    failures = [msg for check in CHECKS.values() for msg in check(m, run)]
    assert failures == [], describe(run)


# ------------------------------------------------------------------ regressions found by the grid
def test_full_recompute_of_a_one_layer_stage_keeps_what_no_recompute_keeps():
    """Llama-3.2-1B at PP 16 puts one layer on each stage; with one micro-batch per step each
    stage has one in flight, so recomputing its layer cannot save anything. The estimate used
    to charge the checkpointed input twice (kept, and again inside the re-run layer), making
    full recompute 0.5 GiB *more* than none on the last stage at seq 32k, mbs 4 (TP2, DP2).
    A middle stage is compared: on the last one the loss peak, which no recompute coexists
    with, hides the layer."""
    m = model("Llama-3.2-1B-Instruct")
    run = RunSpec(world_size=64, tp=2, pp=16, mbs=4, gbs=8, seq_length=32768)
    none = estimate(m, run).stages[7]
    full = estimate(m, run.with_(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1))
    assert none.layers == 1 and none.in_flight_microbatches == 1
    assert full.stages[7].activations == none.activations
    assert full.stages[-1].activations <= estimate(m, run).stages[-1].activations


def test_selective_recompute_of_a_one_layer_stage_keeps_what_no_recompute_keeps():
    """The layer in backward re-runs its checkpointed modules and holds their outputs again;
    with one layer and one micro-batch in flight that is everything the module would have
    kept. Unfused attention makes it large: the re-materialised score matrix."""
    m = model("Llama-3.2-1B-Instruct")
    run = RunSpec(world_size=64, tp=2, pp=16, mbs=1, gbs=2, seq_length=8192, attention_backend="unfused")
    none = estimate(m, run).stages[7]
    selective = estimate(m, run.with_(recompute_granularity="selective")).stages[7]
    assert none.in_flight_microbatches == 1 and selective.activations == none.activations
    many = run.with_(gbs=32)  # 16 micro-batches: stage 0 keeps 16 layer sets, recomputes one
    saved = (
        estimate(m, many).stages[0].activations
        - estimate(m, many.with_(recompute_granularity="selective")).stages[0].activations
    )
    score_matrix = 1 * (32 / 2) * 8192 * 8192 * 2  # mbs x heads/TP x s x s x bf16 softmax
    assert saved == pytest.approx(15 * score_matrix, rel=0.01)


# ------------------------------------------------------------------ the planner
def plan_flags(folder: str, run: RunSpec, gpu: str) -> list[str]:
    words = ["--hf-config", str(DATA / folder / "config.json"), "--gpus", str(run.world_size)]
    for flag, value in (("--tp", run.tp), ("--pp", run.pp), ("--cp", run.cp), ("--ep", run.ep)):
        words += [flag, str(value)]
    if run.vpp:
        words += ["--vpp", str(run.vpp)]
    if run.etp:
        words += ["--etp", str(run.etp)]
    words += ["--mbs", str(run.mbs), "--gbs", str(run.gbs), "--seq-length", str(run.seq_length)]
    words += ["--sequence-parallel" if run.sequence_parallel else "--no-sequence-parallel"]
    words += ["--recompute", run.recompute_granularity or "none"]
    if run.recompute_granularity == "full":
        words += [
            "--recompute-method",
            str(run.recompute_method),
            "--recompute-num-layers",
            str(run.recompute_num_layers),
        ]
    words += ["--dist-opt" if run.use_distributed_optimizer else "--no-dist-opt"]
    words += ["--peft", run.peft or "none", "--fp8", run.fp8 or "none", "--gpu", gpu, "--json", "--top", "50"]
    return words


def check_plan_document(doc: dict, gpu: str) -> list[str]:
    """What the JSON promises: the limit comes from the GPU, "fits" means under it, and the
    ladder only ever lowers the peak."""
    out = []
    usable, limit = usable_memory(lookup_gpu(gpu)), doc["limit_bytes"]
    if doc["gpu_memory_bytes"] != usable or not 0 < limit <= usable:
        out.append(f"limit {limit} / memory {doc['gpu_memory_bytes']} vs {gpu} usable {usable}")
    if doc["current"]["fits"] != (doc["current"]["peak_bytes"] <= limit):
        out.append("current.fits disagrees with its peak")
    # A recommendation taken from the ladder is only its first rung (documented: "the first
    # step to take"), not a plan that fits by itself; one taken from the table must fit.
    table_pick = [r for r in [doc["recommendation"]] if r is not None and r["source"] == "table"]
    for row in [*doc["ranked"], *doc["combined"], *table_pick]:
        if row["peak_bytes"] is None or row["peak_bytes"] > limit:
            out.append(f"row {row['change']!r} called fitting at {row['peak_bytes']} > {limit}")
    for row in doc["closest"]:
        if row["peak_bytes"] is not None and row["peak_bytes"] <= limit:
            out.append(f"closest {row['change']!r} is under the limit")
    lad = doc["ladder"]
    peaks = [lad["start_peak_bytes"], *(r["peak_bytes"] for r in lad["rungs"])]
    if any(b > a for a, b in pairwise(peaks)):
        out.append(f"ladder raises the peak: {peaks}")
    if lad["rungs"] and lad["final_peak_bytes"] != peaks[-1]:
        out.append("ladder final peak is not its last rung's")
    if lad["fits"] != (lad["final_peak_bytes"] <= limit):
        out.append(f"ladder fits={lad['fits']} at {lad['final_peak_bytes']} vs {limit}")
    out += [f"rung {r['step']} fits wrongly" for r in lad["rungs"] if r["fits"] != (r["peak_bytes"] <= limit)]
    return out


def check_plan_runs(m: ModelSpec, run: RunSpec, gpu: str) -> list[str]:
    """Every run the planner proposes is legal and its peak is the estimator's for that run."""
    usable = usable_memory(lookup_gpu(gpu))
    settings_ = pl.PlanSettings(gpu_memory_bytes=usable, headroom_bytes=usable // 10)
    out = []
    plan = pl.plan(m, run, settings_)
    proposed = [(e.candidate.title, e.candidate.run, e.peak_bytes, e.candidate.expandable) for e in plan.ranked]
    rungs = ld.climb(m, run, settings_).rungs
    # once the ladder sets expandable segments (rung 0), every later rung is estimated with it on
    climbed_expandable = bool(rungs) and rungs[0].expandable
    proposed += [(r.title, r.run, r.peak_bytes, climbed_expandable) for r in rungs]
    for title, changed, peak, expandable in proposed:
        problems = violations(m, changed)
        expected = device_peak_bytes(m, estimate(m, changed), expandable)
        if problems:
            out.append(f"{title!r} proposes an illegal run: {problems[0]}")
        elif peak != expected:
            out.append(f"{title!r} peak {peak} is not the estimate {expected}")
    return out


PLANNED = (  # (folder, layout index in its grid, GPU): dense, MoE with EP, hybrid, MLA + MTP
    ("Qwen3-32B", 0, "A100-40GB"),
    ("Qwen3-30B-A3B", 1, "H100-80GB"),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 0, "B200"),
)


@pytest.mark.parametrize("folder, index, gpu", PLANNED, ids=[p[0] for p in PLANNED])
def test_plan_memory_json_on_real_configs(folder: str, index: int, gpu: str):
    run = layouts(folder, index + 1)[index]
    result = invoke("plan_memory", *plan_flags(folder, run, gpu))
    assert result.exit_code == 0, result.stderr
    import json

    doc = json.loads(result.stdout)
    assert_valid("plan_memory", doc)
    assert check_plan_document(doc, gpu) == []
    assert check_plan_runs(model(folder), run, gpu) == []


@pytest.mark.slow
@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("folder", FOLDERS)
def test_plan_memory_on_every_real_config_and_gpu(folder: str, gpu: str):
    import json

    for run in layouts(folder, 3):
        result = invoke("plan_memory", *plan_flags(folder, run, gpu))
        assert result.exit_code in (0, 1), f"{describe(run)}: {result.stderr}"
        doc = json.loads(result.stdout)
        assert_valid("plan_memory", doc)
        assert check_plan_document(doc, gpu) == [], describe(run)
        assert check_plan_runs(model(folder), run, gpu) == [], describe(run)


def test_refused_configs_stay_refused():
    for folder in REFUSED:
        with pytest.raises(InputError, match="linear-attention"):
            read_hf_config(DATA / folder / "config.json")


def test_lora_adapters_exist_only_where_a_hybrid_layer_has_the_module():
    """Nemotron-H: 54 Mamba, 10 attention-only and 54 MLP-only layers. Bridge's default LoRA
    targets (linear_qkv, linear_proj, linear_fc1, linear_fc2) match no Mamba linear, only the
    attention pair in '*' layers and only the MLP pair in '-' layers. The estimate used to give
    every layer all four adapters: a Mamba layer kept 260 MiB of LoRA inputs (TP4, SP, seq
    8192) and SP looked like it raised activation memory by 0.9 GiB."""
    from memtune.estimate.estimator import layer_activations

    m = model("Nemotron-H-56B-Base-8K")
    run = RunSpec(world_size=8, tp=4, pp=2, seq_length=8192, sequence_parallel=True)
    lora = run.with_(peft="lora")
    assert layer_activations(m, lora, False, kind="M").stored == layer_activations(m, run, False, kind="M").stored
    gathered = 2 * 8192 * m.hidden_size  # one all-gathered bf16 LoRA-A input
    for kind in "*-":  # one column-parallel adapter each: linear_qkv or linear_fc1
        extra = layer_activations(m, lora, False, kind=kind).stored - layer_activations(m, run, False, kind=kind).stored
        assert extra == pytest.approx(gathered + 2 * (2 * 2 * 8192 * 32), rel=1e-9)
    kinds = m.layer_kinds()
    assert (kinds.count("M"), kinds.count("*"), kinds.count("-")) == (54, 10, 54)
    h, r, d, ffn = m.hidden_size, 32, m.head_dim, m.ffn
    qkv_out = (m.num_attention_heads + 2 * m.query_groups) * d
    attention = (h * r + r * qkv_out) + (m.num_attention_heads * d * r + r * h)
    mlp = (h * r + r * ffn * (2 if m.gated_linear_unit else 1)) + (ffn * r + r * h)
    one_gpu = estimate(m, RunSpec(world_size=1, peft="lora"))
    assert one_gpu.stages[0].gradients == 4 * (10 * attention + 54 * mlp)  # fp32 adapter grads
