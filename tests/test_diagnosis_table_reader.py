"""The line reader of the Failure Diagnosis table gives markdown-it's rows, or steps aside.

memtune.diagnose.table reads plain tables (text and code spans) itself, because importing
markdown-it is most of what the table costs each run; anything else goes to markdown-it.
Each case below is read both ways: equal rows, or the line reader declining (None).
"""

from __future__ import annotations

import pytest

from memtune.diagnose.table import markdown_rows, simple_rows
from memtune.files.paths import SKILL_MD

HEAD = "# Skill\n\n## Failure Diagnosis\n\n| Symptom | Cause | Confirm | Fix |\n| --- | --- | --- | --- |\n"


def test_skill_md_is_read_by_the_line_reader_with_markdown_it_s_rows() -> None:
    source = SKILL_MD.read_text(encoding="utf-8")
    fast = simple_rows(source)
    assert fast is not None, "SKILL.md's table is no longer plain: the fast path is never taken"
    assert fast == markdown_rows(source)


@pytest.mark.parametrize(
    "body",
    [
        # escaped pipes in and out of code spans, unicode, a lone ">"
        "| `a \\| b` x | y \\| z | offload layers > 0 | ≥ 2 × PP |\n",
        "| `CUDA out of memory` at   start | c | `nvidia-smi` | f |\n| second | c2 | d2 | f2 |\n\n## Next\n",
    ],
)
def test_plain_tables_read_the_same_both_ways(body: str) -> None:
    source = HEAD + body
    fast = simple_rows(source)
    assert fast is not None
    assert fast == markdown_rows(source)


@pytest.mark.parametrize(
    "body",
    [
        "| **bold** OOM | c | d | f |\n",  # emphasis: plain text differs from the source
        "| see [the docs](https://x) | c | d | f |\n",  # a link
        "| a <br> b | c | d | f |\n",  # HTML
        "| AT&amp;T | c | d | f |\n",  # an entity
        "| ``double`` | c | d | f |\n",  # a double-backtick code span
        "| a | b | c | d |\nA paragraph right under the table.\n",  # lazy continuation: markdown-it decides
        "| only | three | cells |\n| a | b | c | d |\n",  # GFM pads a short row
    ],
)
def test_other_markdown_is_left_to_markdown_it(body: str) -> None:
    source = HEAD + body
    assert simple_rows(source) is None
    assert markdown_rows(source)  # and the full reader still reads it


def test_a_heading_inside_a_code_fence_is_not_the_section() -> None:
    source = "```\n## Failure Diagnosis\n```\n" + HEAD + "| a | b | c | d |\n"
    assert simple_rows(source) == markdown_rows(source)
