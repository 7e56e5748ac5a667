"""runtime_memory: every spelling of the formats, streaming big logs, verdicts, the report and the chart.

The format families are generated from what each producer prints (Megatron-LM's report_memory
in every era, Bridge's memory_keys, DeepSpeed's see_memory_usage, launcher prefixes), so a
variant the samples do not happen to hold is still covered. Verdicts are checked with runs
that look alike but differ in the one thing that matters (a slow leak against jitter, warm-up
that stops against growth that does not).
"""

from __future__ import annotations

import gzip
import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helper_cli import invoke
from memtune.runtime.lines import parse_reports
from memtune.runtime.read import read_measurements
from memtune.runtime.verdicts import trend_verdict

MIB = 2**20
DATA = Path(__file__).resolve().parent / "data" / "runtime-samples"

PREFIXES = {
    "none": (None, ""),
    "torchrun": (5, "[default5]:"),
    "slurm": (5, "5: "),
    "pytorch-rank": (5, "[rank5]: "),
    "mpi": (5, "[1,5]<stdout>:"),
    "timestamp": (None, "2026-12-04 10:00:00,123 "),
    "slurm+torchrun": (5, "5: [default5]:"),
}


def megatron_line(era: str, rank_tag: bool, decimals: str, it: int, values: tuple[float, float, float, float]) -> str:
    """A report_memory line as the given era printed it (written here from its format, not copied)."""
    a, ma, r, mr = values
    fmt = {"repr": "{}", "two": "{:.2f}"}[decimals]
    reserved, max_reserved = ("cached", "max cached") if era == "2019" else ("reserved", "max reserved")
    label = f"after {it} iterations" if era == "2019" else f"(after {it} iterations)"
    body = (
        f"{label} memory (MB) | allocated: {fmt.format(a)} | max allocated: {fmt.format(ma)} | "
        f"{reserved}: {fmt.format(r)} | {max_reserved}: {fmt.format(mr)}"
    )
    if era == "2026":
        body += f" | total device memory used: {fmt.format(mr + 1500.0)}"
    return f"[Rank 5] {body}" if rank_tag else body


@pytest.mark.parametrize(
    ("era", "rank_tag", "decimals", "prefix"),
    [
        (e, t, d, p)
        for e, t, d, p in itertools.product(("2019", "2020", "2026"), (True, False), ("repr", "two"), PREFIXES)
        if not (e == "2026" and d == "repr")
    ],
)
def test_report_memory_family(era: str, rank_tag: bool, decimals: str, prefix: str) -> None:
    values = (1234.5678901234, 2345.25, 3000.0, 3100.0)
    prefix_rank, prefix_text = PREFIXES[prefix]
    line = prefix_text + megatron_line(era, rank_tag, decimals, 10, values)
    [reading] = parse_reports(line, "log", 1)
    assert reading.kind == "report_memory"
    assert reading.rank == (5 if rank_tag else prefix_rank)
    assert reading.iteration == 10
    tolerance = 0.006 * MIB if decimals == "two" else 1
    assert abs(reading.allocated_bytes - values[0] * MIB) <= tolerance
    assert abs(reading.max_allocated_bytes - values[1] * MIB) <= tolerance
    assert abs(reading.reserved_bytes - values[2] * MIB) <= tolerance
    assert abs(reading.max_reserved_bytes - values[3] * MIB) <= tolerance
    assert (reading.device_used_bytes is not None) == (era == "2026")


@pytest.mark.parametrize(
    "keys",
    [
        # Bridge's default names (bytes -> gigabytes), and a user's own logger.memory_keys names
        (
            "mem-allocated-gigabytes",
            "mem-max-allocated-gigabytes",
            "mem-reserved-gigabytes",
            "mem-max-reserved-gigabytes",
        ),
        ("allocated", "peak-allocated", "reserved", "peak-reserved"),
        ("alloc_gigabytes", "max_alloc_gigabytes", "reserved_gigabytes", "max_reserved_gigabytes"),
    ],
)
def test_bridge_memory_keys_are_matched_by_their_words(keys: tuple[str, str, str, str]) -> None:
    line = "[Rank 3] (after 7 iterations) memory (GB) | " + " | ".join(
        f"{k}: {v}" for k, v in zip(keys, (12.345, 30.0, 20.1, 31.5), strict=True)
    )
    line += " | mem-active-gigabytes: 99.0 | mem-max-inactive-gigabytes: 98.0 | mem-allocated-count: 571"
    [r] = parse_reports(line, "log", 1)
    assert (r.kind, r.rank, r.iteration) == ("bridge_memory", 3, 7)
    assert (r.allocated_bytes, r.max_allocated_bytes) == (12_345_000_000, 30_000_000_000)
    assert (r.reserved_bytes, r.max_reserved_bytes) == (20_100_000_000, 31_500_000_000)


