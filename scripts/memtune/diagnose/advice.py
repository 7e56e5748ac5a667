"""What to do about one finding, given who printed it, which PyTorch, and what else it says.

The Failure Diagnosis row (SKILL.md) says what the kind means in general; this module
turns the evidence of the actual message into ranked actions that fit the user's stack
and release, notes the facts that change the reading (other processes on the GPU, a
CUDA-graph capture, a tiny GPU with nothing free, the offending allocator-config token),
and says how sure the call is.  Pure functions of frozen inputs, so each rule is tested
on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from memtune.diagnose import torch_era
from memtune.diagnose.evidence import Evidence
from memtune.diagnose.frameworks import Framework
from memtune.diagnose.parse import format_bytes
from memtune.diagnose.patterns import ALLOCATOR_KINDS
from memtune.diagnose.scan import Finding
from memtune.diagnose.torch_era import TorchRange

CONFIG_KINDS = frozenset(
    {
        "cpu-offload-pp",
        "nccl-ub-expandable",
        "cudagraph-nccl-register",
        "vpp-divisibility",
        "vpp-microbatches",
        "pp-divisibility",
        "alloc-conf-invalid",
        "alloc-conf-deprecated",
    }
)
LIBRARY_KINDS = frozenset({"cuda-runtime-oom", "nccl-oom", "cublas-oom"})
HOST_KINDS = frozenset({"host-oom"})  # the node's CPU RAM ran out: no GPU-side advice applies
XLA_KINDS = frozenset({"xla-oom"})  # JAX/XLA's own allocator: PyTorch's knobs do not apply

# JAX/XLA device memory, in the order to try them.  The variable names and the 75% default are
# JAX's own (docs.jax.dev, "GPU memory allocation"); newer JAX renamed the fraction variable
# XLA_CLIENT_MEM_FRACTION and still reads the old name.
XLA_ACTIONS = (
    "nvidia-smi first: XLA preallocates 75% of the GPU at the first JAX operation, so a second JAX process, or "
    "PyTorch/TensorFlow in the same program, leaves it less than it expects",
    "XLA_PYTHON_CLIENT_PREALLOCATE=false: allocate on demand instead of one preallocated pool (uses less when the "
    "program needs less, but fragments more)",
    "XLA_PYTHON_CLIENT_MEM_FRACTION=.XX (newer JAX: XLA_CLIENT_MEM_FRACTION) sets the preallocated share: lower it so "
    "several processes fit beside each other, raise it (e.g. .95) when one JAX process owns the GPU",
    "Then lower peak memory: smaller batch or sequence length, rematerialisation (jax.checkpoint), bf16, or shard "
    "parameters and activations over more devices",
    "To see where it goes: XLA_PYTHON_CLIENT_ALLOCATOR=platform (slow; frees memory as soon as it is unused) and "
    "jax.profiler.save_device_memory_profile",
    "TensorFlow rather than JAX: tf.config.experimental.set_memory_growth (TF_FORCE_GPU_ALLOW_GROWTH=true) takes "
    "the place of the XLA_PYTHON_CLIENT_* variables",
)

# Host-RAM cuts for a killed training process, most common cause first, with the Megatron-LM
# flag and the Megatron Bridge config field where one exists.
HOST_ACTIONS = (
    "Load checkpoints sharded, not whole per rank: the distributed format (--ckpt-format torch_dist; Bridge "
    "checkpoint.ckpt_format='torch_dist') reads only each rank's shard; a whole-file torch.load on every rank of a "
    "node multiplies the file by the ranks per node (torch.load(..., mmap=True) maps it instead); convert HF "
    "weights once, offline, on a node with more RAM",
    "Fewer dataloader workers: each is a process with its own copy of the dataset state (--num-workers; Bridge "
    "dataset.num_workers), and pinned prefetch buffers (dataset.pin_memory) add to it",
    "Drop CPU initialization: --use-cpu-initialization (Bridge model.use_cpu_initialization) builds every weight in "
    "host RAM before it moves to the GPU",
    "Keep less optimizer state in host RAM: lower --optimizer-offload-fraction (Bridge "
    "optimizer.optimizer_offload_fraction) or turn off --optimizer-cpu-offload (optimizer.optimizer_cpu_offload); "
    "offloaded state sits in pinned memory, which cannot be swapped",
    "Ask for more host memory per task, or put fewer ranks on a node: Slurm --mem / --mem-per-cpu, the pod's "
    "resources.limits.memory, for Ray more CPUs (fewer tasks) per node",
)

_SLEEP_MODE = re.compile(r"cumem_allocator|torch_memory_saver")
_CONF_TOKEN = re.compile(
    r"Unrecognized CachingAllocator option: ?(?P<a>\S*)"
    r"|Unrecognized key '(?P<b>[^']{0,80})' in CUDA allocator config"
    r"|Expected 'True' or 'False' at index \d+ in ConfigTokenizer but got '(?P<c>[^']{0,80})'"
    r"|Expected a single True/False argument for (?P<d>\S+)"
)


@dataclass(frozen=True)
class Note:
    code: str
    text: str


@dataclass(frozen=True)
class Verdict:
    """Everything the report adds to a finding beyond its table row."""

    actions: tuple[str, ...]
    notes: tuple[Note, ...]
    confidence: str  # high / medium / low
    confidence_why: str
    torch: dict[str, Any]
    near_capacity: bool = False


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def near_capacity(f: Finding, ev: Evidence) -> str | None:
    """Why a fragmentation call is also close to a real shortage (None: it is not)."""
    if f.kind != "fragmentation":
        return None
    req, idle, total = (f.numbers.get(k) for k in ("requested_bytes", "reserved_unallocated_bytes", "total_bytes"))
    reasons = []
    r = _ratio(idle, req)
    if r is not None and r < ev.idle_over_request_below:
        reasons.append(
            f"the idle reserve ({format_bytes(idle)}) only just covers the request ({format_bytes(req)}, {r:.2f}x)"
        )
    share = _ratio(req, total)
    if share is not None and share >= ev.request_share_of_gpu_at_least:
        reasons.append(f"the request is {share:.0%} of the whole GPU ({format_bytes(total)})")
    return "; ".join(reasons) or None


def allocator_fix(rng: TorchRange, status: str, fw: Framework, requested: int | None, hip: bool = False) -> str:
    """The fragmentation fix this PyTorch actually accepts (never expandable segments where
    the release rejects or ignores them).  ``hip``: a ROCm build, whose variable is
    PYTORCH_HIP_ALLOC_CONF."""
    var = "PYTORCH_HIP_ALLOC_CONF" if hip else "PYTORCH_CUDA_ALLOC_CONF"
    req = f" (the failed request was {format_bytes(requested)})" if requested else ""
    split = (
        f"{var}=max_split_size_mb:512 — cached blocks above 512 MB are then never split, so a large "
        "request is not starved by a big block cut into pieces; the cost is more cudaMalloc/cudaFree traffic (slower) "
        "and large free blocks that small requests can no longer use" + req
    )
    if status == torch_era.ACCEPTED or status == torch_era.UNKNOWN:
        fix = f"export {var}=expandable_segments:True before launch"
        if torch_era.alloc_conf_rename_applies(rng) is not False:
            fix += " (PyTorch >= 2.9: set PYTORCH_ALLOC_CONF to the same value too)"
        if status == torch_era.UNKNOWN:
            fix += "; needs PyTorch >= 2.1 — 1.10-2.0 reject it, older releases ignore the variable (pass --torch-version to check)"
        if fw.advice.expandable:
            fix += f"; on {fw.label}: {fw.advice.expandable}"
        return fix
    if status == torch_era.PLATFORM:
        return (
            "expandable segments are ignored here (the log says 'expandable_segments not supported on this platform': "
            "Windows, or a ROCm build without them); use " + split
        )
    if status == torch_era.REJECTED:
        straddles = torch_era.max_split_available(rng) is None
        why = (
            "1.10-2.0 raise 'Unrecognized CachingAllocator option', older releases ignore the variable"
            if straddles
            else "it raises 'Unrecognized CachingAllocator option'"
        )
        where = "on 1.10 or newer" if straddles else "on this release"
        return (
            f"this PyTorch ({rng.describe()}) does not take expandable_segments ({why}): upgrade to >= 2.1 "
            f"(>= {torch_era.split_combo_safe_from()} to combine it with max_split_size_mb), or {where} set " + split
        )
    return (
        f"this PyTorch ({rng.describe()}) reads no allocator settings (PYTORCH_CUDA_ALLOC_CONF arrived in 1.10): upgrade; "
        "meanwhile lower the peak (torch.cuda.empty_cache() adds nothing: the allocator frees its idle cached blocks "
        "and retries before it raises an OOM)"
    )


def _hip(f: Finding) -> bool:
    return "HIP out of memory" in f.evidence


def _conf_token_note(evidence: str) -> Note | None:
    m = _CONF_TOKEN.search(evidence)
    if not m:
        return None
    token = next((v for v in m.groupdict().values() if v is not None), "")
    if "=" in token:
        why = "key=value: PyTorch wants key:value (colon)"
    elif token.lower() in ("true", "false", "1", "0", "yes", "no"):
        why = "booleans are spelled True / False"
    elif len(token) <= 2:
        why = (
            "a fragment, not an option name: the value was split somewhere unexpected (quotes kept by Windows `set`, "
            "a stray space, comma or colon); write exactly expandable_segments:True"
        )
    else:
        why = "not an option this PyTorch knows: check the spelling, or the release that added it (check_env.py --torch-version)"
    return Note("alloc-conf-token", f"PyTorch stopped at {token!r}: {why}")


def evidence_notes(f: Finding, fw: Framework, ev: Evidence, near: str | None) -> list[Note]:
    notes: list[Note] = []
    d = f.details
    n_proc = d.get("other_processes", 0)
    if n_proc >= 2:
        notes.append(
            Note(
                "several-processes",
                f"{n_proc} processes hold {format_bytes(d.get('other_processes_bytes'))} on this GPU besides what PyTorch "
                "reports here: several ranks or programs are bound to one device. Check device binding: each rank must "
                "call torch.cuda.set_device(LOCAL_RANK) (or get its own CUDA_VISIBLE_DEVICES) before any CUDA work; "
                "nvidia-smi lists the PIDs",
            )
        )
    elif n_proc == 1:
        who = (
            "another process (a colocated engine, a data loader touching CUDA, a stray job)"
            if "this_process_bytes" in d
            else "a process that may be this one (in a container PIDs are namespaced, so PyTorch cannot tell)"
        )
        notes.append(Note("other-process", f"{who} holds {format_bytes(d.get('other_processes_bytes'))} on this GPU"))
    if d.get("allowed_bytes") is not None:
        notes.append(
            Note(
                "memory-fraction-cap",
                f"this process may use only {format_bytes(d['allowed_bytes'])} ('allowed'): a per-process memory fraction "
                "(torch.cuda.set_per_process_memory_fraction, or per_process_memory_fraction in the allocator config) caps "
                f"it while the GPU has {format_bytes(f.numbers.get('free_bytes'))} free; raise or remove the cap",
            )
        )
    pools = d.get("private_pools_bytes") or 0
    req_bytes, total_bytes = f.numbers.get("requested_bytes"), f.numbers.get("total_bytes")
    # graph pools matter when they could have served the request, or hold a real share of the GPU
    big_pools = pools and ((req_bytes and pools >= req_bytes) or (total_bytes and pools >= 0.1 * total_bytes))
    if "cuda-graph-capture" in f.hints or big_pools:
        held = f" ({format_bytes(pools)} already sit in private pools)" if pools else ""
        notes.append(
            Note(
                "cuda-graph-capture",
                "CUDA-graph memory is involved"
                + held
                + ": graph pools are private, the regular allocator cannot reuse "
                "them. Capture fewer or smaller graphs (vLLM --max-num-seqs / capture sizes, SGLang --cuda-graph-max-bs, "
                "Megatron --cuda-graph-scope), or run without graphs once (--enforce-eager, --disable-cuda-graph) to confirm",
            )
        )
    total, free = f.numbers.get("total_bytes"), f.numbers.get("free_bytes")
    alloc, idle = f.numbers.get("allocated_bytes"), f.numbers.get("reserved_unallocated_bytes")
    if free == 0 and total is not None and total <= ev.tiny_gpu_bytes:
        notes.append(
            Note(
                "tiny-gpu-full",
                f"0 bytes free on a {format_bytes(total)} GPU: the device is completely full — on a desktop card the display "
                "and other programs share it; close them, or this workload does not fit this GPU at this size",
            )
        )
    if alloc is not None and total is not None and alloc > total:
        notes.append(
            Note(
                "allocated-exceeds-gpu",
                f"PyTorch reports {format_bytes(alloc)} allocated on a {format_bytes(total)} GPU: the driver is spilling into "
                "shared system memory (Windows WDDM / WSL), which is very slow; treat the GPU size as the real limit",
            )
        )
    elif total and free is not None and alloc is not None and idle is not None:
        elsewhere = total - free - alloc - idle
        if elsewhere / total >= ev.held_elsewhere_share_at_least:
            notes.append(
                Note(
                    "held-outside-pytorch",
                    f"{format_bytes(elsewhere)} of the GPU is neither free nor held by this PyTorch allocator: other "
                    "processes, another library in the same process, or CUDA contexts (nvidia-smi shows which)",
                )
            )
    req = f.numbers.get("requested_bytes")
    if (
        f.kind in ("capacity", "fragmentation")
        and req is not None
        and free is not None
        and free >= req
        and d.get("allowed_bytes") is None
    ):
        # PyTorch reads the free figure (cudaMemGetInfo) when it writes the message, after the
        # failed cudaMalloc and its retry: more free than requested means the memory was gone
        # at the failure and back by the message, or a limit outside the allocator refused it.
        notes.append(
            Note(
                "free-exceeds-request",
                f"the message reports {format_bytes(free)} free, more than the {format_bytes(req)} requested: "
                "when PyTorch wrote it the GPU had room for this request, so something other than this model's "
                "own peak refused it — another process or rank using the same GPU at that moment (several jobs, "
                "a wrong device binding), or a limit of a GPU-sharing layer (MPS, vGPU, WSL). Check nvidia-smi and "
                "the device binding before cutting the model's memory",
            )
        )
    if f.kind == "capacity" and not near:
        share = _ratio(f.numbers.get("requested_bytes"), total)
        if share is not None and share >= 0.5:
            notes.append(
                Note(
                    "large-request",
                    f"one request is {share:.0%} of the GPU: check the size that drives it (sequence length, batch, "
                    "max-model-len, image resolution) before planning memory around it",
                )
            )
    if _SLEEP_MODE.search(f.evidence):
        notes.append(
            Note(
                "wake-up-remap",
                "raised while mapping memory back after sleep/offload (vLLM's cumem allocator or torch_memory_saver): "
                "whatever else uses the GPU meanwhile (the trainer in RL) had not released enough memory",
            )
        )
    if f.kind == "nccl-ub-expandable":
        notes.append(
            Note(
                "torch-2.11-lifts-guard",
                "Megatron-Core raises this only with PyTorch < 2.11 (the MemPool incompatibility); on 2.11 or newer the "
                "combination is accepted",
            )
        )
    if "expandable-unsupported" in f.hints:
        notes.append(
            Note(
                "expandable-unsupported",
                "the log says 'expandable_segments not supported on this platform': the setting is ignored here",
            )
        )
    if "async-backend" in f.hints and f.kind in ALLOCATOR_KINDS:
        notes.append(
            Note(
                "async-backend",
                "the cudaMallocAsync backend is in use: expandable_segments and max_split_size_mb do not apply to it",
            )
        )
    if near:
        notes.append(Note("near-capacity", "fragmentation, also near capacity: " + near))
    if f.kind == "alloc-conf-invalid":
        tok = _conf_token_note(f.evidence)
        if tok:
            notes.append(tok)
    if f.kind in HOST_KINDS or f.kind in XLA_KINDS:
        return notes  # the framework notes below send the reader to PyTorch / Megatron helpers
    if fw.name is None and f.kind not in CONFIG_KINDS:
        notes.append(
            Note(
                "framework-unknown",
                "the text names no training or serving stack: if this is a Megatron run, estimate_memory.py and "
                "plan_memory.py apply; otherwise the actions below are generic PyTorch ones",
            )
        )
    elif not fw.in_megatron and f.kind not in CONFIG_KINDS:
        notes.append(
            Note(
                "outside-megatron",
                f"outside Megatron ({fw.label}): estimate_memory.py and plan_memory.py model Megatron-Core runs only; "
                "the actions below are this stack's own knobs",
            )
        )
    return notes


def confidence(f: Finding, ev: Evidence, near: str | None) -> tuple[str, str]:
    if f.kind in CONFIG_KINDS:
        return "high", "the text is the guard's own message"
    if f.note_is_advice:
        return "high", "the engine's own start-up check, verbatim"
    if f.kind in HOST_KINDS:
        if f.signal_only:
            return (
                "medium",
                "only a SIGKILL (exit code -9 / 137, 'Killed') and no OOM-killer message: host memory is the usual "
                "cause, but a scheduler limit, a launcher teardown or a manual kill look the same; dmesg or sacct decides",
            )
        return "high", "the OOM killer's own report (kernel, Slurm cgroup, Ray memory monitor or container runtime)"
    if f.kind in XLA_KINDS:
        return "high", "XLA's own allocator status: the request did not fit the device memory XLA could use"
    if f.kind == "unrecognized-gpu-memory-error":
        return "low", "a GPU memory failure in a wording no rule knows; the full log would name the failing call"
    if f.note and "undecided" in f.note:
        return "low", "the message lacks the numbers that separate fragmentation from capacity"
    if f.numbers.get("reserved_unallocated_max_bytes") is not None:
        return "medium", "the reserved figure is cut off; the range it still allows decides the kind"
    if f.kind in LIBRARY_KINDS:
        return (
            "medium",
            "a driver- or library-level failure: the message carries no allocator numbers, the cause is read from context",
        )
    req, idle = f.numbers.get("requested_bytes"), f.numbers.get("reserved_unallocated_bytes")
    if f.kind == "impossible-request":
        return "high", "the single request exceeds the whole GPU"
    r = _ratio(idle, req)
    if f.kind == "fragmentation":
        if near:
            return "medium", "fragmentation by the numbers, but close to a real shortage: " + near
        return "high", f"the idle reserve is {r:.1f}x the failed request" if r is not None else "numbers complete"
    if f.kind == "capacity" and r is not None:
        if r >= 0.8:
            return "medium", f"the idle reserve is {r:.0%} of the request: close to the fragmentation line"
        free = f.numbers.get("free_bytes")
        if free is not None and idle is not None and req is not None and free + idle >= req:
            # Expandable segments map and unmap memory in pages, so free memory and the idle
            # reserve together can back one request that neither holds alone.
            return (
                "medium",
                f"the idle reserve covers only {r:.0%} of the request, but free memory ({format_bytes(free)}) and "
                f"the idle reserve ({format_bytes(idle)}) together exceed it: with expandable segments this one "
                "allocation might be served, leaving the card at its limit",
            )
        return "high", f"the idle reserve covers only {r:.0%} of the request"
    return "medium", "numbers incomplete"


def actions(f: Finding, fw: Framework, rng: TorchRange, status: str, near: str | None, kind_fix_step: str) -> list[str]:
    """Ranked: what to do first is first."""
    out: list[str] = []
    d = f.details
    if d.get("other_processes", 0) >= 2:
        out.append("Check device binding first: several processes share this GPU (see the note); one rank per GPU")
    if d.get("allowed_bytes") is not None:
        out.append(
            "Raise or remove the per-process memory fraction first: the process hit its own cap, not the GPU's size"
        )
    if "cuda-graph-capture" in f.hints and f.kind not in CONFIG_KINDS:
        out.append(
            "It failed while capturing CUDA graphs: capture fewer/smaller graphs or run once without them to confirm "
            "(see the cuda-graph-capture note)"
        )
    cap = list(fw.advice.capacity)
    if fw.in_megatron:
        cap = [kind_fix_step]
    if f.kind == "fragmentation":
        out.append(allocator_fix(rng, status, fw, f.numbers.get("requested_bytes"), _hip(f)))
        if near:
            out.append(
                "Also near capacity — if the run still fails, lower peak memory: " + cap[0][:1].lower() + cap[0][1:]
            )
    elif f.kind == "capacity":
        if f.note_is_advice and f.note:
            out.append(f.note)  # the engine's own check: its knob and direction, not the generic list
        elif f.note and "cudaMallocAsync" in f.note:
            out.extend(cap)
        else:
            out.extend(cap)
            if f.note and "undecided" in f.note and status in (torch_era.ACCEPTED, torch_era.UNKNOWN):
                out.insert(
                    0,
                    "Numbers incomplete: try "
                    + allocator_fix(rng, status, fw, f.numbers.get("requested_bytes"), _hip(f))
                    + " first; if it still fails it is capacity",
                )
    elif f.kind == "impossible-request":
        out.append(
            "Find the tensor: a shape bug or an unsharded logits/attention buffer; no allocator setting or memory plan helps"
        )
    elif f.kind == "nccl-oom":
        out.extend(fw.advice.nccl or cap[:1])
    elif f.kind in ("cuda-runtime-oom", "cublas-oom"):
        out.extend(fw.advice.runtime)
        out.append(cap[0])
    elif f.kind in HOST_KINDS:
        out.extend(HOST_ACTIONS)
    elif f.kind in XLA_KINDS:
        out.extend(XLA_ACTIONS)
    elif f.kind == "unrecognized-gpu-memory-error":
        out.append(
            "Run diagnose.py on the full log (not an excerpt): the lines before this one name the failing call and the stack"
        )
        out.append("nvidia-smi: which processes hold the GPU and its real size")
        out.append(cap[0])
    return list(dict.fromkeys(out))


def judge(f: Finding, fw: Framework, ev: Evidence, rng: TorchRange, kind_fix_step: str) -> Verdict:
    status = torch_era.expandable_status(rng, "expandable-unsupported" in f.hints)
    near = near_capacity(f, ev)
    level, why = confidence(f, ev, near)
    return Verdict(
        actions=tuple(actions(f, fw, rng, status, near, kind_fix_step)),
        notes=tuple(evidence_notes(f, fw, ev, near)),
        confidence=level,
        confidence_why=why,
        torch=torch_era.as_json(rng, status),
        near_capacity=near is not None,
    )
