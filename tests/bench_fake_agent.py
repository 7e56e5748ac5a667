#!/usr/bin/env python3
"""A tiny deterministic agent for the benchmark harness tests (``command:`` agent).

Reads the prompt on stdin. Without the skill it answers with a fixed generic sentence.
With the skill (MEMTUNE_BENCH_SKILL_DIR set) it "activates" only when the prompt looks
like a GPU-memory question, then answers with the SKILL.md lines that share the most
words with the prompt — a crude retrieval agent whose output depends on the skill's
real text, so the harness is exercised end to end without any model.

FAKE_AGENT_LOG: append one line per call (case, condition, attempt) to this file.
FAKE_AGENT_FAIL_CASE: exit 3 for this case id (an agent failure).
"""

import json
import os
import re
import sys
from pathlib import Path

MEMORY_WORDS = ("memory", "oom", "alloc", "lora", "vpp", "offload", "recompute", "nccl", "tp8", "pp8", "launch")


def words(text):
    return {w for w in re.findall(r"[a-z_]{4,}", text.lower())}


def main():
    prompt = sys.stdin.read()
    case = os.environ.get("MEMTUNE_BENCH_CASE_ID", "")
    log = os.environ.get("FAKE_AGENT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(
                f"{case} {os.environ.get('MEMTUNE_BENCH_CONDITION')} {os.environ.get('MEMTUNE_BENCH_ATTEMPT')}\n"
            )
    if case and case == os.environ.get("FAKE_AGENT_FAIL_CASE"):
        sys.stderr.write("fake agent: told to fail\n")
        return 3
    skill_dir = os.environ.get("MEMTUNE_BENCH_SKILL_DIR")
    lowered = prompt.lower()
    if not skill_dir or not any(w in lowered for w in MEMORY_WORDS):
        print(
            json.dumps(
                {
                    "answer": "I would look at the documentation and try again.",
                    "activated_skill": None,
                    "tokens_in": len(prompt.split()),
                    "tokens_out": 9,
                }
            )
        )
        return 0
    skill_md = Path(skill_dir) / "SKILL.md"
    name = re.search(r"^name:\s*(\S+)", skill_md.read_text(encoding="utf-8"), re.M).group(1)
    asked = words(prompt)
    lines = [ln.strip() for ln in skill_md.read_text(encoding="utf-8").splitlines() if len(ln.strip()) > 20]
    ranked = sorted(lines, key=lambda ln: (-len(words(ln) & asked), lines.index(ln)))
    answer = "\n".join(ranked[:12])
    print(
        json.dumps(
            {
                "answer": answer,
                "activated_skill": name,
                "commands": [],
                "tokens_in": len(prompt.split()) + 4000,
                "tokens_out": len(answer.split()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