def test_lines_that_only_look_like_reports_are_not_read() -> None:
    for text in (
        "Theoretical memory footprints: weight and optimizer=57438.81 MB",
        "peak memory (MB) estimate follows",
        "memory (MB) | learning rate: 1e-4 | loss: 2.0",
        "CPU Virtual Memory:  used = 50.5 GB, percent = 40.2%",
        "MA 1.0 GB and then something else",
    ):
        assert parse_reports(text, "log", 1) == []


def test_interleaved_ranks_and_checkpoint_reports(tmp_path: Path) -> None:
    lines = []
    for it in range(1, 41):
        for rank in (3, 0, 2, 1):
            lines.append(
                f"[default{rank}]:[Rank {rank}] (after {it} iterations) memory (MB) | allocated: "
                f"{1000 + rank:.2f} | max allocated: {5000 + rank:.2f} | reserved: 6000.00 | max reserved: 6000.00"
            )
        if it == 20:
            lines.append(
                "[Rank 0] (before save_checkpoint for iteration 20) memory (MB) | allocated: 9000.00 | "
                "max allocated: 9500.00 | reserved: 9600.00 | max reserved: 9600.00"
            )
    log = tmp_path / "train.log.gz"
    log.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    m = read_measurements([str(log)])
    assert [r.rank for r in m.ranks] == [0, 1, 2, 3]
    rank0 = m.rank(0)
    assert rank0 is not None
    assert rank0.peak_allocated_bytes == 9500 * MIB  # the checkpoint report's peak counts
    assert trend_verdict(rank0).kind == "stable"  # but the series is the (after K iterations) one


def _series_log(values: list[float], rank: int = 0) -> str:
    return "".join(
        f"[Rank {rank}] (after {i} iterations) memory (MB) | allocated: {v:.2f} | max allocated: {v + 4000:.2f} | "
        f"reserved: {v + 5000:.2f} | max reserved: {v + 5000:.2f}\n"
        for i, v in enumerate(values, start=1)
    )


@pytest.mark.parametrize(
    ("name", "values", "kind"),
    [
        ("flat", [2000.0] + [3000.0] * 40, "stable"),
        ("jitter", [2000.0] + [3000.0 + (80 if i % 2 else -80) for i in range(40)], "stable"),
        ("slow leak", [2000.0] + [3000.0 + 3.0 * i for i in range(40)], "leak"),
        ("late leak", [2000.0] + [3000.0] * 10 + [3000.0 + 48.0 * i for i in range(30)], "leak"),
        ("warm-up then flat", [2000.0, 2600.0, 2900.0, 3000.0] + [3100.0] * 37, "stable"),
        ("step then flat", [2000.0] + [3000.0] * 20 + [3400.0] * 20, "stable"),
        ("too short", [2000.0, 3000.0, 3100.0, 3200.0], "warming-up"),
        ("one report", [2000.0], "no-series"),
    ],
)
def test_trend_verdicts(tmp_path: Path, name: str, values: list[float], kind: str) -> None:
    log = tmp_path / "run.log"
    log.write_text(_series_log(values))
    rank = read_measurements([str(log)]).ranks[0]
    assert trend_verdict(rank).kind == kind, name


