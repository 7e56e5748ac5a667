"""Relative throughput cost of a configuration change, with the evidence behind it.

A memory fix is only useful if the job still runs fast, and the options differ by an
order of magnitude (expandable segments: free; TP 4->8 on Llama3-70B: -28%). The
planner therefore models one training step's time on a GPU as the compute time times
one factor per overhead (TP collectives, pipeline p2p and bubble, recompute, small
GEMMs, CP/EP communication, CPU offload traffic, optimizer sharding) and reports
``T(current) / T(candidate) - 1``.

The numbers come from ``data/throughput_costs.yaml``: measured values where the seed
measured them, otherwise a first-principles formula whose single coefficient is solved
from a measured anchor (so the model reproduces that measurement exactly), otherwise a
stated first-principles or assumed figure. Every result carries the evidence lines for
the factors that changed, so a reader can see which number is measured and which is a
model. Only the standard library is imported at module level (yaml is loaded lazily).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from memtune.files.data_yaml import load_data_mapping
from memtune.files.paths import DATA_DIR
from memtune.spec import model_spec as ms
from memtune.spec.run_spec import RunSpec, fsdp_gathers_params, optimizer_sharded

COSTS_FILE: Path = DATA_DIR / "throughput_costs.yaml"


# ------------------------------------------------------------------ FLOPs of a model
@dataclass(frozen=True)
class LayerFlops:
    """Forward cost of the decoder per token, by recomputable module.

    Values are FLOPs (or FLOP-equivalents for memory-bound modules: bytes moved times
    FLOP rate / HBM bandwidth) summed over all decoder layers, so that shares of the
    whole step can be read off directly.
    """

    by_module: Mapping[str, float]
    layers_total: float  # all decoder layers, forward, per token
    moe_layers_total: float  # the MoE layers' share of layers_total
    logits: float  # output layer forward per token
    num_layers: int
    num_moe_layers: int

    @property
    def total(self) -> float:
        return self.layers_total + self.logits

    @property
    def per_layer(self) -> float:
        return self.layers_total / max(1, self.num_layers)

    @property
    def per_moe_layer(self) -> float:
        return self.moe_layers_total / max(1, self.num_moe_layers)


def _mlp_weights(h: int, ffn: int, gated: bool) -> int:
    return h * ffn * (2 if gated else 1) + ffn * h


def layer_flops(m: ms.ModelSpec, seq: int, flops_rate: float, hbm: float) -> LayerFlops:
    """Forward FLOPs per token of ``m`` at sequence length ``seq`` (causal attention)."""
    h, a = m.hidden_size, m.num_attention_heads
    bytes_to_flops = flops_rate / hbm  # a memory-bound byte costs this many FLOP-equivalents
    attn_sharded, _ = ms.attention_params(m)
    if m.multi_latent_attention:
        d_qk, d_v = m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
        up = m.kv_lora_rank * a * (m.qk_head_dim + m.v_head_dim)
        if m.q_lora_rank:
            up += m.q_lora_rank * a * d_qk
    else:
        d_qk = d_v = m.head_dim
        up = 0
    # causal attention: half of QK^T (2*s*a*d_qk) and of AV (2*s*a*d_v) per token
    core_attn = seq * a * (d_qk + d_v)
    attn_linear = 2.0 * attn_sharded
    norms = 2 * (2 * h * 2) * bytes_to_flops  # two norms, read + write h bf16 values
    mods: dict[str, float] = {
        "core_attn": 0.0,
        "attn_linear": 0.0,
        "mla_up_proj": 0.0,
        "layernorm": 0.0,
        "mlp": 0.0,
        "moe": 0.0,
        "moe_act": 0.0,
        "shared_experts": 0.0,
    }
    pattern = m.moe_layers()
    moe_total = 0.0
    for is_moe in pattern:
        mods["core_attn"] += core_attn
        mods["attn_linear"] += attn_linear
        mods["mla_up_proj"] += 2.0 * up
        mods["layernorm"] += norms
        if not is_moe:
            mods["mlp"] += 2.0 * _mlp_weights(h, m.ffn, m.gated_linear_unit)
            continue
        topk = min(m.moe_router_topk, m.num_moe_experts or 1)
        routed = 2.0 * topk * _mlp_weights(h, m.expert_ffn, m.gated_linear_unit)
        shared = 0.0
        if m.moe_shared_expert_intermediate_size:
            shared = 2.0 * _mlp_weights(h, m.moe_shared_expert_intermediate_size, m.gated_linear_unit)
        router = 2.0 * h * (m.num_moe_experts or 0)
        act_bytes = topk * m.expert_ffn * (3 if m.gated_linear_unit else 2) * 2
        mods["moe"] += routed + shared + router
        mods["shared_experts"] += shared
        mods["moe_act"] += act_bytes * bytes_to_flops
        moe_total += core_attn + attn_linear + routed + shared + router
    layers_total = mods["core_attn"] + mods["attn_linear"] + mods["mlp"] + mods["moe"]
    logits = 2.0 * h * m.vocab_size
    return LayerFlops(
        by_module=mods,
        layers_total=layers_total,
        moe_layers_total=moe_total,
        logits=logits,
        num_layers=m.num_layers,
        num_moe_layers=sum(pattern),
    )


# ------------------------------------------------------------------ the cost data
@dataclass(frozen=True)
class CostTable:
    """``throughput_costs.yaml`` plus the coefficients solved from its anchors."""

    raw: Mapping[str, Any]
    coefficients: Mapping[str, float] = field(default_factory=dict)
    regather_slope: float = 0.0
    # (factor, model, measured baseline, measured candidate, measured change) per anchor
    anchors: tuple[tuple[str, ms.ModelSpec, RunSpec, RunSpec, float], ...] = ()

    def hw(self, name: str) -> float:
        return float(self.raw["hardware"][name]["value"])

    def factor(self, name: str) -> Mapping[str, Any]:
        entry = self.raw["factors"][name]
        if not isinstance(entry, Mapping):
            raise ValueError(f"{COSTS_FILE.name}: factors.{name} is not a mapping")
        return entry


def run_from_mapping(values: Mapping[str, Any]) -> RunSpec:
    """A RunSpec from a YAML mapping of its field names (lists become tuples)."""
    # values are YAML scalars, checked by RunSpec's own validation where it is used
    data: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    return RunSpec(**data)


def anchor_workload(raw: Mapping[str, Any], name: str) -> tuple[ms.ModelSpec, RunSpec]:
    spec = raw["workloads"][name]
    return ms.model_from_mapping(spec["model"]), run_from_mapping(spec["run"])


def anchor_change(raw: Mapping[str, Any], factor: str) -> tuple[ms.ModelSpec, RunSpec, RunSpec, float]:
    """(model, measured baseline, measured candidate, measured change) of a factor's anchor."""
    anchor = raw["factors"][factor]["anchor"]
    model, base = anchor_workload(raw, anchor["workload"])
    change = dict(anchor["change"])
    if "recompute_modules" in change:
        change["recompute_modules"] = tuple(change["recompute_modules"])
    return model, base, base.with_(**change), float(anchor["measured"])


