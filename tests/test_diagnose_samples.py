"""Every real error text in tests/data/oom-samples: kind, location and every number, exactly.

The expected byte counts are written the way the message prints them ("13.38 GiB") and
converted here with exact fractions, independently of memtune.diagnose.parse.  The first line
of each sample is `# source: URL` metadata, not log text, so it is left out and the line
numbers below are those of the file.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.scan import numbered, scan_lines

SAMPLES = Path(__file__).resolve().parent / "data" / "oom-samples"
UNITS = {"bytes": 0, "KiB": 1, "MiB": 2, "GiB": 3}
NONE5 = (None, None, None, None, None)


def b(text: str) -> int:
    """ "13.38 GiB" -> bytes, rounded half up."""
    value, unit = text.split()
    exact = Fraction(value) * (1024 ** UNITS[unit])
    return int(exact + Fraction(1, 2))


def nums(req, total, free, alloc, unalloc) -> tuple:
    return tuple(None if v is None else (v if isinstance(v, int) else b(v)) for v in (req, total, free, alloc, unalloc))


# file -> list of (kind, line, device, rank, numbers(req,total,free,alloc,unalloc), occurrences)
EXPECTED = {
    "01_pytorch_pr99699_new_format_capacty.txt": [
        ("fragmentation", 2, 0, None, nums("138.00 MiB", "15.90 GiB", "8.44 MiB", "14.12 GiB", "410.41 MiB"), 1),
    ],
    "03_transformers_issue3360_legacy.txt": [
        # legacy total form: reserved-but-unallocated = reserved - allocated
        (
            "capacity",
            2,
            0,
            None,
            nums("786.00 MiB", "14.73 GiB", "575.88 MiB", "13.33 GiB", b("13.38 GiB") - b("13.33 GiB")),
            1,
        ),
    ],
    "04_megatron_deepspeed_pr384_torch20_format_with_nccl_abort.txt": [
        (
            "impossible-request",
            6,
            3,
            None,
            nums("37631.79 GiB", "79.21 GiB", "24.67 GiB", "50.52 GiB", b("52.32 GiB") - b("50.52 GiB")),
            1,
        ),
    ],
    "06_speechgpt_issue49_capacty_fsdp_a100_80g.txt": [
        ("fragmentation", 2, 0, None, nums("172.00 MiB", "79.15 GiB", "161.62 MiB", "75.25 GiB", "2.84 GiB"), 1),
    ],
    "07_framepack_issue369_huge_alloc_expandable.txt": [
        ("impossible-request", 2, 0, None, nums("30.29 GiB", "10.74 GiB", "3.69 GiB", "6.10 GiB", "396.58 MiB"), 1),
    ],
    "08_mmed_rag_issue38_zero_bytes_free_wsl_or_shared.txt": [
        ("capacity", 2, 0, None, nums("64.00 MiB", "8.00 GiB", 0, "22.44 GiB", "3.16 MiB"), 1),
    ],
    "09_megatron_bridge_issue771_nccl_warn_cuda_failure_oom.txt": [
        ("nccl-oom", 11, 0, None, NONE5, 1),
        ("nccl-oom", 13, 4, None, NONE5, 1),
        ("nccl-oom", 15, 3, None, NONE5, 1),
        ("nccl-oom", 17, 7, None, NONE5, 1),
        ("nccl-oom", 19, 6, None, NONE5, 1),
        ("nccl-oom", 21, 1, None, NONE5, 1),
    ],
    "11_tensorrt_llm_issue1670_nccl_enqueue_oom_no_errno.txt": [
        ("nccl-oom", 2, 2, None, NONE5, 2),  # the same warning twice from one process
    ],
    "12_lmcache_issue3430_newest_docs_url_private_pools.txt": [
        ("fragmentation", 2, 0, None, nums("192.00 MiB", "23.56 GiB", "83.25 MiB", "22.43 GiB", "343.54 MiB"), 1),
    ],
    "14_slime_issue274_torch_memory_saver_cumemcreate_oom.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "15_megatron_bridge_issue2992_cpu_offload_pp_valueerror.txt": [("cpu-offload-pp", 2, None, None, NONE5, 1)],
    "16_megatron_lm_issue5474_nccl_graph_register_guard.txt": [("cudagraph-nccl-register", 11, None, None, NONE5, 1)],
    "18_bionemo_issue784_num_layers_pp_divisible.txt": [("pp-divisibility", 7, None, 15, NONE5, 1)],
    "20_deepspeed_examples_issue323_cublas_alloc_failed.txt": [("cublas-oom", 8, None, None, NONE5, 1)],
    "21_dense_matching_issue20_cublas_alloc_failed_with_frames.txt": [("cublas-oom", 2, None, None, NONE5, 1)],
    "22_nemo_speech_issue4982_cuda_error_out_of_memory.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "24_moss_issue328_runtimeerror_cuda_error_oom_wsl.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "25_comfyui_issue12366_cudaErrorMemoryAllocation_search_hint.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "26_deepspeed_issue237_oldest_cached_format.txt": [
        # oldest form: "cached" already is the reserved-but-unallocated part, not a total
        ("capacity", 4, 0, None, nums("8.52 GiB", "31.72 GiB", "5.39 GiB", "25.59 GiB", "14.59 MiB"), 1),
    ],
    "29_gpt4llm_issue16_a100_legacy_max_split.txt": [
        (
            "fragmentation",
            2,
            0,
            None,
            nums("172.00 MiB", "79.35 GiB", "12.19 MiB", "73.95 GiB", b("76.80 GiB") - b("73.95 GiB")),
            1,
        ),
    ],
    "31_pytorch_issue111363_wrapped_exception_capacty.txt": [
        ("fragmentation", 2, 0, None, nums("64.00 MiB", "79.15 GiB", "38.09 GiB", "39.10 GiB", "427.46 MiB"), 1),
    ],
    "32_taggui_issue188_no_proc_info_truncated_doc.txt": [
        ("fragmentation", 2, 0, None, nums("20.00 MiB", "4.00 GiB", "2.35 GiB", "825.15 MiB", "24.85 MiB"), 1),
    ],
    # interleaved traceback of several ranks whose OOM line was not captured: nothing to report
    "33_megatron_lm_issue818_interleaved_rank_traceback.txt": [],
    "34_pytorch_issue18853_cached_kib.txt": [
        ("capacity", 2, 0, None, nums("1024.00 MiB", "15.90 GiB", "991.56 MiB", "14.25 GiB", "607.00 KiB"), 1),
    ],
    # pre-1.0 THC text carries no numbers: all unknown, kind falls back to capacity with a note
    "35_pytorch_issue2187_pre10_thc_format.txt": [("capacity", 2, None, None, NONE5, 1)],
    "36_pytorch_pr13751_cached_format_origin.txt": [
        ("impossible-request", 2, 0, None, nums("16.00 GiB", "11.93 GiB", "7.33 GiB", "4.00 GiB", "179.00 KiB"), 1),
    ],
    "38_nccl_issue1235_alloc_h_calloc_oom_multinode.txt": [
        ("nccl-oom", 2, 3, None, (6291456, None, None, None, None), 1),  # calloc size folded in
    ],
    # NCCL "Cuda failure 1 'invalid argument'" is not a memory failure
    "40_nccl_nccl_unhandled_cuda_error_torch_side.txt": [],
    "43_alloc_conf_equals_instead_of_colon.txt": [("alloc-conf-invalid", 2, None, None, NONE5, 1)],
    "44_alloc_conf_deprecation_warning_29.txt": [("alloc-conf-deprecated", 2, None, None, NONE5, 1)],
    # ---- issue 11: Megatron-LM / Megatron Bridge / NeMo texts
    "45_megatron_bridge_pr5884_num_layers_pp_inline_values.txt": [("pp-divisibility", 2, None, None, NONE5, 1)],
    "46_megatron_bridge_pr5893_vpp_inline_values.txt": [("vpp-divisibility", 2, None, None, NONE5, 1)],
    "47_ms_swift_issue5737_megatron_arguments_pp_title.txt": [("pp-divisibility", 2, None, None, NONE5, 1)],
    "48_megatron_lm_ddp_config_nccl_ub_expandable_source.txt": [("nccl-ub-expandable", 2, None, None, NONE5, 1)],
    "49_megatron_lm_issue525_v100_reserved_total_fragmentation.txt": [
        (
            "fragmentation",
            2,
            0,
            None,
            nums("786.00 MiB", "31.74 GiB", "577.12 MiB", "28.82 GiB", b("29.97 GiB") - b("28.82 GiB")),
            1,
        ),
    ],
    # the "Search for `cudaErrorMemoryAllocation'" follow-up line folds into the same failure
    "50_nemo_rl_issue2702_megatron_policy_worker_accelerator_error.txt": [
        ("cuda-runtime-oom", 3, None, None, NONE5, 1)
    ],
    "51_nemo_issue14288_vpp_microbatches_pp6_m3.txt": [("vpp-microbatches", 5, None, 7, NONE5, 1)],
    "52_nemo_rl_issue2814_vllm_refit_private_pools_colocated.txt": [
        ("fragmentation", 2, 0, None, nums("448.00 MiB", "79.11 GiB", "431.38 MiB", "57.87 GiB", "477.92 MiB"), 1),
    ],
    "53_megatron_lm_issue92_legacy_vocab_logits_capacity.txt": [
        (
            "capacity",
            4,
            0,
            None,
            nums("9.33 GiB", "10.76 GiB", "4.48 GiB", "5.17 GiB", b("5.28 GiB") - b("5.17 GiB")),
            1,
        ),
    ],
    # "XX.XX MiB" is no number: everything unknown, capacity with the undecided note
    "54_nemo_speech_issue3493_placeholder_numbers_title.txt": [("capacity", 2, None, None, NONE5, 1)],
    # ---- issue 11: other stacks
    "55_kaito_issue976_vllm_engine_private_pools_process.txt": [
        ("fragmentation", 2, 0, None, nums("546.00 MiB", "15.77 GiB", "514.19 MiB", "13.73 GiB", "736.86 MiB"), 1),
    ],
    "56_vllm_pr12981_cumem_allocator_capital_error.txt": [
        ("cuda-runtime-oom", 2, None, None, NONE5, 1)
    ],  # not the 'invalid argument' lines
    "57_lmm_r1_issue43_openrlhf_vllm_wake_up_cumem.txt": [("cuda-runtime-oom", 6, None, None, NONE5, 1)],
    "58_verl_issue302_cumem_lowercase_title.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "59_vllm_issue19186_capture_end_cuda_graph_oom.txt": [("cuda-runtime-oom", 8, None, None, NONE5, 1)],
    # cut off after "95.00": request and device known, the rest unknown
    "60_sglang_issue5285_capture_cuda_graph_failed_truncated.txt": [
        ("capacity", 6, 7, None, nums("448.00 MiB", None, None, None, None), 1),
    ],
    "61_verl_issue2828_fsdp_logprob_capacity.txt": [
        ("capacity", 6, 0, None, nums("13.91 GiB", "79.11 GiB", "8.85 GiB", "60.49 GiB", "6.77 GiB"), 1),
    ],
    "62_toolrl_issue39_verl_ray_workerdict_softmax.txt": [
        ("capacity", 4, 0, None, nums("5.22 GiB", "23.69 GiB", "1.18 GiB", "21.54 GiB", "517.58 MiB"), 1),
    ],
    "63_fireredtts2_issue17_two_processes_on_one_gpu.txt": [
        ("fragmentation", 2, 0, None, nums("26.00 MiB", "11.66 GiB", "9.81 MiB", "9.30 GiB", "163.19 MiB"), 1),
    ],
    "64_trl_issue5750_pytest_summary_four_processes.txt": [
        ("capacity", 2, 0, None, nums("1.54 GiB", "14.74 GiB", "722.19 MiB", "3.34 GiB", "70.13 MiB"), 1),
        ("capacity", 3, 0, None, nums("216.00 MiB", "14.74 GiB", "182.19 MiB", None, None), 1),
    ],
    "65_mask2dit_issue4_dit_inference_near_capacity.txt": [
        ("fragmentation", 2, 0, None, nums("35.60 GiB", "79.33 GiB", "26.16 GiB", "11.97 GiB", "40.69 GiB"), 1),
    ],
    "66_comfyui_issue4936_allocation_on_device_async_backend.txt": [("capacity", 5, None, None, NONE5, 1)],
    "67_fitdit_comfyui_issue2_allocation_on_device.txt": [("capacity", 3, None, None, NONE5, 1)],
    # two servers' lines plus a Ray "[repeated 7x across cluster]" copy: one failure, seen twice
    "68_sglang_issue14092_torch_memory_saver_resume_verl.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 2)],
    "69_torch_memory_saver_issue99_cumemcreate_then_resume_error.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "70_torch_memory_saver_issue4_result_2_old_format.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "71_torch_memory_saver_issue35_result_1_not_memory.txt": [],  # CUresult 1 is not a memory failure
    # Ray's host-memory monitor, not the GPU: the page it links is named only when it killed a worker
    "72_openrlhf_issue911_ray_host_memory_not_gpu.txt": [("host-oom", 4, None, None, NONE5, 1)],
    "73_vllm_issue23230_engine_log_no_exception_class.txt": [
        ("capacity", 2, 0, None, nums("33.75 GiB", "44.40 GiB", "26.88 GiB", "17.03 GiB", "6.95 MiB"), 1),
    ],
    "74_vllm_issue636_v012_reserved_total.txt": [
        ("capacity", 4, 0, None, nums("160.00 MiB", "79.35 GiB", "145.19 MiB", "78.58 GiB", 0), 1),
    ],
    "75_llamafactory_issue7781_rank5_weight_loading.txt": [
        ("capacity", 4, 5, 5, nums("270.00 MiB", "23.65 GiB", "208.06 MiB", "22.87 GiB", "6.23 MiB"), 1),
    ],
    "76_meta_llama_issue918_v100_capacty_near_capacity.txt": [
        ("fragmentation", 2, 3, None, nums("448.00 MiB", "15.77 GiB", "289.38 MiB", "14.66 GiB", "483.75 MiB"), 1),
    ],
    "77_mgfn_issue35_tiny_gpu_zero_free_capacty.txt": [
        ("fragmentation", 2, 0, None, nums("1.70 GiB", "6.00 GiB", 0, "2.93 GiB", "2.30 GiB"), 1),
    ],
    "78_pytorch_issue35901_reserved_total_half_gpu_request.txt": [
        (
            "fragmentation",
            2,
            0,
            None,
            nums("10.84 GiB", "23.65 GiB", "10.26 GiB", "1.06 GiB", b("12.53 GiB") - b("1.06 GiB")),
            1,
        ),
    ],
    "79_sd_webui_replacer_issue74_capacty_request_above_gpu.txt": [
        ("impossible-request", 2, 0, None, nums("27.12 GiB", "11.99 GiB", 0, "16.16 GiB", "144.59 MiB"), 1),
    ],
    "80_torchtune_issue1965_expandable_unsupported_warning.txt": [],  # a warning that matters only beside an OOM
    "81_pytorch_issue20123_cudnn_alloc_failed_title.txt": [("cublas-oom", 2, None, None, NONE5, 1)],
    "82_cntk_issue220_cudnn_failure_2_alloc_failed.txt": [("cublas-oom", 2, None, None, NONE5, 1)],
    "83_gpt2_chinese_issue215_capacity_chinese_thread.txt": [
        (
            "capacity",
            2,
            0,
            None,
            nums("384.00 MiB", "14.76 GiB", "259.75 MiB", "11.04 GiB", b("11.10 GiB") - b("11.04 GiB")),
            1,
        ),
    ],
    # only the number list was pasted: no request, so the kind stays undecided (capacity + note)
    "84_gpt2_chinese_issue215_comment_numbers_without_header.txt": [
        ("capacity", 2, 0, None, nums(None, "15.75 GiB", "3.62 MiB", "79.11 MiB", b("86.00 MiB") - b("79.11 MiB")), 1),
    ],
    "85_llamafactory_issue4213_chinese_title_vram.txt": [("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1)],
    "86_tensorflow_faster_rcnn_issue110_resource_exhausted.txt": [
        ("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1)
    ],
    "87_vllm_issue39788_kimi_title_cuda_oom.txt": [("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1)],
    "88_deepspeed_issue3869_zero_inference_tiny_gpu.txt": [
        ("fragmentation", 2, 0, None, nums("978.00 MiB", "4.00 GiB", 0, "1.68 GiB", b("2.72 GiB") - b("1.68 GiB")), 1),
    ],
    "89_llamafactory_issue7532_deepspeed_zero3_optimizer_step.txt": [
        ("capacity", 3, 1, None, nums("3.39 GiB", "79.32 GiB", "2.40 GiB", "73.28 GiB", "1.59 GiB"), 1),
    ],
    "90_trl_issue3436_fsdp_trainer_fragmentation.txt": [
        ("fragmentation", 2, 0, None, nums("388.00 MiB", "9.68 GiB", "95.75 MiB", "6.61 GiB", "2.57 GiB"), 1),
    ],
    "91_chatglm3_issue31_capacty_near_capacity_chinese.txt": [
        ("fragmentation", 2, 0, None, nums("386.00 MiB", "22.02 GiB", "165.19 MiB", "21.13 GiB", "458.98 MiB"), 1),
    ],
    "92_nccl_issue844_rem_allocator_cuda_failure_oom.txt": [("nccl-oom", 4, 0, None, NONE5, 1)],
    "93_npkit_issue37_nccl_calloc_repeated_two_devices.txt": [
        ("nccl-oom", 2, 0, None, (1048576, None, None, None, None), 5),
        ("nccl-oom", 10, 3, None, (1048576, None, None, None, None), 1),
    ],
    "94_nemo_rl_issue3793_ray_task_error_outofmemory.txt": [("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1)],
    # serving engines' own start-up checks: capacity, the quoted `raise` source line folds in
    "95_vllm_issue10439_no_memory_for_cache_blocks.txt": [("capacity", 3, None, None, NONE5, 1)],
    "96_vllm_issue10517_max_seq_len_larger_than_kv_cache.txt": [("capacity", 6, None, None, NONE5, 1)],
    "97_vllm_issue25350_v1_kv_cache_needed_estimate.txt": [("capacity", 2, None, None, NONE5, 1)],
    "98_sglang_issue4330_not_enough_memory_mem_fraction.txt": [("capacity", 2, None, None, NONE5, 1)],
    # ROCm: PyTorch's HIP wording is the CUDA one with another name
    "99_therock_issue1054_hip_request_above_reported_gpu.txt": [
        ("impossible-request", 2, 0, None, nums("16.00 GiB", "15.24 GiB", "15.09 GiB", 0, 0), 1),
    ],
    # ComfyUI's "This error means you ran out of memory on your GPU." is advice, not a second failure
    "100_comfyui_issue9529_hip_out_of_memory_hint_line.txt": [
        ("capacity", 2, 0, None, nums("432.00 MiB", "15.92 GiB", "7.12 GiB", "8.08 GiB", "321.96 MiB"), 1),
    ],
    "101_therock_issue2118_hip_pytest_memory_fraction_cap.txt": [
        ("fragmentation", 2, 0, None, nums("2.00 MiB", "287.98 GiB", "275.86 GiB", "1017.01 MiB", "54.99 MiB"), 1),
    ],
    # TensorRT-LLM's CUDA runtime check, around cudaMallocAsync or not
    "102_tensorrt_llm_issue498_cudamallocasync_out_of_memory.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    "103_tensorrt_llm_issue1060_runtime_error_in_error.txt": [("cuda-runtime-oom", 3, None, None, NONE5, 1)],
    # issue 11 held-out check (texts nobody here had used): one real sample per class of miss
    "104_ms_swift_issue9191_megatron_rank97_pytorch_alloc_conf_hint.txt": [
        ("capacity", 12, 1, 97, nums("48.00 MiB", "139.81 GiB", "22.44 MiB", "138.20 GiB", "40.42 MiB"), 1),
    ],
    "105_deepspeed_issue3671_legacy_list_cut_mid_number.txt": [
        # cut inside the reserved total ("27.8"): only GiB puts it between the allocated 23.68 GiB
        # and the 31.75 GiB card, so the idle reserve is 4.12-4.22 GiB, above the 2.72 GiB request
        ("fragmentation", 5, 0, None, nums("2.72 GiB", "31.75 GiB", "2.36 GiB", "23.68 GiB", "4.12 GiB"), 1),
    ],
    "106_cgft_llm_issue4_prose_title_cut_chinese.txt": [
        ("capacity", 2, None, None, nums("32.00 MiB", None, None, None, None), 1)
    ],
    # the scanner sees the question "why does it go OOM" (GPU named) on line 2 as well; the
    # report drops it (test_user_prose_beside_a_known_failure_is_not_a_second_finding)
    "107_vllm_issue783_user_prose_oom_above_legacy_message.txt": [
        ("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1),
        (
            "capacity",
            36,
            0,
            None,
            nums("1.63 GiB", "44.56 GiB", "565.31 MiB", "27.91 GiB", b("27.93 GiB") - b("27.91 GiB")),
            1,
        ),
    ],
    "108_comfyui_issue5038_error_report_type_and_message_apart.txt": [("capacity", 7, None, None, NONE5, 1)],
    # the scanner keeps the stated index in details; the report makes it the device
    # (test_device_named_by_the_async_backend_wording)
    "109_comfyui_issue2021_allocation_on_device_0_would_exceed.txt": [("capacity", 2, None, None, NONE5, 1)],
    "110_ms_swift_issue5943_rlhf_rank15_private_pools.txt": [
        ("fragmentation", 2, 7, 15, nums("2.63 GiB", "79.11 GiB", "2.61 GiB", "48.15 GiB", "3.49 GiB"), 1),
    ],
    # the same failure in the title and in the description, neither with numbers
    "111_internlm_issue186_chinese_title_pip_list_torch113.txt": [
        ("capacity", 2, None, None, NONE5, 1),
        ("capacity", 7, None, None, NONE5, 1),
    ],
    # second held-out batch (keyed after the fixes above, before running on it)
    "112_crgan_issue8_cuda_error_colon_without_space.txt": [("cuda-runtime-oom", 2, None, None, NONE5, 1)],
    # TensorFlow on ROCm: a GPU memory failure in a wording no row covers (twice, one line apart)
    "113_keras_issue13889_tensorflow_rocm_hip_error_outofmemory.txt": [
        ("unrecognized-gpu-memory-error", 2, None, None, NONE5, 2)
    ],
    "114_llmc_issue206_script_prints_pytorch_release.txt": [("cuda-runtime-oom", 14, None, None, NONE5, 1)],
    # the scanner sees the numberless title too; the report keeps only the full message
    # (test_numberless_title_above_the_full_message_is_an_echo)
    "115_qanything_issue303_numberless_title_above_full_message.txt": [
        ("capacity", 2, None, None, NONE5, 1),
        ("fragmentation", 4, 0, None, nums("132.00 MiB", "23.64 GiB", "67.06 MiB", "18.70 GiB", "353.02 MiB"), 1),
    ],
    # the async backend's own numbers are not parsed yet (report: device 0 from the wording)
    # the async backend's field list, printed on one line with literal "\n" escapes
    "116_tgi_issue563_async_backend_message_inside_panic.txt": [
        ("capacity", 2, None, None, nums("4.83 GiB", "22.20 GiB", "11.12 MiB", "16.08 GiB", None), 1),
    ],
    # legacy total form, reserved == allocated: nothing idle, yet 37 GiB free (free-exceeds-request)
    "117_chatglm_finetuning_issue28_free_far_above_request.txt": [
        ("capacity", 2, 0, None, nums("128.00 MiB", "44.99 GiB", "37.32 GiB", "6.15 GiB", 0), 1),
    ],
    # a bare exception line above the message (reported as its echo), the hint's >> HTML-escaped
    "118_vlm_rl_issue12_free_above_request_html_escaped.txt": [
        ("unrecognized-gpu-memory-error", 2, None, None, NONE5, 1),
        (
            "fragmentation",
            4,
            0,
            None,
            nums("258.00 MiB", "23.54 GiB", "572.50 MiB", "11.75 GiB", b("12.40 GiB") - b("11.75 GiB")),
            1,
        ),
    ],
    # Host (CPU RAM) OOM kills: the OOM killer's own words (kernel, Slurm, Ray, Kubernetes), or
    # only the SIGKILL (torchrun / DeepSpeed exit -9, DataLoader, bash) -- tests/test_diagnose_host_oom.py
    "119_chatglm2_issue525_exitcode_minus9_loading_checkpoint_shards.txt": [("host-oom", 2, None, None, NONE5, 1)],
    "120_verl_issue2950_ray_node_low_on_memory_workerdict.txt": [("host-oom", 2, None, None, NONE5, 1)],
    # oom-kill:constraint and "Out of memory: Killed process" are one kill (lines 2-3)
    "121_tranx_issue41_dmesg_out_of_memory_killed_process.txt": [("host-oom", 2, None, None, NONE5, 1)],
    # bash's "Killed", slurmstepd's oom-kill line right after it and the later bare "Killed": one kill
    "122_arjuna_users_issue52_slurm_oom_kill_event_bash_killed.txt": [("host-oom", 2, None, None, NONE5, 1)],
    "123_nextflow_issue5932_slurm_oom_kill_step_tasks_out_of_memory.txt": [("host-oom", 2, None, None, NONE5, 1)],
    "124_openpai_issue5464_k8s_oomkilled_code_137.txt": [("host-oom", 5, None, None, NONE5, 1)],
    "125_deepspeed_issue3232_sigkill_handler_return_code_minus9.txt": [("host-oom", 3, None, None, NONE5, 1)],
    "126_open_sora_plan_issue512_sigterm_then_exitcode_minus9_saving.txt": [("host-oom", 9, None, None, NONE5, 1)],
    "127_wmpo_issue3_raylet_workers_killed_memory_pressure.txt": [("host-oom", 2, None, None, NONE5, 1)],
    "128_pytorch_book_issue62_dataloader_worker_killed_by_signal.txt": [("host-oom", 2, None, None, NONE5, 1)],
    "129_hedwig_issue70_bare_killed_after_progress_bar.txt": [("host-oom", 5, None, None, NONE5, 1)],
    # look-alikes: the NCCL watchdog's SIGABRT (-6), torchrun's own SIGKILL at shutdown, srun's exit codes
    "130_picotron_issue6_nccl_watchdog_timeout_exitcode_minus6.txt": [],
    "131_aws_eks_issue93_launcher_forced_sigkill_on_shutdown.txt": [],
    "132_everyvoice_issue178_cuda_oom_then_srun_task_exits.txt": [
        ("fragmentation", 2, 2, None, nums("112.00 MiB", "15.78 GiB", "27.19 MiB", "14.24 GiB", "177.74 MiB"), 1),
    ],
    # issue 26: JAX / XLA never says "CUDA out of memory"; the request is stated in bytes, the
    # device ordinal (when named) is kept in details and made the device by the report
    "133_mesh_transformer_jax_issue66_xla_resource_exhausted_request_ordinal.txt": [
        ("xla-oom", 2, None, None, (33554432, None, None, None, None), 1),  # line 4 folds into it
    ],
    # the BFC allocator's "this is not a failure" warnings below it are no finding of their own
    "134_nemos_issue345_xla_oom_after_bfc_not_a_failure_warnings.txt": [
        ("xla-oom", 2, None, None, (3199993600, None, None, None, None), 1),
    ],
    "135_afprofile_issue8_xla_buffer_assignment_oom.txt": [
        ("xla-oom", 2, None, None, (4770354232, None, None, None, None), 1),
    ],
    "136_llnerf_issue9_xla_out_of_memory_allocating.txt": [
        ("xla-oom", 2, None, None, (20029400304, None, None, None, None), 1),
    ],
    "137_transformers_issue13629_tf_resource_exhausted_error_request.txt": [
        ("xla-oom", 3, None, None, (b("64.00 MiB"), None, None, None, None), 1),
    ],
    # a TPU's HBM: the size is a rounded "4.39G", so no exact request
    "138_diffusers_issue8358_xla_tpu_error_allocating_device_buffer.txt": [("xla-oom", 4, None, None, NONE5, 1)],
    # "[TRT-LLM]" names TensorRT-LLM (tests/test_oom_frameworks.py); the numbers are PyTorch's
    "139_tensorrt_llm_issue7818_trt_llm_tag_rank_cuda_oom.txt": [
        ("capacity", 2, 0, None, nums("40.00 MiB", "22.07 GiB", "20.62 MiB", "880.00 MiB", "20.00 MiB"), 1),
    ],
}

KEYS = ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes")


def sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES.glob("*.txt"))


def scan_sample(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source:"), f"{path.name}: first line must name its source"
    body = "\n".join(lines[1:])
    return scan_lines(numbered(body, first_line=2), load_patterns(), file=path.name)


def test_every_sample_has_an_expectation() -> None:
    names = {p.name for p in sample_files()}
    assert names == set(EXPECTED), (
        f"unlisted: {sorted(names - set(EXPECTED))}, missing: {sorted(set(EXPECTED) - names)}"
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_kind_location_and_numbers(name: str) -> None:
    findings = scan_sample(SAMPLES / name)
    got = [(f.kind, f.line, f.device, f.rank, tuple(f.numbers[k] for k in KEYS), f.occurrences) for f in findings]
    assert got == EXPECTED[name]


def test_wrapped_new_format_spans_its_lines() -> None:
    (f,) = scan_sample(SAMPLES / "01_pytorch_pr99699_new_format_capacty.txt")
    assert (f.line, f.line_end) == (2, 7)  # message re-joined over six physical lines
    assert f.evidence.startswith("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 138.00 MiB.")


def test_thc_form_reports_unknown_not_guessed() -> None:
    (f,) = scan_sample(SAMPLES / "35_pytorch_issue2187_pre10_thc_format.txt")
    assert f.note and "undecided" in f.note


def test_wrapped_exception_keeps_its_wrapper_in_evidence() -> None:
    (f,) = scan_sample(SAMPLES / "31_pytorch_issue111363_wrapped_exception_capacty.txt")
    assert "(OutOfMemoryError) CUDA out of memory" in f.evidence


# ---------------------------------------------------------------------------------------------
# Issue 11: the advice fits the stack the text names and the PyTorch release its wording dates.
# file -> (framework, per finding: (release since, release before, expandable_segments status))
# Releases come from the message wording alone (data/oom_evidence.yaml); None: open / unknown.
ADVICE = {
    "01_pytorch_pr99699_new_format_capacty.txt": (None, [("2.1", "2.2", "accepted")]),  # 'capacty' typo era
    "03_transformers_issue3360_legacy.txt": (None, [("1.4", "2.1", "rejected")]),
    "04_megatron_deepspeed_pr384_torch20_format_with_nccl_abort.txt": ("deepspeed", [("1.10", "2.1", "rejected")]),
    "06_speechgpt_issue49_capacty_fsdp_a100_80g.txt": (None, [("2.1", "2.2", "accepted")]),
    "07_framepack_issue369_huge_alloc_expandable.txt": (None, [("2.2", None, "accepted")]),
    "08_mmed_rag_issue38_zero_bytes_free_wsl_or_shared.txt": (None, [("2.1", "2.2", "accepted")]),
    "09_megatron_bridge_issue771_nccl_warn_cuda_failure_oom.txt": ("megatron", [(None, None, "unknown")] * 6),
    "11_tensorrt_llm_issue1670_nccl_enqueue_oom_no_errno.txt": (None, [(None, None, "unknown")]),
    "12_lmcache_issue3430_newest_docs_url_private_pools.txt": ("vllm", [("2.4", None, "accepted")]),
    "14_slime_issue274_torch_memory_saver_cumemcreate_oom.txt": ("sglang", [(None, None, "unknown")]),
    "15_megatron_bridge_issue2992_cpu_offload_pp_valueerror.txt": ("megatron", [(None, None, "unknown")]),
    "16_megatron_lm_issue5474_nccl_graph_register_guard.txt": ("megatron", [(None, None, "unknown")]),
    "18_bionemo_issue784_num_layers_pp_divisible.txt": ("megatron", [(None, None, "unknown")]),
    "20_deepspeed_examples_issue323_cublas_alloc_failed.txt": ("deepspeed", [(None, None, "unknown")]),
    "21_dense_matching_issue20_cublas_alloc_failed_with_frames.txt": (None, [(None, None, "unknown")]),
    "22_nemo_speech_issue4982_cuda_error_out_of_memory.txt": (None, [(None, None, "unknown")]),
    "24_moss_issue328_runtimeerror_cuda_error_oom_wsl.txt": (None, [(None, None, "unknown")]),
    "25_comfyui_issue12366_cudaErrorMemoryAllocation_search_hint.txt": (None, [(None, None, "unknown")]),
    "26_deepspeed_issue237_oldest_cached_format.txt": (None, [("1.0", "1.4", "ignored")]),  # 'cached' wording
    "29_gpt4llm_issue16_a100_legacy_max_split.txt": (None, [("1.4", "2.1", "rejected")]),
    "31_pytorch_issue111363_wrapped_exception_capacty.txt": (None, [("2.1", "2.2", "accepted")]),
    "32_taggui_issue188_no_proc_info_truncated_doc.txt": (None, [("2.2", None, "accepted")]),
    "33_megatron_lm_issue818_interleaved_rank_traceback.txt": ("megatron", []),
    "34_pytorch_issue18853_cached_kib.txt": (None, [("1.0", "1.4", "ignored")]),
    "35_pytorch_issue2187_pre10_thc_format.txt": (None, [(None, "1.0", "ignored")]),
    "36_pytorch_pr13751_cached_format_origin.txt": (None, [("1.0", "1.4", "ignored")]),
    "38_nccl_issue1235_alloc_h_calloc_oom_multinode.txt": (None, [(None, None, "unknown")]),
    "40_nccl_nccl_unhandled_cuda_error_torch_side.txt": (None, []),
    "43_alloc_conf_equals_instead_of_colon.txt": (None, [(None, None, "unknown")]),
    "44_alloc_conf_deprecation_warning_29.txt": (None, [(None, None, "unknown")]),
    "45_megatron_bridge_pr5884_num_layers_pp_inline_values.txt": ("megatron", [(None, None, "unknown")]),
    "46_megatron_bridge_pr5893_vpp_inline_values.txt": ("megatron", [(None, None, "unknown")]),
    "47_ms_swift_issue5737_megatron_arguments_pp_title.txt": ("megatron", [(None, None, "unknown")]),
    "48_megatron_lm_ddp_config_nccl_ub_expandable_source.txt": ("megatron", [(None, None, "unknown")]),
    "49_megatron_lm_issue525_v100_reserved_total_fragmentation.txt": (None, [("1.10", "2.1", "rejected")]),
    "50_nemo_rl_issue2702_megatron_policy_worker_accelerator_error.txt": ("nemo-rl", [(None, None, "unknown")]),
    "51_nemo_issue14288_vpp_microbatches_pp6_m3.txt": ("megatron", [(None, None, "unknown")]),
    "52_nemo_rl_issue2814_vllm_refit_private_pools_colocated.txt": ("nemo-rl", [("2.4", None, "accepted")]),
    "53_megatron_lm_issue92_legacy_vocab_logits_capacity.txt": ("megatron", [("1.4", "2.1", "rejected")]),
    "54_nemo_speech_issue3493_placeholder_numbers_title.txt": (None, [(None, None, "unknown")]),
    "55_kaito_issue976_vllm_engine_private_pools_process.txt": ("vllm", [("2.4", None, "accepted")]),
    "56_vllm_pr12981_cumem_allocator_capital_error.txt": ("vllm", [(None, None, "unknown")]),
    "57_lmm_r1_issue43_openrlhf_vllm_wake_up_cumem.txt": ("openrlhf", [(None, None, "unknown")]),
    "58_verl_issue302_cumem_lowercase_title.txt": ("vllm", [(None, None, "unknown")]),
    "59_vllm_issue19186_capture_end_cuda_graph_oom.txt": ("vllm", [(None, None, "unknown")]),
    # cut before the hint, but "has a total capacity of" (spelled right) already dates it
    "60_sglang_issue5285_capture_cuda_graph_failed_truncated.txt": ("sglang", [("2.2", None, "accepted")]),
    "61_verl_issue2828_fsdp_logprob_capacity.txt": ("verl", [("2.2", None, "accepted")]),
    "62_toolrl_issue39_verl_ray_workerdict_softmax.txt": ("verl", [("2.2", None, "accepted")]),
    "63_fireredtts2_issue17_two_processes_on_one_gpu.txt": (None, [("2.2", None, "accepted")]),
    "64_trl_issue5750_pytest_summary_four_processes.txt": (
        None,
        [("2.2", None, "accepted"), ("2.2", None, "accepted")],
    ),
    "65_mask2dit_issue4_dit_inference_near_capacity.txt": (None, [("2.2", None, "accepted")]),
    "66_comfyui_issue4936_allocation_on_device_async_backend.txt": ("comfyui", [(None, None, "unknown")]),
    "67_fitdit_comfyui_issue2_allocation_on_device.txt": ("comfyui", [(None, None, "unknown")]),
    "68_sglang_issue14092_torch_memory_saver_resume_verl.txt": ("verl", [(None, None, "unknown")]),
    "69_torch_memory_saver_issue99_cumemcreate_then_resume_error.txt": ("sglang", [(None, None, "unknown")]),
    "70_torch_memory_saver_issue4_result_2_old_format.txt": ("sglang", [(None, None, "unknown")]),
    "71_torch_memory_saver_issue35_result_1_not_memory.txt": ("sglang", []),
    "72_openrlhf_issue911_ray_host_memory_not_gpu.txt": ("openrlhf", [(None, None, "unknown")]),
    "73_vllm_issue23230_engine_log_no_exception_class.txt": ("vllm", [("2.2", None, "accepted")]),
    "74_vllm_issue636_v012_reserved_total.txt": ("vllm", [("1.10", "2.1", "rejected")]),
    "75_llamafactory_issue7781_rank5_weight_loading.txt": ("hf-trainer", [("2.2", None, "accepted")]),
    "76_meta_llama_issue918_v100_capacty_near_capacity.txt": (None, [("2.1", "2.2", "accepted")]),
    "77_mgfn_issue35_tiny_gpu_zero_free_capacty.txt": (None, [("2.1", "2.2", "accepted")]),
    "78_pytorch_issue35901_reserved_total_half_gpu_request.txt": (None, [("1.4", "2.1", "rejected")]),
    "79_sd_webui_replacer_issue74_capacty_request_above_gpu.txt": (None, [("2.1", "2.2", "accepted")]),
    "80_torchtune_issue1965_expandable_unsupported_warning.txt": ("torchrun", []),
    "81_pytorch_issue20123_cudnn_alloc_failed_title.txt": (None, [(None, None, "unknown")]),
    "82_cntk_issue220_cudnn_failure_2_alloc_failed.txt": (None, [(None, None, "unknown")]),
    "83_gpt2_chinese_issue215_capacity_chinese_thread.txt": (None, [("1.4", "2.1", "rejected")]),
    "84_gpt2_chinese_issue215_comment_numbers_without_header.txt": (None, [("1.4", "2.1", "rejected")]),
    "85_llamafactory_issue4213_chinese_title_vram.txt": (None, [(None, None, "unknown")]),
    "86_tensorflow_faster_rcnn_issue110_resource_exhausted.txt": (None, [(None, None, "unknown")]),
    "87_vllm_issue39788_kimi_title_cuda_oom.txt": (None, [(None, None, "unknown")]),
    "88_deepspeed_issue3869_zero_inference_tiny_gpu.txt": ("deepspeed", [("1.10", "2.1", "rejected")]),
    "89_llamafactory_issue7532_deepspeed_zero3_optimizer_step.txt": ("deepspeed", [("2.2", None, "accepted")]),
    "90_trl_issue3436_fsdp_trainer_fragmentation.txt": ("hf-trainer", [("2.2", None, "accepted")]),
    "91_chatglm3_issue31_capacty_near_capacity_chinese.txt": (None, [("2.1", "2.2", "accepted")]),
    "92_nccl_issue844_rem_allocator_cuda_failure_oom.txt": (None, [(None, None, "unknown")]),
    "93_npkit_issue37_nccl_calloc_repeated_two_devices.txt": (None, [(None, None, "unknown")] * 2),
    "94_nemo_rl_issue3793_ray_task_error_outofmemory.txt": ("nemo-rl", [(None, None, "unknown")]),
    "95_vllm_issue10439_no_memory_for_cache_blocks.txt": ("vllm", [(None, None, "unknown")]),
    "96_vllm_issue10517_max_seq_len_larger_than_kv_cache.txt": ("vllm", [(None, None, "unknown")]),
    "97_vllm_issue25350_v1_kv_cache_needed_estimate.txt": ("vllm", [(None, None, "unknown")]),
    "98_sglang_issue4330_not_enough_memory_mem_fraction.txt": ("sglang", [(None, None, "unknown")]),
    "99_therock_issue1054_hip_request_above_reported_gpu.txt": (None, [("2.2", None, "accepted")]),
    "100_comfyui_issue9529_hip_out_of_memory_hint_line.txt": ("comfyui", [("2.2", None, "accepted")]),
    "101_therock_issue2118_hip_pytest_memory_fraction_cap.txt": (None, [("2.4", None, "accepted")]),
    "102_tensorrt_llm_issue498_cudamallocasync_out_of_memory.txt": ("tensorrt-llm", [(None, None, "unknown")]),
    "103_tensorrt_llm_issue1060_runtime_error_in_error.txt": ("tensorrt-llm", [(None, None, "unknown")]),
    # the hint names PYTORCH_ALLOC_CONF: a release that reads that name (2.9+)
    "104_ms_swift_issue9191_megatron_rank97_pytorch_alloc_conf_hint.txt": ("megatron", [("2.9", None, "accepted")]),
    # the "(GPU 0; ... total capacity; ... already allocated" list alone dates it before 2.1
    "105_deepspeed_issue3671_legacy_list_cut_mid_number.txt": ("deepspeed", [("1.0", "2.1", "rejected")]),
    # "Tried to allocate 32.00 MiB. G": the prose message of 2.1+, even cut after two letters
    "106_cgft_llm_issue4_prose_title_cut_chinese.txt": (None, [("2.1", None, "accepted")]),
    "107_vllm_issue783_user_prose_oom_above_legacy_message.txt": ("vllm", [("1.10", "2.1", "rejected")]),
    "108_comfyui_issue5038_error_report_type_and_message_apart.txt": ("comfyui", [(None, None, "unknown")]),
    "109_comfyui_issue2021_allocation_on_device_0_would_exceed.txt": ("comfyui", [(None, None, "unknown")]),
    "110_ms_swift_issue5943_rlhf_rank15_private_pools.txt": ("ms-swift", [("2.4", None, "accepted")]),
    # no wording marker, but the pip listing says torch 1.13.1: exact, and it rejects the setting
    "111_internlm_issue186_chinese_title_pip_list_torch113.txt": (None, [(None, None, "rejected")] * 2),
    "112_crgan_issue8_cuda_error_colon_without_space.txt": (None, [(None, None, "unknown")]),
    "113_keras_issue13889_tensorflow_rocm_hip_error_outofmemory.txt": (None, [(None, None, "unknown")]),
    # "Running pytorch 2.2.2+cu121", printed by the script: exact
    "114_llmc_issue206_script_prints_pytorch_release.txt": (None, [(None, None, "accepted")]),
    "115_qanything_issue303_numberless_title_above_full_message.txt": (None, [("2.1", "2.2", "accepted")]),
    "116_tgi_issue563_async_backend_message_inside_panic.txt": (None, [(None, None, "unknown")]),
    # "If reserved memory is >> allocated memory": the 1.10-2.0 hint
    "117_chatglm_finetuning_issue28_free_far_above_request.txt": (None, [("1.10", "2.1", "rejected")]),
    # with the >> escaped only the legacy total form dates it: 1.4 to before 2.1
    "118_vlm_rl_issue12_free_above_request_html_escaped.txt": (None, [("1.4", "2.1", "rejected")]),
    # host OOM kills carry no PyTorch wording: the release stays unknown
    "119_chatglm2_issue525_exitcode_minus9_loading_checkpoint_shards.txt": ("torchrun", [(None, None, "unknown")]),
    "120_verl_issue2950_ray_node_low_on_memory_workerdict.txt": ("verl", [(None, None, "unknown")]),
    "121_tranx_issue41_dmesg_out_of_memory_killed_process.txt": (None, [(None, None, "unknown")]),
    "122_arjuna_users_issue52_slurm_oom_kill_event_bash_killed.txt": (None, [(None, None, "unknown")]),
    "123_nextflow_issue5932_slurm_oom_kill_step_tasks_out_of_memory.txt": (None, [(None, None, "unknown")]),
    "124_openpai_issue5464_k8s_oomkilled_code_137.txt": (None, [(None, None, "unknown")]),
    "125_deepspeed_issue3232_sigkill_handler_return_code_minus9.txt": ("deepspeed", [(None, None, "unknown")]),
    "126_open_sora_plan_issue512_sigterm_then_exitcode_minus9_saving.txt": ("torchrun", [(None, None, "unknown")]),
    "127_wmpo_issue3_raylet_workers_killed_memory_pressure.txt": (None, [(None, None, "unknown")]),
    "128_pytorch_book_issue62_dataloader_worker_killed_by_signal.txt": (None, [(None, None, "unknown")]),
    "129_hedwig_issue70_bare_killed_after_progress_bar.txt": (None, [(None, None, "unknown")]),
    "130_picotron_issue6_nccl_watchdog_timeout_exitcode_minus6.txt": (None, []),
    "131_aws_eks_issue93_launcher_forced_sigkill_on_shutdown.txt": ("torchrun", []),
    "132_everyvoice_issue178_cuda_oom_then_srun_task_exits.txt": (None, [("2.1", "2.2", "accepted")]),
    # JAX / XLA: no PyTorch release applies; TensorFlow (137) is no JAX signal
    "133_mesh_transformer_jax_issue66_xla_resource_exhausted_request_ordinal.txt": ("jax", [(None, None, "unknown")]),
    "134_nemos_issue345_xla_oom_after_bfc_not_a_failure_warnings.txt": ("jax", [(None, None, "unknown")]),
    "135_afprofile_issue8_xla_buffer_assignment_oom.txt": ("jax", [(None, None, "unknown")]),
    "136_llnerf_issue9_xla_out_of_memory_allocating.txt": ("jax", [(None, None, "unknown")]),
    "137_transformers_issue13629_tf_resource_exhausted_error_request.txt": (None, [(None, None, "unknown")]),
    "138_diffusers_issue8358_xla_tpu_error_allocating_device_buffer.txt": ("jax", [(None, None, "unknown")]),
    "139_tensorrt_llm_issue7818_trt_llm_tag_rank_cuda_oom.txt": ("tensorrt-llm", [("2.2", None, "accepted")]),
}


def test_rocm_advice_names_the_hip_variable_and_the_cap() -> None:
    (f,) = report_for("101_therock_issue2118_hip_pytest_memory_fraction_cap.txt")["findings"]
    assert f["details"]["allowed_bytes"] == b("1.05 GiB")
    assert f["advice"][0].startswith("Raise or remove the per-process memory fraction")
    assert "memory-fraction-cap" in {n["code"] for n in f["evidence_notes"]}
    assert "export PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in " ".join(f["advice"])


@pytest.mark.parametrize(
    "name, details, first_action",
    [
        (
            "96_vllm_issue10517_max_seq_len_larger_than_kv_cache.txt",
            {"max_model_len": 29000, "kv_cache_tokens": 23648},
            "lower --max-model-len",
        ),
        (
            "97_vllm_issue25350_v1_kv_cache_needed_estimate.txt",
            {"max_model_len": 221000, "estimated_max_model_len": 122080},
            "lower --max-model-len",
        ),
        ("95_vllm_issue10439_no_memory_for_cache_blocks.txt", {}, "--gpu-memory-utilization: raise it"),
        ("98_sglang_issue4330_not_enough_memory_mem_fraction.txt", {}, "at start-up raise it"),
    ],
)
def test_engine_start_up_checks_keep_their_direction(name: str, details: dict, first_action: str) -> None:
    # the generic serving advice says *lower* the memory share; these checks need the opposite
    (f,) = report_for(name)["findings"]
    assert f.get("details", {}) == details
    assert first_action in f["advice"][0] and len(f["advice"]) == 1
    assert f["confidence"]["level"] == "high"


def test_user_prose_beside_a_known_failure_is_not_a_second_finding() -> None:
    rep = report_for("107_vllm_issue783_user_prose_oom_above_legacy_message.txt")
    assert [f["kind"] for f in rep["findings"]] == ["capacity"]
    assert rep["summary"]["failures"] == 1


def test_device_named_by_the_async_backend_wording() -> None:
    (f,) = report_for("109_comfyui_issue2021_allocation_on_device_0_would_exceed.txt")["findings"]
    assert (f["kind"], f["device"], f["source"]) == ("capacity", 0, "GPU 0")
    assert "device" not in f.get("details", {})
    assert "cudaMallocAsync" in f["note"]


def test_comfyui_error_report_is_one_failure() -> None:
    # type and message on separate report lines: still the async-backend OOM, with its note
    (f,) = report_for("108_comfyui_issue5038_error_report_type_and_message_apart.txt")["findings"]
    assert f["kind"] == "capacity" and "cudaMallocAsync" in f["note"]


def test_report_header_and_its_logged_traceback_fold_into_one_failure() -> None:
    # a whole ComfyUI report carries the message twice: in the header (108, line 7) and at
    # the end of the logged traceback further down (66, line 5)
    header = (
        (SAMPLES / "108_comfyui_issue5038_error_report_type_and_message_apart.txt")
        .read_text(encoding="utf-8")
        .splitlines()[6]
    )
    tail = (
        (SAMPLES / "66_comfyui_issue4936_allocation_on_device_async_backend.txt")
        .read_text(encoding="utf-8")
        .splitlines()[4]
    )
    found = scan_lines([(7, header), (150, tail)], load_patterns())
    assert [(f.kind, f.line, f.line_end) for f in found] == [("capacity", 7, 150)]


def test_release_stated_by_a_pasted_package_listing() -> None:
    rep = report_for("111_internlm_issue186_chinese_title_pip_list_torch113.txt")
    for f in rep["findings"]:
        assert (f["torch"]["version"], f["torch"]["source"]) == ("1.13.1", "stated in the input")
        assert "expandable_segments:True" not in " ".join(f["advice"])
    assert rep["run"] == {}  # the release is not part of the parallel layout


def test_numberless_title_above_the_full_message_is_an_echo() -> None:
    rep = report_for("115_qanything_issue303_numberless_title_above_full_message.txt")
    assert [(f["kind"], f["line"]) for f in rep["findings"]] == [("fragmentation", 4)]


def test_numberless_message_of_another_rank_is_kept() -> None:
    from memtune.diagnose.report import drop_numberless_echoes
    from memtune.diagnose.scan import Finding
    from memtune.diagnose.torch_era import TorchRange

    keys = ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes")
    none = dict.fromkeys(keys)
    full = dict(none, requested_bytes=1 << 20, reserved_unallocated_bytes=0)
    r5 = Finding(
        "capacity", "CUDA out of memory. Tried to allocate ...", 9, "log", rank=5, numbers=full, torch=TorchRange()
    )
    r3 = Finding("capacity", "CUDA out of memory", 4, "log", rank=3, numbers=none, torch=TorchRange())
    title = Finding("capacity", "CUDA out of memory", 1, "log", numbers=none, torch=TorchRange())
    vllm_check = Finding("capacity", "No available memory for the cache blocks", 12, "log", numbers=none)
    # rank 3's cut message is its own failure; the rankless title and nothing else is an echo
    assert drop_numberless_echoes([title, r3, r5, vllm_check]) == [r3, r5, vllm_check]
    # with no full message in the input, nothing is an echo (111: title and description)
    assert len(report_for("111_internlm_issue186_chinese_title_pip_list_torch113.txt")["findings"]) == 2


def test_release_printed_by_the_script() -> None:
    (f,) = report_for("114_llmc_issue206_script_prints_pytorch_release.txt")["findings"]
    assert (f["torch"]["version"], f["torch"]["source"]) == ("2.2.2", "stated in the input")


def test_async_backend_message_inside_another_exception() -> None:
    (f,) = report_for("116_tgi_issue563_async_backend_message_inside_panic.txt")["findings"]
    assert (f["kind"], f["device"]) == ("capacity", 0) and "cudaMallocAsync" in f["note"]
    # "Device limit" is cudaMemGetInfo's total; the user-set fraction cap is a detail
    assert (f["numbers"]["total_bytes"], f["details"]["pytorch_limit_bytes"]) == (b("22.20 GiB"), b("22.20 GiB"))


@pytest.mark.parametrize(
    "name",
    [
        "66_comfyui_issue4936_allocation_on_device_async_backend.txt",
        "67_fitdit_comfyui_issue2_allocation_on_device.txt",
        "108_comfyui_issue5038_error_report_type_and_message_apart.txt",
        "109_comfyui_issue2021_allocation_on_device_0_would_exceed.txt",
    ],
)
def test_async_backend_messages_without_a_field_list_state_no_number(name: str) -> None:
    """Older builds (and ComfyUI's report) print no field list: no number is made up."""
    (f,) = report_for(name)["findings"]
    assert f["kind"] == "capacity" and all(v is None for v in f["numbers"].values())
    assert "pytorch_limit_bytes" not in f.get("details", {})


def test_unrecognized_wording_alone_is_still_a_finding() -> None:
    # nothing else in the input: the last-resort finding stays (issue 11, item 2)
    rep = report_for("87_vllm_issue39788_kimi_title_cuda_oom.txt")
    assert [f["kind"] for f in rep["findings"]] == ["unrecognized-gpu-memory-error"]


# The knob each stack's capacity advice must name (data/frameworks.yaml), so a vLLM user is
# never told to run plan_memory.py and a Megatron user never told about --gpu-memory-utilization.
CAPACITY_KNOB = {
    "megatron": "plan_memory.py",
    "vllm": "--gpu-memory-utilization",
    "sglang": "--mem-fraction-static",
    "verl": "gpu_memory_utilization",
    "openrlhf": "--vllm_gpu_memory_utilization",
    "nemo-rl": "gpu_memory_utilization",
    "tensorrt-llm": "free_gpu_memory_fraction",
    "deepspeed": "ZeRO",
    "fsdp": "FULL_SHARD",
    "hf-trainer": "per_device_train_batch_size",
    "ms-swift": "--per_device_train_batch_size",
    "comfyui": "--lowvram",
    "diffusers": "enable_model_cpu_offload",
    "torchrun": "gradient accumulation",
    "jax": "XLA_PYTHON_CLIENT_PREALLOCATE",
    None: "batch",
}


def report_for(name: str, torch_version=None) -> dict:
    """The full report (framework, release, advice) of one sample, its source line left out."""
    from memtune.diagnose.report import build_report
    from memtune.diagnose.scan import Scanner
    from memtune.diagnose.table import load_rows

    lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
    scanner = Scanner(load_patterns(), name)
    for n, line in numbered("\n".join(lines[1:]), first_line=2):
        scanner.feed(n, line)
    found = scanner.finish()
    return build_report(
        found,
        load_rows(),
        load_patterns(),
        [name],
        {name: scanner.run_facts} if scanner.run_facts else {},
        framework_hits={name: scanner.framework_hits},
        torch_version=torch_version,
        hints_seen={name: sorted(scanner.hint_lines)},
    )


def test_every_sample_has_an_advice_expectation() -> None:
    assert set(ADVICE) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_sample_framework_and_release(name: str) -> None:
    rep = report_for(name)
    framework, releases = ADVICE[name]
    assert rep["frameworks"][name]["name"] == framework
    got = [(f["torch"]["since"], f["torch"]["before"], f["torch"]["expandable_segments"]) for f in rep["findings"]]
    # findings are reported most important first; compare in file order
    order = sorted(range(len(rep["findings"])), key=lambda i: rep["findings"][i]["line"])
    assert [got[i] for i in order] == releases


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_sample_advice_fits_release_and_stack(name: str) -> None:
    rep = report_for(name)
    fw = rep["frameworks"][name]
    for f in rep["findings"]:
        advice = " ".join(f["advice"])
        status = f["torch"]["expandable_segments"]
        if status in ("rejected", "ignored", "ignored-on-platform"):
            # never the setting this release rejects or ignores; say what works there
            assert "expandable_segments:True" not in advice
            assert "upgrade" in advice or "max_split_size_mb" in advice or f["kind"] != "fragmentation"
        if f["kind"] == "fragmentation" and status == "accepted":
            assert "expandable_segments:True" in advice
        if f["kind"] == "capacity" and not (f.get("note") or "").startswith("fragmentation vs capacity undecided"):
            assert CAPACITY_KNOB[fw["name"]] in advice, (fw["name"], advice)
        if fw["name"] is not None and not fw["in_megatron"] and f["kind"] in ("fragmentation", "capacity"):
            assert "plan_memory.py" not in advice
            assert "outside-megatron" in {n["code"] for n in f["evidence_notes"]}
        assert f["confidence"]["level"] in ("high", "medium", "low") and f["confidence"]["why"]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("117_chatglm_finetuning_issue28_free_far_above_request.txt", True),  # 37.32 GiB free, 128 MiB asked
        ("118_vlm_rl_issue12_free_above_request_html_escaped.txt", True),  # 572.50 MiB free, 258 MiB asked
        ("01_pytorch_pr99699_new_format_capacty.txt", False),  # 8.44 MiB free, 138 MiB asked
        ("03_transformers_issue3360_legacy.txt", False),  # 575.88 MiB free, 786 MiB asked
        # 'allowed' names the cap that refused it: memory-fraction-cap says so instead
        ("101_therock_issue2118_hip_pytest_memory_fraction_cap.txt", False),
    ],
)
def test_free_memory_above_the_request_is_called_out(name: str, expected: bool) -> None:
    findings = [f for f in report_for(name)["findings"] if f["kind"] in ("capacity", "fragmentation")]
    notes = {n["code"]: n["text"] for f in findings for n in f["evidence_notes"]}
    assert ("free-exceeds-request" in notes) is expected
    if expected:
        assert "more than the" in notes["free-exceeds-request"] and "nvidia-smi" in notes["free-exceeds-request"]


XLA_SAMPLES = sorted(n for n, rows in EXPECTED.items() if any(r[0] == "xla-oom" for r in rows))


@pytest.mark.parametrize("name", XLA_SAMPLES)
def test_xla_oom_advice_is_xla_s_own(name: str) -> None:
    """JAX's documented knobs (docs.jax.dev, GPU memory allocation), never PyTorch's allocator."""
    rep = report_for(name)
    (f,) = rep["findings"]
    advice = " ".join(f["advice"])
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in advice
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in advice
    assert "PYTORCH_CUDA_ALLOC_CONF" not in advice and "expandable_segments" not in advice
    assert "plan_memory.py" not in advice  # a Megatron planner cannot size a JAX program
    assert f["confidence"]["level"] == "high"