def test_huge_log_is_sampled_but_peaks_and_leak_stay_exact(tmp_path: Path) -> None:
    # 8 ranks x 6000 iterations in 64 KiB chunks: every later chunk is sampled.
    ranks = range(0, 64, 8)
    rows = []
    for it in range(1, 6001):
        rows.append(f" iteration {it:8d}/ 6000 | consumed samples: {it * 8:10d} | lm loss: 2.0E+00 |")
        for r in ranks:
            a = 30000.0 + 100 * r + (0.25 * it if r == 56 else 0.0)
            rows.append(
                f"{r // 8}: [Rank {r}] (after {it} iterations) memory (MB) | allocated: {a:.2f} | "
                f"max allocated: {a + 12000 + min(it, 5) * 10:.2f} | reserved: {a + 15000:.2f} | max reserved: {a + 15000:.2f}"
            )
    log = tmp_path / "big.log"
    log.write_text("\n".join(rows) + "\n")
    m = read_measurements([str(log)], chunk_size=64 << 10)
    assert m.sources[0].sampled
    for r in ranks:
        rank = m.rank(r)
        assert rank is not None
        leak = 0.25 * 6000 if r == 56 else 0.0
        assert rank.peak_allocated_bytes == round((30000 + 100 * r + leak + 12000 + 50) * MIB)
        assert rank.peak_reserved_bytes == round((30000 + 100 * r + leak + 15000) * MIB)
        assert rank.points[-1].iteration == 6000
        assert trend_verdict(rank).kind == ("leak" if r == 56 else "stable")


def test_a_restart_in_a_sampled_log_is_read_line_by_line(tmp_path: Path) -> None:
    # A second job appends to the same log: iterations restart and the peak counter resets,
    # and a short spike before the restart must not be lost between samples.
    def run(start_peak: float, spike_at: int | None) -> list[str]:
        out = []
        for it in range(1, 3001):
            peak = start_peak + (9000.0 if spike_at is not None and it >= spike_at else 0.0)
            out.append(
                f"[Rank 0] (after {it} iterations) memory (MB) | allocated: 1000.00 | max allocated: {peak:.2f} | "
                f"reserved: {peak + 500:.2f} | max reserved: {peak + 500:.2f}"
            )
        return out

    log = tmp_path / "restarted.log"
    log.write_text("\n".join(run(20000.0, spike_at=2990) + run(21000.0, spike_at=None)) + "\n")
    rank = read_measurements([str(log)], chunk_size=32 << 10).ranks[0]
    assert rank.peak_allocated_bytes == 29000 * MIB