def _solve(measured: float, other_ratio: float, x_base: float, x_cand: float) -> float:
    """Coefficient ``a`` with other_ratio * (1 + a*x_base) / (1 + a*x_cand) = 1 + measured."""
    q = (1.0 + measured) / other_ratio
    denominator = x_base - q * x_cand
    if abs(denominator) < 1e-15:
        raise ValueError("anchor does not constrain its coefficient")
    return (q - 1.0) / denominator


CALIBRATED = (("tensor_parallel", "tp"), ("pipeline_parallel", "pp"), ("activation_recompute", "recompute"))


def build_table(raw: Mapping[str, Any]) -> CostTable:
    """Solve every calibrated coefficient from its anchor and fit the re-gather slope."""
    table = CostTable(raw=raw, coefficients={"tp": 1.0, "pp": 1.0, "recompute": 1.0})
    coefficients: dict[str, float] = {}
    for factor, term in CALIBRATED:
        model, base, cand, measured = anchor_change(raw, factor)
        tb = step_terms(model, base, table)
        tc = step_terms(model, cand, table)
        other = 1.0
        for name in tb:
            if name != term:
                other *= (1.0 + tb[name]) / (1.0 + tc[name])
        # terms are linear in their coefficient (1.0 while solving), so x = term value
        coefficients[term] = _solve(measured, other, tb[term], tc[term])
    points = raw["factors"]["lora_regather"]["points"]
    sxy = sum(float(p["saved_fraction"]) * float(p["change"]) for p in points)
    sxx = sum(float(p["saved_fraction"]) ** 2 for p in points)
    anchors = tuple((factor, *anchor_change(raw, factor)) for factor, _ in CALIBRATED)
    return CostTable(raw=raw, coefficients=coefficients, regather_slope=sxy / sxx if sxx else 0.0, anchors=anchors)


