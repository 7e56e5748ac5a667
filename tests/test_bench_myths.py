"""Myths: claims false in every task (evals/claims.yaml, ``everywhere: true``).

Each myth is held to two sentences written for this test, not taken from any answer set: one
that asserts it in fresh words (an answer saying it fails, whatever the task) and one that
denies or corrects it (passes). The loader must put every myth in every task's wrong claims.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from memtune.bench.dataset import load_claims, load_dataset, resolve_claim
from memtune.bench.grading import grade_answer

REPO = Path(__file__).resolve().parents[1]
LIBRARY = load_claims(REPO / "evals" / "claims.yaml")
MYTHS = sorted(name for name, body in LIBRARY.items() if body["everywhere"])

#: myth -> (asserts it, denies or corrects it)
SENTENCES = {
    "myth-distopt-costly-or-useless": (
        "Also switch off the distributed optimizer for more throughput.",
        "Keep the distributed optimizer: turning it off would add the full fp32 optimizer state per GPU.",
    ),
    "myth-nsys-knows-steps": (
        "Nsight Systems detects the training steps on its own, so wrap the launch in nsys.",
        "nsys has no idea what a training step is: add --profile --profile-step-start 10 --profile-step-end 12.",
    ),
    "myth-regather-coverage": (
        "With CUDA graphs on, the run still keeps the re-gather active.",
        "The re-gather covers linear_qkv and linear_fc1 only, never the row-parallel adapters.",
    ),
    "myth-oversize-request-fits": (
        "Turn on expandable segments: they can map host memory behind the GPU's address space.",
        "No allocator setting helps a request bigger than the card; make the tensor smaller.",
    ),
    "myth-slurm-one-task": (
        "Use --ntasks-per-node=1, the container launches the other workers itself.",
        "Set --ntasks-per-node=8, one task per GPU, because nothing else spawns the workers.",
    ),
    "myth-expandable-vs-graphs": (
        "CUDA graphs are incompatible with expandable segments, so pick one.",
        "Expandable segments work next to CUDA-graph private pools; only the NCCL registration guard matters.",
    ),
    "myth-autobridge-direction": (
        "Megatron Bridge can't read Hugging Face checkpoints, so convert them elsewhere.",
        "AutoBridge imports the Hugging Face checkpoint (import_ckpt) and exports back with export_ckpt.",
    ),
    "myth-precision-halves-all": (
        "Switching to bf16 halves everything, optimizer states included.",
        "bf16 halves the weights and activations, but the fp32 Adam state stays as large.",
    ),
    "myth-mbs-no-activations": (
        "Raise the micro-batch: activation memory only grows with the sequence length.",
        "Activations scale with micro-batch times sequence length; gradients and Adam do not.",
    ),
    "myth-nccl-graph-register-blackwell": (
        "Set NCCL_GRAPH_REGISTER=0 on the B200 nodes as well, since the guard trips on B200 too.",
        "The guard is for GPUs below compute capability 10, so the B200 jobs do not need it.",
    ),
    "myth-alloc-conf-merge": (
        "PyTorch merges the two variables, so either may hold the setting.",
        "PyTorch reads PYTORCH_ALLOC_CONF first; give both names the same value for Megatron's checks.",
    ),
    "myth-packing-no-mask": (
        "Keep a plain causal mask across the pack, the model learns the same.",
        "Pass cu_seqlens so no token attends across a sample boundary in the pack.",
    ),
    "myth-vpp-lowers-peak": (
        "The more virtual stages, the lower the activation peak per GPU.",
        "VPP shrinks the bubble; it does not lower the peak (VPP 10 measured 60.2 GB against 58.8 GB).",
    ),
    "myth-tp-splits-mask": (
        "Go to TP8 so the attention mask is split across the ranks.",
        "Every rank builds the whole mask whatever TP is, so shrink the sequence instead.",
    ),
    "myth-allocator-knob-for-fragmentation": (
        "Set roundup_power2_divisions:4, which eliminates fragmentation for good.",
        "roundup_power2_divisions only rounds sizes; expandable_segments:True is what lets blocks grow.",
    ),
    "myth-zero2-less-memory": (
        "Move to ZeRO-2 instead, it saves memory because no parameters are gathered.",
        "ZeRO-3 shards the parameters too, so going to ZeRO-2 would raise GPU memory.",
    ),
    "myth-drop-extra-state": (
        "Strip all _extra_state entries from the checkpoint and load again.",
        "Keep _extra_state (it holds the FP8 scales) and match the checkpoint format instead.",
    ),
    "myth-deeper-pp-smaller-bubble": (
        "A deeper pipeline reduces the bubble, so PP 8 is faster.",
        "At a fixed number of micro-batches a deeper pipeline has a bigger bubble.",
    ),
    "myth-estimate-includes-fragmentation": (
        "The estimate already accounts for fragmentation, so leave the allocator alone.",
        "The estimate cannot see fragmentation; set expandable segments as well.",
    ),
    "myth-empty-cache-fixes-leak": (
        "Call torch.cuda.empty_cache() after each step, that fixes the leak.",
        "empty_cache only hands back unused cached blocks; find what keeps the tensors alive.",
    ),
    "myth-nccl-buffsize-raise": (
        "Increase NCCL_BUFFSIZE to 16 MiB so NCCL stops running out of memory.",
        "Lower NCCL_BUFFSIZE or leave headroom: bigger buffers need more GPU memory.",
    ),
    "myth-estimate-scope": (
        "Keep in mind the estimate_memory.py figure excludes activations, so add some on top.",
        "The helper's peak already includes weights, gradients, optimizer state and activations.",
    ),
    "myth-trace-exit-codes": (
        "The gate needs a grep, because trace_regression.py always exits 0.",
        "trace_regression.py exits 1 on a regression and 2 on bad input, so CI can use its status.",
    ),
    "myth-alloc-conf-late": (
        "Add os.environ['PYTORCH_CUDA_ALLOC_CONF'] = 'expandable_segments:True' once the model is on the GPU.",
        "Export PYTORCH_CUDA_ALLOC_CONF in the job script; the allocator reads it before the first CUDA call.",
    ),
    "myth-distopt-shards-more": (
        "Turn on the distributed optimizer: the weights and gradients then get sharded across DP ranks.",
        "The distributed optimizer shards the fp32 main weights and the Adam moments over the DP ranks.",
    ),
    "myth-expandable-returns-memory": (
        "Expandable segments give back the reserved memory to the driver after every step.",
        "Expandable segments grow a segment in place; the reserve stays with the process.",
    ),
    "myth-bigger-microbatch-lower-peak": (
        "Doubling the micro-batch size lowers the peak because there are fewer chunks.",
        "Halve the micro-batch size: activations shrink with it, at a small throughput cost.",
    ),
    "myth-alloc-conf-in-config": (
        "Put it in the recipe as model.pytorch_cuda_alloc_conf so it travels with the config.",
        "It is an environment variable of the process, not a recipe key: export it in the sbatch script.",
    ),
    "myth-v100-no-expandable": (
        "Volta has no virtual memory management, so expandable segments cannot work on a V100.",
        "Expandable segments work on V100 as well; set them before launch like on any other GPU.",
    ),
    "myth-recompute-free": (
        "Full activation recompute is practically free on H100, so turn it on everywhere.",
        "Full recompute reruns every layer's forward, about a third more compute per step.",
    ),
    "myth-pinned-memory-saves-ram": (
        "Set pin_memory=True, which reduces host RAM use by the workers.",
        "Pinned memory is page-locked host RAM, so it adds to the pressure rather than relieving it.",
    ),
    "myth-distopt-off-for-speed": (
        "For better throughput, switch off the distributed optimizer and let DDP overlap the all-reduce.",
        "Keep the distributed optimizer on; overlap_grad_reduce and overlap_param_gather work with it.",
    ),
    "myth-vpp-more-bubble": (
        "More virtual stages widen the pipeline bubble, so VPP 10 is slower than VPP 5.",
        "Going from VPP 5 to VPP 10 shrinks the bubble but doubles the p2p sends; memory stays about the same.",
    ),
    "myth-distopt-one-gpu": (
        "Enable the distributed optimizer even on a single GPU: it halves the Adam state.",
        "With one GPU (DP=1) there is no data-parallel group to shard over, so the distributed optimizer saves nothing.",
    ),
    "myth-launch-blocking-step": (
        "Add CUDA_LAUNCH_BLOCKING=1 to the job's environment as well.",
        "Set CUDA_LAUNCH_BLOCKING=1 for one run to find the failing kernel, then take it out.",
    ),
    "myth-launch-blocking-memory": (
        "Export CUDA_LAUNCH_BLOCKING=1 so frees happen synchronously and blocks coalesce.",
        "CUDA_LAUNCH_BLOCKING=1 is a debugging switch that serialises kernel launches; leave it unset in training.",
    ),
    "myth-expandable-needs-split-size": (
        "Expandable segments need max_split_size_mb set as well, or the allocator ignores them.",
        "Expandable segments work on their own; max_split_size_mb is a different, older knob.",
    ),
    "myth-cuda-alloc-conf-ignored": (
        "From 2.9 on, PyTorch ignores PYTORCH_CUDA_ALLOC_CONF, so only the new name works.",
        "From 2.9 on, PYTORCH_ALLOC_CONF is read first and PYTORCH_CUDA_ALLOC_CONF is still honoured as an alias.",
    ),
    "myth-tp-overlap-without-sp": (
        "Switch sequence parallelism off before you turn on tp_comm_overlap.",
        "tp_comm_overlap needs sequence parallelism on, so keep sequence_parallel=True.",
    ),
    "myth-nccl-env-first-node": (
        "NCCL reads its settings on rank 0 and broadcasts the configuration, so set NCCL_NVLS_ENABLE=0 there.",
        "Set NCCL_NVLS_ENABLE=0 in the job environment so every rank on every node sees it.",
    ),
    "myth-recompute-modules-need-full": (
        "Use recompute_granularity: full, which is what makes Megatron honour recompute_modules.",
        "recompute_modules is read with recompute_granularity: selective; full recomputes whole layers.",
    ),
    "myth-more-workers-less-ram": (
        "Raise num_workers to 16: each worker then holds a smaller slice, which lowers host RAM.",
        "Lower num_workers: every worker is its own process with its own prefetch, so more workers use more RAM.",
    ),
    "myth-vllm-full-utilization": (
        "Start vLLM with --gpu-memory-utilization 1.0 so the KV cache gets the whole card.",
        "Keep --gpu-memory-utilization at 0.9 or lower so activations and CUDA graphs have room.",
    ),
    "myth-unlimited-all-gathers": (
        "Rate-limiting all-gathers is what causes the fragmentation, so lift the limit.",
        "Keep limit_all_gathers=True: it caps how many unsharded layers are in flight at once.",
    ),
    "myth-expandable-mechanism": (
        "Expandable segments costs about 10% throughput, so turn it off once the run is stable.",
        "Expandable segments cost about 0.8% here: the allocator grows one mapping instead of cutting new blocks.",
    ),
    "myth-moe-active-memory": (
        "Training memory of an MoE scales with the active parameters, so 3B active means a 3B footprint.",
        "Every expert's weights, gradients and Adam state live on some GPU, so an MoE's model state follows its total parameters.",
    ),
    "myth-tf32-saves-memory": (
        "Enable TF32 with allow_tf32 to reduce activation memory on Ampere.",
        "TF32 changes matmul precision and speed; tensors stay fp32 in memory.",
    ),
    "myth-visible-devices-spreads-model": (
        "Set CUDA_VISIBLE_DEVICES=0,1 and PyTorch distributes the layers over both cards automatically.",
        "CUDA_VISIBLE_DEVICES only chooses which GPUs the process sees; splitting the model needs TP, PP or FSDP.",
    ),
    "myth-fsdp-shards-activations": (
        "FSDP shards the activations across ranks, so add more GPUs to the FSDP group.",
        "FSDP shards parameters, gradients and optimizer state; activations stay per rank.",
    ),
    "myth-sp-without-tp": (
        "Enable sequence_parallel=True with TP=1 to split the activations.",
        "Sequence parallelism splits activations across the TP group, so it does nothing at TP 1.",
    ),
    "myth-vllm-utilization-meaning": (
        "--gpu-memory-utilization is the fraction of the card vLLM leaves free for others.",
        "--gpu-memory-utilization is the fraction of the card vLLM may use in total: weights, activations and KV cache.",
    ),
    "myth-global-batch-memory": (
        "Raise --global-batch-size to 8 to lower the peak.",
        "The global batch only sets the number of micro-batches per step; the peak follows the micro-batch.",
    ),
    "myth-disable-offload-lowers-gpu": (
        "Turn off CPU offload of the optimizer: that reduces GPU memory.",
        "Turning CPU offload off moves the optimizer state back onto the GPU, which raises GPU memory.",
    ),
    "myth-allocator-compacts": (
        "The caching allocator compacts the heap every few steps, so fragmentation clears itself.",
        "PyTorch never moves a live tensor; expandable segments avoid the gaps by growing one mapping instead.",
    ),
    "myth-module-loading-eager": (
        "Set CUDA_MODULE_LOADING=EAGER to shrink the CUDA context.",
        "CUDA_MODULE_LOADING=LAZY loads kernels on first use and keeps the context smaller than EAGER.",
    ),
    "myth-history-backfill": (
        "Call _record_memory_history() just before the dump; it backfills stacks for blocks allocated earlier.",
        "Call _record_memory_history() before building the model: allocations made earlier carry no stack.",
    ),
    "myth-adamw-less-state": (
        "Move from Adam to AdamW, which keeps half as much optimizer state.",
        "AdamW only changes how weight decay is applied; it keeps the same two moments as Adam.",
    ),
    "myth-untie-saves": (
        "Pass --untie-embeddings-and-output-weights to save memory on the embedding.",
        "Tying the embeddings shares one matrix; untying adds a second vocab x hidden weight.",
    ),
    "myth-recompute-model-state": (
        "Full recompute halves the weights and gradients on each GPU.",
        "Recompute trades compute for activation memory; the weights, gradients and Adam state stay the same.",
    ),
    "myth-sliding-window-caps": (
        "With a 4096 sliding window the attention activations are capped, so go to 32k tokens for free.",
        "A sliding window limits which keys each token attends to; the MLP and norm activations still grow with the sequence.",
    ),
    "myth-snapshot-pickle": (
        "Open it with pickle.load(f) and walk the segments.",
        "Read the snapshot as data with runtime_memory.py; unpickling a file runs whatever it carries.",
    ),
    "myth-caching-allocator-off": (
        "Export PYTORCH_NO_CUDA_MEMORY_CACHING=1 as well, so freed memory never sits idle in a cache.",
        "Leave PYTORCH_NO_CUDA_MEMORY_CACHING unset: with it every free is a synchronising cudaFree.",
    ),
    "myth-empty-cache-fix": (
        "Add a torch.cuda.empty_cache() after each backward pass so the next big block finds room.",
        "Call torch.cuda.empty_cache() before the first collective: NCCL allocates outside PyTorch's cache.",
    ),
    "myth-empty-cache-mechanism": (
        "empty_cache() hands the CUDA context's memory back to the driver as well.",
        "empty_cache() returns only unused cached blocks; the CUDA context stays as it is.",
    ),
    "myth-memory-fraction": (
        "Raise the cap with torch.cuda.set_per_process_memory_fraction(1.25) to borrow some host RAM.",
        "torch.cuda.set_per_process_memory_fraction(0.5) leaves half the card to a second process.",
    ),
    "myth-vocab-divisor-shrinks": (
        "Bump --make-vocab-size-divisible-by to 512 and the logits get smaller.",
        "A larger --make-vocab-size-divisible-by pads the vocabulary further, so the logits can only grow.",
    ),
}


def test_every_myth_has_its_sentences() -> None:
    assert MYTHS, "evals/claims.yaml has no everywhere claims"
    assert sorted(SENTENCES) == MYTHS


@pytest.mark.parametrize("name", MYTHS)
def test_a_myth_fails_the_answer_and_its_correction_does_not(name: str) -> None:
    asserts, corrects = SENTENCES[name]
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test")]}
    assert grade_answer(checks, asserts).content_score == 0.0, asserts
    assert grade_answer(checks, corrects).content_score == 1.0, corrects


def test_a_myth_stays_wrong_as_a_conditional_step() -> None:
    """A hedge ("if you want memory back, ...") defers a right action; it does not make a false
    statement true. A denial still spares the sentence."""
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test") for name in MYTHS]}
    conditional = "If the peak is tight, remove --use-distributed-optimizer to save a few GiB."
    assert grade_answer(checks, conditional).content_score == 0.0
    later = (
        "Later, when it is stable, turn off expandable segments, since expandable segments cost about 10% throughput."
    )
    assert grade_answer(checks, later).content_score == 0.0
    denied = "Do not remove --use-distributed-optimizer to get memory back: it would cost memory."
    assert grade_answer(checks, denied).content_score == 1.0


def test_every_task_carries_every_myth() -> None:
    dataset = load_dataset(REPO / "evals" / "evals.json")
    for case in dataset.cases:
        labels = {claim["label"] for claim in case.checks["wrong"]}
        assert set(MYTHS) <= labels, case.id


#: Right statements on the myths' own topics, written for this test: none may trip any myth.
NEAR_MISSES = (
    "runtime_memory.py reads the snapshot without pickle.load(), so nothing in the file runs.",
    "The distributed optimizer costs about 1-2% and shards the optimizer state over DP.",
    "Turning the distributed optimizer off would cost tens of GiB, so keep it.",
    "nsys only records what happens between cudaProfilerStart and Stop; Megatron's --profile-step-start sets those.",
    "Use --ntasks-per-node=8: one task per GPU; srun launches each worker.",
    "CUDA graphs keep their own private pools, and expandable segments still apply to the rest.",
    "bf16 halves the activations and the weight copies but not the fp32 optimizer state.",
    "B200 (compute capability 10) is exempt from the guard, so only the H100 jobs need NCCL_GRAPH_REGISTER=0.",
    "PyTorch 2.9 reads PYTORCH_ALLOC_CONF and falls back to PYTORCH_CUDA_ALLOC_CONF; it does not merge them.",
    "VPP shrinks the pipeline bubble; the more virtual stages, the more p2p communication.",
    "Lower NCCL_BUFFSIZE if NCCL runs out of memory at init; raising it makes buffers bigger.",
    "A deeper pipeline grows the bubble unless you add micro-batches.",
    "Export PYTORCH_CUDA_ALLOC_CONF before python starts; setting it after the model is on the GPU does nothing.",
    "The distributed optimizer shards only the fp32 main weights and Adam moments; the bf16 weights and gradients stay whole.",
    "A larger micro-batch raises the peak; a smaller one lowers it.",
    "Full recompute costs about 30% more compute; selective core_attn recompute is nearly free with flash attention.",
    "pin_memory=True speeds host-to-device copies but uses page-locked host RAM.",
    "Keep the distributed optimizer on; for better throughput, enable overlap_grad_reduce.",
    "Interleaving (VPP) shrinks the bubble; the price is more point-to-point traffic, not memory.",
    "At DP 8 the distributed optimizer cuts the Adam state to an eighth; at DP 1 it changes nothing.",
    "Set CUDA_LAUNCH_BLOCKING=1 only to find which kernel faulted; it slows training and does nothing for memory.",
    "max_split_size_mb and expandable segments are separate options; expandable segments alone fixes this.",
    "PYTORCH_CUDA_ALLOC_CONF still works on 2.9; PyTorch warns that the name is deprecated.",
    "tp_comm_overlap requires sequence_parallel=True and TP > 1.",
    "Export the NCCL variables in the sbatch script so every task on every node inherits them.",
    "Selective recompute with recompute_modules=[core_attn] is the cheap option; full recompute costs about a third more compute.",
    "Recompute the mlp only at the end: it saved about 3 GB but cost about 16% throughput.",
    "Fewer workers and a smaller prefetch_factor lower host RAM.",
    "The default --gpu-memory-utilization 0.9 leaves a tenth of the card for everything else.",
    "FSDP's limit_all_gathers=True keeps memory lower by rate-limiting all-gathers.",
    "Expandable segments have been in PyTorch since 2.1; on older releases use max_split_size_mb.",
    "With expandable segments, the allocator still caches blocks; it maps more physical memory into one segment.",
    "Switching from top-2 to top-1 routing halves the expert compute per token, not the expert weights.",
    "EP 2 halves the expert weights each GPU holds.",
    "TF32 is a compute mode; it saves time, not memory.",
    "CUDA_VISIBLE_DEVICES=0,1 exposes two GPUs; torchrun then starts one process per GPU.",
    "FSDP shards parameters and gradients; use activation checkpointing for activations.",
    "Keep sequence_parallel=True with TP 4: it splits the LayerNorm and dropout activations.",
    "Lower --gpu-memory-utilization to 0.8 to leave room for another process.",
    "Raising the global batch adds accumulation steps; memory per step stays the same.",
    "CPU offload lowers GPU memory at the cost of PCIe traffic.",
    "The allocator cannot defragment live memory; restart or use expandable segments.",
    "CUDA_MODULE_LOADING=LAZY is the default on recent CUDA and saves context memory.",
    "_record_memory_history() records only allocations made after the call.",
    "Adam and AdamW both keep two fp32 moments per parameter.",
    "Untying the embeddings adds a vocab x hidden matrix, so it costs memory.",
    "Recompute cuts activation memory; it leaves weights and gradients as they are.",
    "Gemma 3's sliding-window layers limit attention span; global layers still see the whole sequence.",
    # right statements a reviewer wrote against these myths (each once failed a draft of them)
    "If you open the snapshot with pickle.load(f), any code inside it runs, so use runtime_memory.py instead.",
    "If you keep a plain causal mask across the pack, tokens attend across samples, which is wrong.",
    "If you delete the _extra_state entries, FP8 scaling history is lost and the loss spikes.",
    "If you raise NCCL_BUFFSIZE to reduce memory, it has the opposite effect.",
    "Megatron turns sequence_parallel off automatically if you set sequence_parallel=True with TP=1.",
    "PyTorch 2.9 prefers PYTORCH_ALLOC_CONF and, if both are set, ignores PYTORCH_CUDA_ALLOC_CONF.",
    "With one GPU, the distributed optimizer saves no memory.",
    "Even with one GPU per node, the distributed optimizer shards across all data-parallel ranks.",
    "Switching from Adam to AdamW saves nothing; to halve optimizer state, use an 8-bit optimizer.",
    "Recompute shrinks activations while TP halves the weights per GPU.",
    "TF32 leaves tensors in fp32, whereas bf16 halves activation memory.",
    "Compared with interleaving, non-interleaved 1F1B has the bigger pipeline bubble.",
    "Doubling VPP halves the bubble, while raising PP increases the bubble.",
    "--untie-embeddings-and-output-weights removes the embedding all-reduce, which saves a little step time.",
    "Under pipeline parallelism, Megatron's tied word embeddings are stored twice, on the first and the last stage.",
    "limit_all_gathers=False lets more all-gather buffers be in flight, which raises the peak.",
    "Fewer experts per GPU cuts the expert weights each rank holds, which is what EP does.",
    "Slurm exports the submitting environment, so the other nodes inherit the variable automatically.",
    "gpu_memory_utilization=0.9 is a fraction of total memory: vLLM takes 90% and leaves free the remaining 10%.",
    "Turning off CPU offload raises GPU memory; disabling it reduces GPU memory headroom.",
    "Recording memory history after the model is built captures the tensors that already exist, but without stacks.",
    "Recomputing full layers is far from free, while selective core_attn recompute is almost free.",
    "pin_memory=True lets the copy that moves the batch to the GPU run asynchronously.",
    "Your config has recompute_granularity: full and recompute_modules: [mlp]; Megatron ignores the module list under full.",
    "ZeRO-R can partition activation checkpoints across ranks (partition_activations).",
    "Putting os.environ['PYTORCH_CUDA_ALLOC_CONF'] inside the training loop has no effect.",
)


@pytest.mark.parametrize("sentence", NEAR_MISSES)
def test_right_statements_on_a_myths_topic_pass(sentence: str) -> None:
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test") for name in MYTHS]}
    grade = grade_answer(checks, sentence)
    assert grade.content_score == 1.0, [c.detail for c in grade.checks if not c.passed]


#: Right statements on every myth's topic written blind (by a session that saw only each myth's id
#: and false claim, never a pattern), three per myth: the grader's false-fail rate on text it was
#: not tuned to. Graded once as written: 179 of 180 passed; the one miss ("... changes nothing for
#: the running allocator") was a denial the grader did not know, since added.
#: A later round (four new myths, two widened) added 18 more, three per myth, written
#: the same way: 14 of 18 passed as first graded. The four that failed described what a setting
#: does ("With PYTORCH_NO_CUDA_MEMORY_CACHING=1, every allocation goes straight to cudaMalloc"),
#: denied it with a verb the grader did not know ("does not lower") or kept the call for its real
#: use (empty_cache "when another process on the same GPU needs the memory"); the patterns now
#: need a recommendation and the denial verbs include lower/shrink/free/prevent/stop/remove.
#: The empty_cache myth was then split: a call recommended beside NCCL, cuBLAS or another process
#: is right (they allocate outside PyTorch's cache), its own myth says what the call releases. Six
#: more statements written the same way for the two passed as first graded.
BLIND_NEAR_MISSES = yaml.safe_load((REPO / "tests" / "data" / "grader-answers" / "myth_near_misses.yaml").read_text())


def test_blind_right_statements_cover_every_myth() -> None:
    assert set(BLIND_NEAR_MISSES) == set(MYTHS)


@pytest.mark.parametrize(
    "sentence", [s for name in sorted(BLIND_NEAR_MISSES) for s in BLIND_NEAR_MISSES[name]], ids=lambda s: s[:40]
)
def test_blind_right_statements_pass(sentence: str) -> None:
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test") for name in MYTHS]}
    grade = grade_answer(checks, sentence)
    assert grade.content_score == 1.0, [c.detail for c in grade.checks if not c.passed]


#: Sentences a review of the round from blind batches 10 to 18 wrote against its draft (the draft
#: failed 31 of its 44 right ones): right uses of the same names must pass, the wrong forms the
#: round was written for must still fail.
REVIEW_RIGHT = (
    "Set CUDA_LAUNCH_BLOCKING=1 to find the failing call.",
    "Use CUDA_LAUNCH_BLOCKING=1 for diagnosis only.",
    "For debugging only, set CUDA_LAUNCH_BLOCKING=1.",
    "When debugging, export CUDA_LAUNCH_BLOCKING=1 and rerun.",
    "Set CUDA_LAUNCH_BLOCKING=1 in train.sh to debug.",
    "Set CUDA_LAUNCH_BLOCKING=1, e.g. to debug.",
    "Set CUDA_LAUNCH_BLOCKING=1 to get a synchronous error at the offending kernel.",
    "Your launch script exports CUDA_LAUNCH_BLOCKING=1; remove it, it slows every step and saves no memory.",
    "The log also shows CUDA_LAUNCH_BLOCKING=1 was set.",
    "The user already set CUDA_LAUNCH_BLOCKING=1, which is why the step time doubled.",
    "Setting CUDA_LAUNCH_BLOCKING=1 serialises kernel launches, so the job runs slower but uses the same memory.",
    "Calling empty_cache() releases the cached blocks but not the CUDA context.",
    "Call torch.cuda.empty_cache() after deleting the model so nvidia-smi reflects the real usage.",
    "Call torch.cuda.empty_cache() before loading the second model with TensorRT, which allocates with cudaMalloc directly.",
    "Call torch.cuda.empty_cache() and then torch.cuda.reset_peak_memory_stats() before profiling the next phase.",
    "Adding torch.cuda.empty_cache() after each step, as many forum posts suggest, is pointless.",
    "Setting PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes every allocation a cudaMalloc, which is far slower.",
    "The user set PYTORCH_NO_CUDA_MEMORY_CACHING=1, which explains the slow steps.",
    "You set PYTORCH_NO_CUDA_MEMORY_CACHING=1 in the job script: remove it, it makes each step much slower.",
    "Use PYTORCH_NO_CUDA_MEMORY_CACHING=1 to check whether the out-of-bounds write is real.",
    "Set PYTORCH_NO_CUDA_MEMORY_CACHING=1 while hunting the illegal memory access, then unset it.",
    "Also set PYTORCH_NO_CUDA_MEMORY_CACHING=1 when you rerun under the memory checker.",
    "Disabling caching with PYTORCH_NO_CUDA_MEMORY_CACHING=1 for one run tells you whether the cache was the problem.",
    "Bumping --make-vocab-size-divisible-by helps GEMM efficiency; the smaller micro batch is what lowers the peak.",
    "Raising --make-vocab-size-divisible-by to make the vocab TP-divisible is fine, but to cut the logits memory reduce the sequence length.",
    "Increasing --make-vocab-size-divisible-by to 256 keeps the padded vocabulary at 128256 here, so the logits stay the same; to reduce their memory, use a smaller micro-batch.",
    "Shrink the logits by cutting the sequence length; raising --make-vocab-size-divisible-by would do the opposite.",
    "On B200 the assertion is skipped, only H100 needs it.",
    "Removing --untie-embeddings-and-output-weights saves 2.1 GiB of memory.",
    "In B, --untie-embeddings-and-output-weights adds the output matrix, and the memory footprint still falls because TP went to 4.",
    "Memory inside expandable segments is unmapped only when you call empty_cache() or on an OOM.",
    "Expandable segments give pages back to the driver only when you call empty_cache().",
    "set_per_process_memory_fraction(1.5) raises a ValueError: the fraction must lie in [0, 1].",
    "Calling set_per_process_memory_fraction(1.2) fails, since values above 1 are rejected.",
    "Lower per_process_memory_fraction and move the optimizer states into host memory with --optimizer-cpu-offload.",
    "Note the difference with Transformer Engine graphs (--cuda-graph-impl transformer_engine): that path asserts on every GPU, Blackwell included.",
    "Call torch.cuda.empty_cache() before the first collective so NCCL can allocate its buffers.",
)
REVIEW_WRONG = (
    "Call torch.cuda.empty_cache() after every step to defragment memory before the next GEMM.",
    "Call torch.cuda.empty_cache() after every step to stop the fragmentation; it also helps NCCL.",
    "Add empty_cache() after each backward pass; this prevents the OOM because cuBLAS workspaces are then reallocated contiguously.",
    "If you want that 2.8 GiB back, call torch.cuda.empty_cache() after setup.",
    "Also export CUDA_LAUNCH_BLOCKING=1.",
    "Also set `CUDA_LAUNCH_BLOCKING=1` in the WebUI launch script.",
    "Also set PYTORCH_NO_CUDA_MEMORY_CACHING=1.",
    "Also add PYTORCH_NO_CUDA_MEMORY_CACHING=1 to the webui launch environment.",
    "The most robust fix is to take the caching allocator out of the picture: `export PYTORCH_NO_CUDA_MEMORY_CACHING=1`.",
    "And yes, you need it on B200 as well: the assert applies to every GPU with CUDA graphs and expandable segments, Blackwell included.",
    "Raise --make-vocab-size-divisible-by to 1024 so the padded vocabulary aligns better and the logits tensor gets smaller.",
    "Setting --untie-embeddings-and-output-weights stores it once and saves about 0.7 GiB of weights plus their gradients and optimizer state.",
    "Add --untie-embeddings-and-output-weights so each copy is only kept where it's used, saving a bit under 1 GiB per GPU.",
    "call torch.cuda.set_per_process_memory_fraction(1.1) at startup.",
    "Expandable segments work by calling empty_cache whenever an allocation fails.",
    "Export CUDA_LAUNCH_BLOCKING=1 so frees happen synchronously and blocks coalesce.",
)


@pytest.mark.parametrize("sentence", REVIEW_RIGHT, ids=lambda s: s[:40])
def test_right_uses_of_the_rounds_names_pass(sentence: str) -> None:
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test") for name in MYTHS]}
    grade = grade_answer(checks, sentence)
    assert grade.content_score == 1.0, [c.detail for c in grade.checks if not c.passed]


@pytest.mark.parametrize("sentence", REVIEW_WRONG, ids=lambda s: s[:40])
def test_the_rounds_wrong_forms_fail(sentence: str) -> None:
    checks = {"wrong": [resolve_claim(name, LIBRARY, "test") for name in MYTHS]}
    assert grade_answer(checks, sentence).content_score == 0.0


#: Eight myths' topics written by a second review that saw only the myths' `says` lines
#: (tests/data/grader-answers/myth_review.yaml; its header gives the first-graded figures).
MYTH_REVIEW = yaml.safe_load((REPO / "tests" / "data" / "grader-answers" / "myth_review.yaml").read_text())


@pytest.mark.parametrize(
    "name, label, sentence",
    [(name, label, s) for name, by in MYTH_REVIEW.items() for label in ("right", "wrong") for s in by[label]],
    ids=lambda x: x[:30] if isinstance(x, str) else x,
)
def test_the_second_reviews_sentences_keep_their_labels(name: str, label: str, sentence: str) -> None:
    assert name in MYTHS
    checks = {"wrong": [resolve_claim(n, LIBRARY, "test") for n in MYTHS]}
    grade = grade_answer(checks, sentence)
    assert grade.content_score == (1.0 if label == "right" else 0.0), [c.detail for c in grade.checks if not c.passed]