def test_a_table_split_across_chunks_is_read_whole(tmp_path: Path) -> None:
    summary = (DATA / "h200-mcore" / "memory_summary_c07_h8192_l4_tied_distopt.txt").read_text()
    filler = "x" * 100 + "\n"
    for pad in (0, 1500, 4000, 4090):
        log = tmp_path / f"pad{pad}.log"
        log.write_text(filler * (pad // 101) + "y" * (pad % 101) + "\n" + summary + filler * 50)
        m = read_measurements([str(log)], chunk_size=4096)
        assert m.ranks[0].peak_reserved_bytes == 58470 * MIB, pad


def test_nvidia_smi_csv_variants(tmp_path: Path) -> None:
    texts = {
        "header-units": "memory.used [MiB], memory.total [MiB]\n61335 MiB, 143771 MiB\n",
        "indexed": "index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H200, 61335 MiB, 143771 MiB\n"
        "1, NVIDIA H200, 100 MiB, 143771 MiB\n",
        "command-noheader": "$ nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits\n61335, 143771\n",
        "command-noheader-units": "nvidia-smi --query-gpu=index,memory.total,memory.used --format=csv,noheader\n"
        "0, 143771 MiB, 61335 MiB\n",
    }
    for name, text in texts.items():
        path = tmp_path / f"{name}.txt"
        path.write_text(text)
        gpu = read_measurements([str(path)]).gpus[0]
        assert (gpu.gpu, gpu.used_bytes, gpu.total_bytes) == (0, 61335 * MIB, 143771 * MIB), name


def test_memory_stats_pretty_json_list_holds_two_dumps(tmp_path: Path) -> None:
    dump = json.loads((DATA / "h200-runtime" / "memory_stats_leak_rank3.json").read_text())
    later = {**dump, "allocated_bytes.all.peak": dump["allocated_bytes.all.peak"] + 7}
    path = tmp_path / "stats_rank7.json"
    path.write_text(json.dumps([dump, later], indent=2))
    m = read_measurements([str(path)])
    assert [r.rank for r in m.ranks] == [7]  # from the file name
    assert m.ranks[0].readings_parsed == 2
    assert m.ranks[0].peak_allocated_bytes == dump["allocated_bytes.all.peak"] + 7


# ----------------------------------------------------------------------------- the CLI


def test_text_report_reads_well(tmp_path: Path) -> None:
    result = invoke("runtime_memory", str(DATA / "h200-runtime" / "torchrun_leak.log"), "--gpu", "H200")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Card limit: 140.40 GiB (--gpu H200)" in out
    assert "LEAK: rank 3" in out and "STABLE on rank(s) 0-2" in out


def test_comparison_with_the_run_configuration() -> None:
    result = invoke(
        "runtime_memory",
        str(DATA / "h200-mcore" / "memory_summary_c07_h8192_l4_tied_distopt.txt"),
        str(DATA / "h200-mcore" / "nvidia_smi_c07_h8192_l4_tied_distopt.txt"),
        "--megatron-args",
        str(DATA / "config" / "c07_h8192_l4_tied_distopt.sh"),
        "--gpus",
        "1",
        "--gpu",
        "H200",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    stage = json.loads(result.stdout)["comparison"]["stages"][0]
    assert stage["measured_allocated_bytes"] == 47691 * MIB
    assert stage["allocator_reserve_bytes"] == (58470 - 47691) * MIB
    assert stage["measured_outside_bytes"] == (61335 - 58470) * MIB
    parts = [stage["model_gap_bytes"], stage["allocator_reserve_bytes"], stage["outside_gap_bytes"]]
    assert stage["gap_bytes"] == sum(parts)
    names = ["model", "allocator-reserve", "outside-pytorch"]
    assert stage["explains"] == names[max(range(3), key=lambda i: abs(parts[i]))]


def test_hydra_overrides_among_the_files_need_a_config(tmp_path: Path) -> None:
    result = invoke("runtime_memory", str(DATA / "public" / "mlm-pr5662-two-decimals.log"), "train.micro_batch_size=2")
    assert result.exit_code == 2 and "--config" in result.stderr


def test_plot_is_an_svg_with_one_line_per_rank_and_the_limit(tmp_path: Path) -> None:
    chart = tmp_path / "memory.svg"
    result = invoke(
        "runtime_memory", str(DATA / "h200-runtime" / "torchrun_leak.log"), "--gpu", "H200", "--plot", str(chart)
    )
    assert result.exit_code == 0, result.stderr
    root = ET.fromstring(chart.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 5  # four ranks' allocated, and the reserved curve of the top rank
    texts = [t.text or "" for t in root.iter(f"{ns}text")]
    assert any("card 140.4 GiB" in t for t in texts)
    assert any(t == "rank 3 allocated" for t in texts)


def test_plot_without_series_draws_bars(tmp_path: Path) -> None:
    chart = tmp_path / "peaks.svg"
    result = invoke("runtime_memory", str(DATA / "public" / "bridge-perf-job-4-ranks-glued.log"), "--plot", str(chart))
    assert result.exit_code == 0, result.stderr
    root = ET.fromstring(chart.read_text())
    assert len(root.findall("{http://www.w3.org/2000/svg}rect")) >= 4 * 2


def test_plot_never_overwrites_an_input(tmp_path: Path) -> None:
    log = tmp_path / "train.svg"
    log.write_text((DATA / "public" / "mlm-pr5662-two-decimals.log").read_text())
    before = log.read_bytes()
    result = invoke("runtime_memory", str(log), "--plot", str(log))
    assert result.exit_code == 2 and "one of the inputs" in result.stderr
    assert log.read_bytes() == before


def test_estimate_memory_plot(tmp_path: Path) -> None:
    chart = tmp_path / "estimate.svg"
    result = invoke("estimate_memory", "--example", "--plot", str(chart))
    assert result.exit_code == 0, result.stderr
    root = ET.fromstring(chart.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text or "" for t in root.iter(f"{ns}text")]
    assert {"stage 0", "stage 3"} <= set(texts)
    assert any(t.startswith("card ") for t in texts)
    assert "Chart written to" in result.stdout


def test_estimate_memory_without_plot_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert invoke("estimate_memory", "--example").exit_code == 0
    assert list(tmp_path.iterdir()) == []
