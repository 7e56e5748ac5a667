"""Markdown structure used by the lint: headings, anchors, tables and links."""

from __future__ import annotations

from memtune.lint import markdown

DOC = """# Title

## `PYTORCH_CUDA_ALLOC_CONF` syntax

```
## not a heading (code fence)
```

## Failure Diagnosis

| Symptom | Cause | Confirm | Fix |
| --- | --- | --- | --- |
| `a | b` in code | c | d | e |

See [x](other.md#top) and ![img](pic.png) and [ref][r].

[r]: refs/thing.md

## Title
"""


def test_headings_skip_code_fences_and_carry_lines() -> None:
    found = markdown.headings(markdown.tokens(DOC))
    assert [(h.level, h.text, h.line) for h in found] == [
        (1, "Title", 1),
        (2, "`PYTORCH_CUDA_ALLOC_CONF` syntax", 3),
        (2, "Failure Diagnosis", 9),
        (2, "Title", 19),
    ]


def test_anchors_follow_github_rules_including_repeats() -> None:
    anchors = markdown.anchors(markdown.headings(markdown.tokens(DOC)))
    assert anchors == {"title", "pytorch_cuda_alloc_conf-syntax", "failure-diagnosis", "title-1"}


def test_table_cells_and_section() -> None:
    (table,) = markdown.tables(markdown.tokens(DOC))
    assert table.header == ("Symptom", "Cause", "Confirm", "Fix")
    assert table.section == "Failure Diagnosis" and table.line == 11
    assert len(table.rows) == 1 and len(table.rows[0]) == 4


def test_links_include_images_and_reference_definitions() -> None:
    found = [(link.target, link.kind, link.line) for link in markdown.links(markdown.tokens(DOC))]
    assert found == [("other.md#top", "link", 15), ("pic.png", "image", 15), ("refs/thing.md", "link", 15)]