@lru_cache(maxsize=4)
def load_costs(path: str | None = None) -> CostTable:
    return build_table(load_data_mapping(Path(path) if path else COSTS_FILE))


# ------------------------------------------------------------------ the step-time model
@lru_cache(maxsize=256)
def _flops_cached(m: ms.ModelSpec, seq: int, rate: float, hbm: float) -> LayerFlops:
    return layer_flops(m, seq, rate, hbm)


def recompute_set(run: RunSpec) -> frozenset[str]:
    """The selectively recomputed modules (RunSpec keeps a default list even when off)."""
    return frozenset(run.recompute_modules) if run.recompute_granularity == "selective" else frozenset()


def recompute_flops(f: LayerFlops, k: RunSpec) -> float:
    """Forward FLOPs per token that the recompute setting runs a second time."""
    if k.recompute_granularity == "full":
        per_chunk = f.num_layers / max(1, k.pp * k.vpp_chunks)
        n = k.recompute_num_layers or 1
        if (k.recompute_method or "uniform") == "uniform":
            share = 1.0  # every layer's input is kept, every layer is re-run
        else:
            share = min(1.0, n / per_chunk) if per_chunk else 1.0
        return share * f.layers_total
    modules = recompute_set(k)
    if "moe" in modules:
        modules = modules - {"moe_act"}  # recomputing the whole MoE block includes its activation
    return sum(f.by_module.get(module, 0.0) for module in modules)


def step_passes(k: RunSpec) -> float:
    """A training step's compute in units of the forward pass.

    Full training runs the forward, the backward for the inputs (as large as the forward)
    and the backward for the weights (as large again): 3x. With LoRA/DoRA the base weights
    are frozen, so their weight-gradient GEMMs are never run and the step is ~2x the forward
    (the adapters' own weight gradients are rank-r, a fraction of a percent). Every term that
    compares extra work with the step's compute uses this, so recomputing a module under LoRA
    costs half as much again as in full training.
    """
    return 2.0 if k.peft in ("lora", "dora") else 3.0


def step_terms(m: ms.ModelSpec, k: RunSpec, table: CostTable) -> dict[str, float]:
    """Each overhead as a fraction of the GPU's compute time (see the YAML's formulas)."""
    rate = table.hw("achieved_flops_per_gpu")
    nvlink, ib = table.hw("nvlink_bytes_per_s"), table.hw("inter_node_bytes_per_s")
    per_node = int(table.hw("gpus_per_node"))
    f = _flops_cached(m, k.seq_length, rate, table.hw("hbm_bytes_per_s"))
    c = table.coefficients
    h = m.hidden_size
    terms: dict[str, float] = {}
    tp_bw_ratio = nvlink / ib if k.tp > per_node else 1.0
    terms["tp"] = c.get("tp", 1.0) * (k.tp - 1) * h / f.per_layer * tp_bw_ratio
    pipelined = k.pp > 1
    terms["pp"] = c.get("pp", 1.0) * k.pp * k.vpp_chunks * h / (f.per_layer * f.num_layers) if pipelined else 0.0
    m_batches = k.num_microbatches or 1
    terms["bubble"] = (k.pp - 1) / (k.vpp_chunks * m_batches) if pipelined else 0.0
    passes = step_passes(k)
    terms["recompute"] = c.get("recompute", 1.0) * recompute_flops(f, k) / (passes * f.total)
    tokens = k.seq_length * k.mbs / max(1, k.cp)
    terms["gemm"] = float(table.factor("gemm_size")["tokens_overhead"]) / max(1.0, tokens)
    if k.cp > 1:
        cp_f = table.factor("context_parallel")
        if m.multi_latent_attention:
            kv, dims = m.num_attention_heads, m.qk_head_dim + m.qk_pos_emb_head_dim + m.v_head_dim
        else:
            kv, dims = m.query_groups, 2 * m.head_dim
        bw = nvlink if k.tp * k.cp <= per_node else ib
        terms["cp"] = (1 - float(cp_f["overlap"])) * 2 * kv * dims * (k.cp - 1) * rate / (f.per_layer * bw)
    else:
        terms["cp"] = 0.0
    terms["ep"] = expert_comm(m, k, table, f)
    if k.cpu_offloading:
        off = table.factor("cpu_offloading")
        layers = min(k.cpu_offloading_num_layers or 1, f.num_layers) / f.num_layers
        terms["offload"] = (
            layers
            * (1 - float(off["overlap"]))
            * 2
            * 34
            * h
            * rate
            / (passes * f.per_layer * table.hw("pcie_bytes_per_s"))
        )
    else:
        terms["offload"] = 0.0
    optimizer = 0.0
    if optimizer_sharded(k):
        cost = -float(table.factor("distributed_optimizer")["value"])
        optimizer = cost / (1 - cost)
    terms["optimizer"] = optimizer
    terms["fsdp"] = fsdp_exposed(m, k, table, f) if fsdp_gathers_params(k) else 0.0
    return terms


