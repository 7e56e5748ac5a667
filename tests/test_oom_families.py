"""Families of wordings (issue 11): old and new forms of each message, a GPU memory failure in
an unknown wording is still a finding, look-alikes are not, and every data regex stays linear.

The wordings below are quoted from their sources (Megatron-LM source strings at the commit named
in tests/data/oom-samples/48_*; PyTorch's and vLLM's messages as the samples show them).
"""

from __future__ import annotations

import re

import pytest

from memtune.diagnose.evidence import load_evidence
from memtune.diagnose.frameworks import load_frameworks
from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.scan import numbered, scan_lines
from memtune.diagnose.symptom_route import load_routes

P = load_patterns()


def kinds(text: str) -> list[tuple[str, dict]]:
    return [(f.kind, f.details) for f in scan_lines(numbered(text), P)]


@pytest.mark.parametrize(
    "text, kind, details",
    [
        # Megatron-Core transformer_block.py, inlined values (f-string with a backslash continuation:
        # the message holds a run of spaces)
        (
            "AssertionError: num_layers=60 should be divisible by config.pipeline_model_parallel_size=8",
            "pp-divisibility",
            {"num_layers": 60, "pp": 8},
        ),
        (
            "AssertionError: num_layers_per_pipeline_rank 20             should be divisible by vp_size 12",
            "vpp-divisibility",
            {"layers_per_rank": 20, "vpp": 12},
        ),
        # TransformerConfig uneven-stage checks (adjacent f-string literals without spaces)
        (
            "ValueError: number of layers at first stage: 5must be divisible by virtual pipelineparallel degree 2",
            "vpp-divisibility",
            {"layers_per_rank": 5, "vpp": 2},
        ),
        (
            "ValueError: number of layers at middle stage: 30 must be divisible bythe middle pipeline model parallel size 4",
            "pp-divisibility",
            {"num_layers": 30, "pp": 4},
        ),
        (
            "ValueError: number of middle layers: 33 must be divisible by middle pipeline_model_parallel_size 4",
            "pp-divisibility",
            {"num_layers": 33, "pp": 4},
        ),
        (
            "AssertionError: With uneven pipelineing the left over layers must be divisible by left over stages",
            "pp-divisibility",
            {},
        ),
        # older arguments.py
        (
            "AssertionError: number of layers of the model must be divisible pipeline model parallel size",
            "pp-divisibility",
            {},
        ),
        # PyTorch 2.9+ allocator-config tokenizer
        ("ValueError: Unrecognized key 'expandable_segment' in CUDA allocator config.", "alloc-conf-invalid", {}),
        # vLLM's sleep-mode allocator, capital E
        ("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62", "cuda-runtime-oom", {}),
        # torch_memory_saver, three generations
        (
            "[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103 (5)",
            "cuda-runtime-oom",
            {},
        ),
        (
            "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume line=172",
            "cuda-runtime-oom",
            {},
        ),
        # cuDNN
        (
            "cuDNN failure 2: CUDNN_STATUS_ALLOC_FAILED ; GPU=0 ; hostname=x ; expr=finder(calgo, algoPerf)",
            "cublas-oom",
            {},
        ),
        # cudaMallocAsync backend: no numbers
        ("torch.OutOfMemoryError: Allocation on device ", "capacity", {}),
        # a pytest summary line holds the allocator message after the test id
        (
            "FAILED tests/test_x.py::test_y - torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 216.00 MiB. GPU 0 has a total capacity of 14.74 GiB of which 182.19 MiB is free. Of the allocated memory 1.00 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but unallocated.",
            "fragmentation",
            {},
        ),
    ],
)
def test_wording_families(text: str, kind: str, details: dict) -> None:
    ((got_kind, got_details),) = kinds(text)
    assert got_kind == kind
    for key, value in details.items():
        assert got_details[key] == value


@pytest.mark.parametrize(
    "text",
    [
        "ResourceExhaustedError: OOM when allocating tensor with shape[25088,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
        "CUDA显存不足",
        "[Bug]: CUDA OOM with Kimi-K2.5 NVFP4 on both TP4 and TP8",
        # PyTorch's Apple-GPU allocator (aten/src/ATen/mps/MPSAllocator.mm), as a ComfyUI log printed it
        "RuntimeError: MPS backend out of memory (MPS allocated: 14.29 GiB, other allocations: 3.65 GiB, max allowed: 20.13 GiB). Tried to allocate 2.67 GiB on shared pool.",
        # C10_CUDA_DRIVER_CHECK's wording (expandable segments map memory through the driver API)
        "RuntimeError: CUDA driver error: out of memory",
    ],
)
def test_a_gpu_memory_failure_is_never_an_empty_report(text: str) -> None:
    found = kinds(text)
    assert found, text
    assert found[0][0] in ("unrecognized-gpu-memory-error", "cuda-runtime-oom")


