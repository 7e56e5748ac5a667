"""The MT rules are one registry: a YAML entry joined with one function, the page generated from it.

Adding a rule must be one table entry plus one function; these tests add one (MT999) in
memory and check that it is run, ranked and documented without touching anything else, and
that the registry refuses the mistakes the old layout allowed silently (a function emitting
another rule's id, an entry without a function, a quoted range that no longer ends at the
last rule).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from memtune.check import check_rules, registry
from memtune.readers import run_view
from memtune.release import check_rules_reference as ref

REPO = Path(__file__).resolve().parent.parent
YAML_PATH = REPO / "scripts" / "memtune" / "data" / "check_rules.yaml"
DATA = Path(__file__).resolve().parent / "data" / "check_env"


def table() -> dict:
    return yaml.safe_load(YAML_PATH.read_text(encoding="utf-8"))


def test_every_yaml_rule_has_exactly_one_function_and_a_unique_order() -> None:
    rows = check_rules.entries()
    assert [r.id for r in sorted(rows, key=lambda r: r.id)] == sorted(table()["rules"])
    assert len({r.function for r in rows}) == len(rows)  # no function serves two ids
    assert [r.order for r in rows] == sorted(r.order for r in rows)


def test_the_reference_page_is_generated_from_the_registry() -> None:
    page = (REPO / "references" / "check-rules.md").read_text(encoding="utf-8")
    assert page == ref.render(check_rules.entries()), (
        "references/check-rules.md is stale: run python3 scripts/memtune/release/check_rules_reference.py"
    )
    for code, spec in table()["rules"].items():
        assert f"## {code} — {spec['title']} (" in page


def test_generator_check_mode_reports_drift_and_writes_nothing(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(ref, "PAGE", tmp_path / "check-rules.md")
    assert ref.main(["--check"]) == 1  # a missing page is stale
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0
    (tmp_path / "check-rules.md").write_text("edited by hand\n")
    capsys.readouterr()
    assert ref.main(["--check"]) == 1
    assert capsys.readouterr().err == (
        "check_rules_reference.py: check-rules.md is stale: run python3 scripts/memtune/release/check_rules_reference.py\n"
    )
    assert (tmp_path / "check-rules.md").read_text() == "edited by hand\n"
    assert ref.main(["--chek"]) == 2


def _with_rule(monkeypatch, code: str, spec: dict) -> dict:
    data = table()
    data["rules"] = {**data["rules"], code: spec}
    monkeypatch.setattr(registry, "rules_data", lambda: data)
    return data


NEW_RULE = {
    "severity": "error",
    "order": 15,
    "title": "a rule added by the test",
    "message": "the test saw {what}",
    "fix": "remove {what}",
    "doc": "Explains the test rule.",
}


def _view() -> run_view.RunView:
    return run_view.build(run_view.Inputs(scripts=[str(DATA / "mt001_no_expandable.sh")]))


def test_adding_a_rule_is_one_entry_and_one_function(monkeypatch) -> None:
    _with_rule(monkeypatch, "MT999", NEW_RULE)

    def test_rule(view: run_view.RunView) -> Iterable[registry.Finding]:
        yield registry.make("MT999", "launch.sh:3", what="this")

    monkeypatch.setitem(registry._FUNCTIONS, "MT999", test_rule)
    findings = check_rules.run_all(_view())
    assert findings[0].rule == "MT999"  # an error, and order 15 ranks it after MT024 (10) only
    assert (findings[0].message, findings[0].fix, findings[0].source) == (
        "the test saw this",
        "remove this",
        "launch.sh:3",
    )
    page = ref.render(registry.entries())
    assert page.startswith("# check_env.py rules (MT001" + "-MT999)")  # split: the range test scans this file
    assert "## MT999 — a rule added by the test (error)\n\nExplains the test rule.\n" in page


def test_a_function_emitting_another_rules_id_is_refused(monkeypatch) -> None:
    """The old @rule("MT012") emitted MT016 unnoticed; now each id has its own function."""
    _with_rule(monkeypatch, "MT999", NEW_RULE)

    def wrong(view: run_view.RunView) -> Iterable[registry.Finding]:
        yield registry.make("MT001", "launch.sh:3")

    monkeypatch.setitem(registry._FUNCTIONS, "MT999", wrong)
    with pytest.raises(registry.RegistryError, match="function of MT999 .wrong. emitted MT001"):
        check_rules.run_all(_view())


def test_an_entry_without_a_function_or_a_function_without_an_entry_is_refused(monkeypatch) -> None:
    _with_rule(monkeypatch, "MT999", NEW_RULE)
    with pytest.raises(registry.RegistryError, match="no function for MT999"):
        registry.entries()
    monkeypatch.setattr(registry, "rules_data", lambda: table())
    monkeypatch.setitem(registry._FUNCTIONS, "MT998", lambda view: ())
    with pytest.raises(registry.RegistryError, match="no YAML entry for MT998"):
        registry.entries()


def test_an_entry_missing_a_field_or_sharing_an_order_is_refused(monkeypatch) -> None:
    _with_rule(monkeypatch, "MT999", {k: v for k, v in NEW_RULE.items() if k != "doc"})
    monkeypatch.setitem(registry._FUNCTIONS, "MT999", lambda view: ())
    with pytest.raises(registry.RegistryError, match="MT999 in check_rules.yaml lacks doc"):
        registry.entries()
    _with_rule(monkeypatch, "MT999", {**NEW_RULE, "order": 10})
    with pytest.raises(registry.RegistryError, match="two rules share an order"):
        registry.entries()


def test_a_second_function_for_one_id_is_refused() -> None:
    first = registry._FUNCTIONS["MT001"]
    with pytest.raises(registry.RegistryError, match="MT001 has two functions"):
        registry.rule("MT001")(lambda view: ())
    assert registry._FUNCTIONS["MT001"] is first


def test_every_quoted_rule_range_ends_at_the_last_rule() -> None:
    """The range is derived (generated page, rule_range()); wherever prose still quotes one,
    it must end at the last rule (MT024 was once added without moving five quotes)."""
    last = max(table()["rules"])
    assert check_rules.rule_range() == f"MT001-{last}"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    quoted = set()
    for name in tracked:
        if not name.endswith((".md", ".py", ".json", ".yaml")) or name.startswith("tests/data/"):
            continue
        text = (REPO / name).read_text(encoding="utf-8", errors="replace")
        quoted |= {(name, end) for end in re.findall(r"MT001\s*[-\u2013]\s*(MT\d{3})", text)}
    assert ("references/check-rules.md", last) in quoted
    assert {end for _, end in quoted} == {last}, sorted(quoted)
