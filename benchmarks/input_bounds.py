#!/usr/bin/env python3
"""Time and peak memory of every hostile-input reproduction of issue 16 (target: < 5 s, < 500 MB).

Builds each attack input in a temporary directory (the same builders as
tests/test_input_bounds.py), runs the real helper in a fresh interpreter under a 1 GiB
address-space cap, and prints exit code, wall time and the child's peak RSS (os.wait4),
plus the first line of stderr. Prints the figures; asserts nothing.

usage: python3 benchmarks/input_bounds.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import attack_inputs as attack  # noqa: E402
from bounded_run import run_bounded  # noqa: E402

TIME_TARGET_S = 5.0
RSS_TARGET_MB = 500.0


def cases(tmp: Path) -> list[tuple[str, str, list[str]]]:
    """(label, helper, argv) for every reproduction."""
    bomb_peft = str(attack.yaml_bomb_in_peft(tmp / "bomb_peft.yaml"))
    bomb_unused = str(attack.yaml_bomb_unused(tmp / "bomb_unused.yaml"))
    deep_yaml = str(attack.yaml_deep(tmp / "deep.yaml"))
    deep_json = str(attack.json_deep(tmp / "deep.json"))
    big = str(attack.oversized(tmp / "big.txt"))
    doubling = str(attack.doubling_script(tmp / "doubling.sh"))
    appending = str(attack.self_appending_array(tmp / "appending.sh"))
    recipe = str(attack.long_recipe(tmp / "recipe.py"))
    estimate = ["--preset", "llama3-8b", "--gpus", "8"]
    return [
        ("alias bomb peft.target_modules  check_env", "check_env", ["--config", bomb_peft]),
        ("alias bomb peft.target_modules  estimate", "estimate_memory", [*estimate, "--config", bomb_peft]),
        ("alias bomb unused key           check_env", "check_env", ["--config", bomb_unused]),
        ("alias bomb unused key           regather", "regather_config", ["--config", bomb_unused]),
        ("100k-deep YAML config           check_env", "check_env", ["--config", deep_yaml]),
        ("100k-deep JSON --signature      sign_skill", "sign_skill", ["verify", "--signature", deep_json]),
        ("/dev/zero --script              check_env", "check_env", ["--script", "/dev/zero"]),
        ("/dev/zero --env-file            check_env", "check_env", ["--env-file", "/dev/zero"]),
        ("/dev/zero --hf-config           estimate", "estimate_memory", ["--hf-config", "/dev/zero", "--gpus", "8"]),
        (
            "/dev/zero --megatron-args       estimate",
            "estimate_memory",
            ["--megatron-args", "/dev/zero", "--gpus", "8"],
        ),
        ("/dev/zero --recipe              regather", "regather_config", ["--recipe", "/dev/zero"]),
        ("/dev/zero --signature           sign_skill", "sign_skill", ["verify", "--signature", "/dev/zero"]),
        ("/dev/zero --root-cert           sign_skill", "sign_skill", ["verify", "--root-cert", "/dev/zero"]),
        ("3 MiB --config                  check_env", "check_env", ["--config", big]),
        ("12 x A=$A$A$A$A                 check_env", "check_env", ["--script", doubling]),
        ('10 x A+=("${A[@]}")             check_env', "check_env", ["--script", appending]),
        ("5,000-assignment --recipe       regather", "regather_config", ["--recipe", recipe]),
    ]


def main() -> int:
    print(f"{'reproduction':44} {'exit':>4} {'seconds':>8} {'peak MB':>8}  first stderr line")
    worst_s = worst_mb = 0.0
    with tempfile.TemporaryDirectory(prefix="input_bounds.") as tmp:
        for label, helper, argv in cases(Path(tmp)):
            result = run_bounded(helper, *argv, timeout=300)
            first = (result.stderr.strip().splitlines() or [""])[0]
            first = first.replace(tmp, "$TMP")
            print(f"{label:44} {result.returncode:>4} {result.seconds:>8.2f} {result.peak_rss_mb:>8.1f}  {first[:110]}")
            worst_s, worst_mb = max(worst_s, result.seconds), max(worst_mb, result.peak_rss_mb)
    met = worst_s < TIME_TARGET_S and worst_mb < RSS_TARGET_MB
    print(
        f"worst: {worst_s:.2f} s, {worst_mb:.1f} MB peak RSS; target < {TIME_TARGET_S:.0f} s and < {RSS_TARGET_MB:.0f} MB: "
        f"{'met' if met else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