@pytest.mark.parametrize(
    "text",
    [
        # vLLM's own INFO advice line
        "INFO 08-19 07:51:12 model_runner.py:1028] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.",
        # code, not a failure
        "except torch.cuda.OutOfMemoryError:",
        # host memory, killed by Ray / the kernel, is host-oom (tests/test_diagnose_host_oom.py), never a GPU kind
        # CUresult 1 is an invalid value, not memory
        "[torch_memory_saver.cpp] CUresult error  result=1 file=csrc/torch_memory_saver.cpp func=resume line=214",
        # TensorFlow's hint line
        "Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info.",
    ],
)
def test_look_alikes_are_not_failures(text: str) -> None:
    assert kinds(text) == []


def _data_regexes() -> list[tuple[str, str]]:
    out = []
    for det in P.detectors:
        for what in ("regex", "numbers", "requires", "unless"):
            rx = getattr(det, what)
            if rx is not None:
                out.append((f"{det.kind or 'allocator'}.{what}", rx.pattern))
    out += [(f"format {fm.label}", fm.marker.pattern) for fm in load_evidence().formats]
    out += [(f"hint {h.name}", h.regex.pattern) for h in load_evidence().hints]
    out += [(f"framework {fw.name}", fw.line_regex.pattern) for fw in load_frameworks().frameworks if fw.line_regex]
    out += [(f"context {i}", rx.pattern) for i, rx in enumerate(P.context)]
    out += [(f"symptom route {r.name}", rx.pattern) for r in load_routes() for rx in r.regexes]
    return out


# A quantified group whose body is itself quantified ((a+)+, (?:x*y)*, ...) can backtrack
# exponentially; an unanchored (?=.*x) look-ahead rescans the line from every position.
_NESTED = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")
_LOOKAHEAD = re.compile(r"\(\?[=!]\.\*")


@pytest.mark.parametrize("where, pattern", _data_regexes())
def test_data_regexes_have_no_super_linear_shapes(where: str, pattern: str) -> None:
    assert not _NESTED.search(pattern), f"{where}: nested quantifier"
    if _LOOKAHEAD.search(pattern):
        assert re.match(r"(?:\(\?[a-z]+\))?\^", pattern), f"{where}: look-ahead over the line must be anchored with ^"


def test_the_shape_checks_catch_what_they_claim() -> None:
    assert _NESTED.search(r"(a+)+b") and _NESTED.search(r"(?:x*y)*") and _NESTED.search(r"(\d+\.)+")
    assert not _NESTED.search(r"(?:ab)+c") and not _NESTED.search(r"(\d+) (?:MiB)+")
    assert _LOOKAHEAD.search(r"(?=.*nccl)x")


# JAX / XLA (issue 26): the allocator's wordings after the status, old and new spellings of the
# status, with the size each states.  Quoted from the public issues of samples 133-138 and from
# jax-ml/jax#13428 (buffer assignment), pytorch/xla#3470 (a TPU's reservation).
@pytest.mark.parametrize(
    "text, requested",
    [
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB (3210000000B) on device ordinal 0",
            3210000000,
        ),
        (
            "RuntimeError: Resource exhausted: Failed to allocate request for 32.00MiB (33554432B) on device ordinal 0",
            33554432,
        ),
        ("<ResourceExhaustedError: Failed to allocate request for 64.00MiB (67108864B) on device ordinal 0>", 67108864),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.",
            6291456,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes.",
            20029400304,
        ),
        (
            "#XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 4.39G. That was not possible. There are 2.30G free.; (0x0x0_HBM0)",
            None,
        ),
        (
            "2022-04-04 00:27:49.642380: E tensorflow/compiler/xla/xla_client/xla_util.cc:88]   (1) RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. That was not possible. There are 6.78G free, 0B reserved, and 3.33G reservable.",
            None,
        ),
    ],
)
def test_xla_wordings_are_xla_oom(text: str, requested: int | None) -> None:
    (f,) = scan_lines(numbered(text), P)
    assert f.kind == "xla-oom"
    assert f.numbers["requested_bytes"] == requested


@pytest.mark.parametrize(
    "text",
    [
        # the BFC allocator retries after freeing: its own words say this is no failure
        "2025-05-18 21:59:55.086788: W external/xla/xla/tsl/framework/bfc_allocator.cc:310] Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.37GiB with freed_by_count=0. The caller indicates that this is not a failure, but this may mean that there could be performance gains if more memory were available.",
        # gRPC's status of the same name: a message size or quota, no memory
        'grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with: status = StatusCode.RESOURCE_EXHAUSTED details = "Received message larger than max (4194405 vs. 4194304)"',
        "google.api_core.exceptions.ResourceExhausted: 429 Quota exceeded for quota metric 'Generate Content API requests per minute'",
        # JAX's own advice and an environment dump
        "XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=.50 python train.py",
        "If your JAX process fails with OOM, the following environment variables can be used to override the default behavior:",
    ],
)
def test_xla_look_alikes_are_not_failures(text: str) -> None:
    assert kinds(text) == []
