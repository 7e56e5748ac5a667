"""SKILL.md's Failure Diagnosis table: well-formed, every kind maps to exactly one row."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.diagnose.patterns import load_patterns
from memtune.diagnose.table import COLUMNS, TableError, load_rows, lookup_symptom, row_for_kind, rows_matching
from memtune.files.paths import SKILL_MD

PATTERNS = load_patterns()


@pytest.fixture(scope="module")
def rows():
    return load_rows(SKILL_MD)


def test_table_is_a_real_four_column_markdown_table(rows) -> None:
    assert len(rows) >= len(PATTERNS.kinds)
    assert all(r.symptom and r.cause_md and r.confirm_md and r.fix_md for r in rows)


@pytest.mark.parametrize("kind", sorted(PATTERNS.kinds))
def test_every_kind_maps_to_exactly_one_row(rows, kind: str) -> None:
    key = PATTERNS.kinds[kind].table_key
    assert len(rows_matching(rows, key)) == 1, f"{kind}: key {key!r}"


def test_kinds_map_to_distinct_rows(rows) -> None:
    picked = [row_for_kind(rows, k, info.table_key).index for k, info in PATTERNS.kinds.items()]
    assert len(picked) == len(set(picked))


def test_ambiguous_or_missing_mapping_is_refused(rows) -> None:
    with pytest.raises(TableError, match="2 rows"):
        row_for_kind(rows + [rows[0]], "fragmentation", PATTERNS.kinds["fragmentation"].table_key)
    with pytest.raises(TableError, match="no row"):
        row_for_kind(rows, "capacity", "no such phrase anywhere")


def _skill(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "SKILL.md"
    p.write_text("---\nname: x\n---\n\n# X\n\n" + body, encoding="utf-8")
    return p


def test_cells_keep_markdown_and_plain_symptom(tmp_path: Path) -> None:
    p = _skill(
        tmp_path,
        "## Failure Diagnosis\n\n| Symptom | Cause | Confirm | Fix |\n| --- | --- | --- | --- |\n"
        "| `CUDA out of memory` now | c | `nvidia-smi` | **do** it |\n\n## Next\n\n| Symptom | Cause | Confirm | Fix |\n|-|-|-|-|\n| other | o | o | o |\n",
    )
    (row,) = load_rows(p)
    assert row.symptom == "CUDA out of memory now"
    assert row.symptom_md == "`CUDA out of memory` now"
    assert row.fix_md == "**do** it"


@pytest.mark.parametrize(
    "body,match",
    [
        ("## Other\n\ntext\n", "no table"),
        ("## Failure Diagnosis\n\nno table here\n", "no table"),
        (
            "## Failure Diagnosis\n\n| Symptom | Cause | Fix |\n| --- | --- | --- |\n| a | b | c |\n",
            "Symptom | Cause | Fix",
        ),
    ],
)
def test_malformed_section_is_a_one_line_error(tmp_path: Path, body: str, match: str) -> None:
    with pytest.raises(TableError, match=match) as err:
        load_rows(_skill(tmp_path, body))
    assert "\n" not in str(err.value)
    assert " | ".join(COLUMNS) in str(err.value)


@pytest.mark.parametrize(
    "query,expected_key_kind",
    [
        ("OOM on one rank only while the others have headroom", "fragmentation"),
        ("NCCL_GRAPH_REGISTER assertion with cuda graphs", "cudagraph-nccl-register"),
        ("cublas alloc failed", "cublas-oom"),
        ("ValueError pipeline parallelism with CPU offloading", "cpu-offload-pp"),
        ("Unrecognized CachingAllocator option", "alloc-conf-invalid"),
        ("tried to allocate more than the whole GPU", "impossible-request"),
        ("expandible segment already set but still OOM", "capacity"),  # typo tolerated
        ("contiguous microbatches virtual pipeline stage", "vpp-microbatches"),
    ],
)
def test_symptom_lookup_ranks_the_right_row_first(rows, query: str, expected_key_kind: str) -> None:
    matches = lookup_symptom(rows, query)
    assert matches, query
    want = row_for_kind(rows, expected_key_kind, PATTERNS.kinds[expected_key_kind].table_key)
    assert matches[0].row == want, [m.row.symptom[:50] for m in matches]
    assert [m.score for m in matches] == sorted((m.score for m in matches), reverse=True)


def test_symptom_lookup_without_overlap_returns_nothing(rows) -> None:
    assert lookup_symptom(rows, "zzzz qqqq") == []