def expert_comm(m: ms.ModelSpec, k: RunSpec, table: CostTable, f: LayerFlops) -> float:
    """MoE token traffic (EP all-to-all, ETP gather/scatter) as a fraction of the step's compute.

    Per MoE layer every GPU sends each token it owns (seq x mbs / (TP x CP) under SP) to its
    top-k experts and takes the results back: dispatch + combine, forward and backward, 4 x
    topk x hidden bf16 values. Only the share bound for *other* EP ranks moves, and it does
    not all move over the same wire: Megatron lays an EP group out on EP x ETP consecutive
    ranks (ETP innermost), so ``min(EP, gpus_per_node / ETP)`` members share a node and talk
    over NVLink while the rest go over InfiniBand, both at once (the slower part sets the
    time). Pricing all of it at InfiniBand as soon as EP x ETP leaves the node (7/8 of the
    bytes for EP 8 x ETP 2 on two nodes, where 4/8 really cross) made ETP 2->1 look like a
    +114% win on Qwen3-30B-A3B (TP 2, seq 8192).

    ETP > 1 adds an all-gather of the routed tokens over the ETP group before the expert
    GEMMs and a reduce-scatter after them (forward and backward): (ETP - 1) x the routed
    bytes over NVLink.
    """
    if not f.num_moe_layers or (k.ep <= 1 and k.expert_tp <= 1):
        return 0.0
    spec = table.factor("expert_parallel")
    rate, nvlink, ib = (
        table.hw("achieved_flops_per_gpu"),
        table.hw("nvlink_bytes_per_s"),
        table.hw("inter_node_bytes_per_s"),
    )
    per_node = int(table.hw("gpus_per_node"))
    topk = min(m.moe_router_topk, m.num_moe_experts or 1)
    routed = 4 * topk * m.hidden_size * 2  # bytes per owned token per MoE layer
    etp = max(1, k.expert_tp)
    on_node = max(1, min(k.ep, per_node // etp))
    intra, inter = (on_node - 1) / k.ep, (k.ep - on_node) / k.ep
    seconds = max(routed * intra / nvlink, routed * inter / ib)
    seconds += routed * (etp - 1) / nvlink
    compute = step_passes(k) * f.total / rate  # seconds of compute per token for the whole model
    return (1 - float(spec["overlap"])) * f.num_moe_layers * seconds / compute


def _fsdp_unknown(base: RunSpec, cand: RunSpec, tb: dict[str, float], tc_: dict[str, float]) -> str:
    """Why switching to Megatron-FSDP has no number ('' when it has one or is not switched on).

    The model only prices the parameter traffic that compute cannot hide; when it says
    "fully hidden" the change still costs something nobody measured (the seed lists it as
    'Varies', Megatron Bridge's FSDP guide as medium-high communication overhead)."""
    if not fsdp_gathers_params(cand) or fsdp_gathers_params(base) or tc_.get("fsdp", 0.0) > 1e-12:
        return ""
    caveats = [
        "per-micro-batch parameter all-gathers modelled as hidden behind compute, never measured "
        "(seed: 'Varies'); no published Megatron-FSDP vs distributed-optimizer throughput figure "
        "(the published one is vs PyTorch FSDP2), so it ranks after every priced change"
    ]
    if cand.tp > 1 or cand.cp > 1:
        caveats.append(
            "with TP/CP > 1 scripts often export CUDA_DEVICE_MAX_CONNECTIONS=1, which Megatron-FSDP "
            "refuses at start-up (Megatron-LM and Megatron Bridge assert it is not 1): unset it"
        )
    if cand.pp > 1:
        caveats.append("with PP > 1 Megatron Bridge calls the combination code-supported, not benchmark-proven")
    return "Megatron-FSDP unknown: " + "; ".join(caveats)


def fsdp_exposed(m: ms.ModelSpec, k: RunSpec, table: CostTable, f: LayerFlops) -> float:
    """Megatron-FSDP parameter traffic per micro-batch beyond what compute can hide."""
    if k.dp * k.cp <= 1:
        return 0.0
    dense, expert = _param_split(m)
    experts = m.num_moe_experts or 1
    topk = min(m.moe_router_topk, experts) if m.is_moe else 0
    held = dense / k.tp + expert / (k.ep * k.expert_tp)
    active = dense / k.tp + topk * expert / experts / k.expert_tp
    tokens = k.seq_length * k.mbs / max(1, k.cp)
    per_node = int(table.hw("gpus_per_node"))
    bw = table.hw("nvlink_bytes_per_s") if k.tp * k.cp * k.dp <= per_node else table.hw("inter_node_bytes_per_s")
    ratio = held * table.hw("achieved_flops_per_gpu") / (tokens * active * bw) * (k.dp * k.cp - 1) / (k.dp * k.cp)
    return max(0.0, ratio - 1.0)


@lru_cache(maxsize=64)
def _param_split(m: ms.ModelSpec) -> tuple[float, float]:
    """(non-expert, routed-expert) decoder parameters."""
    dense_layer = ms.layer_params(m, False)
    moe_layer = ms.layer_params(m, True) if m.is_moe else dense_layer
    pattern = m.moe_layers()
    n_moe = sum(pattern)
    n_dense = len(pattern) - n_moe
    dense = n_dense * (dense_layer.dense + dense_layer.replicated) + n_moe * (moe_layer.dense + moe_layer.replicated)
    return float(dense), float(n_moe * moe_layer.expert)


def step_time(m: ms.ModelSpec, k: RunSpec, table: CostTable) -> float:
    """Step time relative to pure compute (1.0 = no overhead at all)."""
    t = 1.0
    for value in step_terms(m, k, table).values():
        t *= 1.0 + value
    return t


# ------------------------------------------------------------------ the answer
@dataclass(frozen=True)
class Cost:
    """Estimated throughput change of a candidate and where the number comes from."""

    change: float  # e.g. -0.059 for 5.9% slower
    kind: str  # measured | calibrated | first-principles | assumption | unknown
    evidence: tuple[str, ...]  # one short line per factor that changed
    details: tuple[str, ...] = ()  # the formula / source behind each line

    @property
    def known(self) -> bool:
        """False when no evidence or model gives this change a size: ``change`` is then only
        a placeholder (0) and must be shown as "unknown", not as "+0.0%"."""
        return self.kind != UNKNOWN


TERM_FACTOR = {
    "tp": "tensor_parallel",
    "pp": "pipeline_parallel",
    "bubble": "pipeline_bubble",
    "recompute": "activation_recompute",
    "gemm": "gemm_size",
    "cp": "context_parallel",
    "ep": "expert_parallel",
    "offload": "cpu_offloading",
    "optimizer": "distributed_optimizer",
    "fsdp": "megatron_fsdp",
}
#: Evidence kinds, best first. ``unknown`` ranks after every kind with a number: among
#: equal changes a guess must not beat a measurement or a stated estimate.
UNKNOWN = "unknown"
KIND_ORDER = ("measured", "calibrated", "first-principles", "assumption", UNKNOWN)
#: The kinds that put a number on a change (the rest are guesses or nothing): only these can
#: rank one change as cheaper than another.
PRICED_KINDS = KIND_ORDER[:3]


#: Evidence too weak to price a change with. A weak term below NEGLIGIBLE is shown but does
#: not set the change's evidence kind: 0.5% is the half-width of the seed's own measured
#: distributed-optimizer range (1-2%), so even doubling such a term would not move the total
#: beyond what the measured evidence resolves (e.g. the assumed GEMM-size term of CP 1->2 at
#: 128K tokens is 0.2%).
WEAK_KINDS = ("assumption", UNKNOWN)
NEGLIGIBLE = 0.005

#: Terms whose *gains* no measurement in our sources confirms: a speed-up they predict (e.g.
#: EP 64->8, ETP 2->1 bringing the all-to-all into the node) is shown with its own factor's
#: kind (an assumption), so it never ranks as a confident win; their costs stay priced.
UNMEASURED_GAIN_TERMS = {"ep": "expert_parallel_gain"}


def pipeline_depth_note(m: ms.ModelSpec, base: RunSpec, cand: RunSpec, table: CostTable) -> str:
    """Why a deeper pipeline's price is an extrapolation ('' when it is inside the evidence).

    The pipeline terms are checked against pipelines of at least ``min_layers_per_stage``
    layers per stage and ``min_layers_per_chunk`` per virtual chunk (the YAML names them);
    thinner stages or chunks than the run already has, below those, have no measurement."""
    depth = table.factor("pipeline_depth")
    out = []
    per_stage, per_stage_base = m.num_layers / max(1, cand.pp), m.num_layers / max(1, base.pp)
    if cand.pp > 1 and per_stage < min(per_stage_base, float(depth["min_layers_per_stage"])):
        out.append(
            f"{per_stage:.2f} layers per stage (fewest measured or published: "
            f"{float(depth['min_layers_per_stage']):.1f})"
        )
    chunk = per_stage / cand.vpp_chunks
    chunk_base = per_stage_base / base.vpp_chunks
    if cand.pp > 1 and chunk < min(chunk_base, float(depth["min_layers_per_chunk"])):
        out.append(
            f"{chunk:.2f} layers per virtual chunk (fewest measured: {float(depth['min_layers_per_chunk']):.0f})"
        )
    if not out:
        return ""
    f = _flops_cached(m, cand.seq_length, table.hw("achieved_flops_per_gpu"), table.hw("hbm_bytes_per_s"))
    head = f.logits / f.per_layer  # the output layer in layer-equivalents, on the last stage
    if head >= 0.25 * per_stage:
        out.append(
            f"the output layer adds {head:.2f} layers' work to the last stage "
            f"({head / per_stage:.0%} of a stage) unless the split gives that stage fewer layers"
        )
    return (
        f"PP {cand.pp}"
        + (f" VPP {cand.vpp_chunks}" if cand.vpp_chunks > 1 else "")
        + ": "
        + "; ".join(out)
        + f" ({depth['kind']}: {depth['label']}): the pipeline price is an extrapolation"
    )


def gain_cap(table: CostTable) -> float:
    """The largest throughput gain one configuration change has been measured to give."""
    return float(table.factor("gain_cap")["value"])


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _matches_anchor(table: CostTable, m: ms.ModelSpec, base: RunSpec, cand: RunSpec) -> tuple[str, float] | None:
    """The measured (source, value) when this exact change on this exact workload was measured."""
    for factor, am, ab, ac, measured in table.anchors:
        same_model = all(
            getattr(am, f) == getattr(m, f)
            for f in ("num_layers", "hidden_size", "num_attention_heads", "query_groups", "ffn", "vocab_size", "is_moe")
        )
        if same_model and _same_run(ab, base) and _same_run(ac, cand):
            return str(table.factor(factor)["anchor"]["source"]), measured
    return None


RUN_KEYS = (
    "world_size",
    "tp",
    "pp",
    "vpp_chunks",
    "cp",
    "ep",
    "mbs",
    "global_batch",
    "seq_length",
    "recompute_granularity",
    "cpu_offloading",
    "use_megatron_fsdp",
    "use_distributed_optimizer",
)


def _same_run(a: RunSpec, b: RunSpec) -> bool:
    return all(getattr(a, key) == getattr(b, key) for key in RUN_KEYS) and recompute_set(a) == recompute_set(b)


def throughput_change(
    m: ms.ModelSpec,
    base: RunSpec,
    cand: RunSpec,
    table: CostTable,
    regather_saved_fraction: float | None = None,
    enables_expandable_segments: bool = False,
) -> Cost:
    """Relative throughput of ``cand`` vs ``base`` with one evidence line per changed factor."""
    evidence: list[str] = []
    details: list[str] = []
    kinds: list[str] = []
    weak: list[str] = []  # kinds of negligible weak terms (used only when nothing else is priced)
    extra = 1.0

    def note(name: str, factor: str, value: float) -> None:
        spec = table.factor(factor)
        if spec["kind"] in WEAK_KINDS and abs(value) < NEGLIGIBLE:
            # shown, but too small to move the total at the model's resolution: it does not
            # turn an otherwise priced change into an assumed one
            evidence.append(f"{name} {_pct(value)} ({spec['kind']}, negligible: {spec['label']})")
            details.append(f"{name}: {spec.get('formula', '')}")
            weak.append(str(spec["kind"]))
            return
        kinds.append(str(spec["kind"]))
        evidence.append(f"{name} {_pct(value)} ({spec['kind']}: {spec['label']})")
        how = spec.get("formula")
        source = spec["anchor"]["source"] if "anchor" in spec else spec.get("source", "")
        details.append(f"{name}: " + "; ".join(str(x) for x in (how, source) if x))

    if enables_expandable_segments:  # an environment setting, not part of the RunSpec
        note("expandable segments", "expandable_segments", float(table.factor("expandable_segments")["value"]))
    if cand.sequence_parallel_input_regather and not base.sequence_parallel_input_regather:
        points = table.factor("lora_regather")["points"]
        lo = min(float(p["change"]) for p in points)
        hi = max(float(p["change"]) for p in points)
        saved = regather_saved_fraction or 0.0
        value = min(hi, max(lo, table.regather_slope * saved))
        extra *= 1.0 + value
        note(f"LoRA re-gather ({table.regather_slope:.2f} x {saved * 100:.1f}% saved)", "lora_regather", value)
    if cand.sequence_parallel and not base.sequence_parallel and cand.tp > 1:
        note("sequence parallel", "sequence_parallel", float(table.factor("sequence_parallel")["value"]))
    anchor = _matches_anchor(table, m, base, cand)
    if anchor is not None:
        source, measured = anchor
        change = (1.0 + measured) * extra - 1.0
        return Cost(
            change=change,
            kind="measured",
            evidence=tuple([f"{_pct(measured)} measured ({source})"] + evidence),
            details=tuple(["this exact change was measured on this workload"] + details),
        )
    tb, tc_ = step_terms(m, base, table), step_terms(m, cand, table)
    ratio = extra
    for name in tb:
        if abs(tb[name] - tc_[name]) < 1e-12:
            continue
        term_ratio = (1.0 + tb[name]) / (1.0 + tc_[name])
        ratio *= term_ratio
        factor = TERM_FACTOR[name]
        if name in UNMEASURED_GAIN_TERMS and term_ratio - 1.0 >= NEGLIGIBLE:
            factor = UNMEASURED_GAIN_TERMS[name]  # a modelled speed-up nobody has measured
        note(name, factor, term_ratio - 1.0)
    depth_note = pipeline_depth_note(m, base, cand, table)
    if depth_note:
        evidence.append(depth_note)
        details.append(f"pipeline depth: {table.factor('pipeline_depth').get('source', '')}")
        kinds.append(str(table.factor("pipeline_depth")["kind"]))
    cap = gain_cap(table)
    if ratio - 1.0 > cap:
        spec = table.factor("gain_cap")
        evidence.append(
            f"modelled {_pct(ratio - 1.0)} is above the largest measured gain of one change "
            f"({_pct(cap)}, {spec['label']}): shown capped, unconfirmed"
        )
        details.append(f"gain cap: {spec.get('source', '')}")
        kinds.append(str(spec["kind"]))
        ratio = 1.0 + cap
    fsdp_unknown = _fsdp_unknown(base, cand, tb, tc_)
    if fsdp_unknown:
        evidence.append(fsdp_unknown)
        kinds.append(UNKNOWN)
        details.append("Megatron-FSDP: " + str(table.factor("megatron_fsdp").get("source", "")))
    if not evidence:
        evidence.append("unknown: none of the modelled cost factors changes, and this change was not measured")
        kinds.append(UNKNOWN)
    kind = max(kinds or weak, key=KIND_ORDER.index)
    return Cost(change=ratio - 1.0, kind=kind, evidence=tuple(evidence), details=tuple(details))
