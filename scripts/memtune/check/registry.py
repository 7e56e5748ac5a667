"""The one registry of MT rules: each entry of ``data/check_rules.yaml`` joined with its function.

A rule used to live in five places (a function, a separate ORDER tuple, the YAML words, a
hand-written reference page and the "MT001-MT0NN" range quoted in several files), and one
function could emit another rule's id. Here a rule is exactly two things:

* its entry under ``rules:`` in ``data/check_rules.yaml`` - severity, order, title, the
  message and fix templates, and the Markdown ``doc`` that references/check-rules.md is
  generated from (``release/check_rules_reference.py``);
* one function decorated ``@rule("MTnnn")`` that yields that rule's findings only.

:func:`entries` joins the two and refuses a YAML entry without a function, a function
without an entry, or an id registered twice; :func:`run_all` refuses a finding whose id is
not the id of the function that produced it. Both are programming errors, so they raise
:class:`RegistryError` (the tests run every fixture through them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtune.readers.run_view import rules_data

if TYPE_CHECKING:
    from memtune.readers.run_view import RunView

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


class RegistryError(RuntimeError):
    """The rule table and the rule functions disagree (a bug in this package, not bad input)."""


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    message: str
    fix: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
        }


RuleFunction = Callable[["RunView"], Iterable[Finding]]

#: id -> function, filled by the @rule decorators when the rule modules are imported.
_FUNCTIONS: dict[str, RuleFunction] = {}


def rule(code: str) -> Callable[[RuleFunction], RuleFunction]:
    """Register ``func`` as the one function of rule ``code`` (an id in check_rules.yaml)."""

    def register(func: RuleFunction) -> RuleFunction:
        if code in _FUNCTIONS and _FUNCTIONS[code] is not func:
            raise RegistryError(f"{code} has two functions: {_FUNCTIONS[code].__name__} and {func.__name__}")
        _FUNCTIONS[code] = func
        return func

    return register


@dataclass(frozen=True)
class RuleEntry:
    """One row of the registry: the YAML words and the function that applies them."""

    id: str
    severity: str
    order: int
    title: str
    message: str
    fix: str
    doc: str
    severity_note: str | None
    function: RuleFunction

    @property
    def heading_severity(self) -> str:
        return self.severity_note or self.severity


def _entry(code: str, spec: Mapping[str, Any], function: RuleFunction) -> RuleEntry:
    missing = [k for k in ("severity", "order", "title", "message", "fix", "doc") if k not in spec]
    if missing:
        raise RegistryError(f"{code} in check_rules.yaml lacks {', '.join(missing)}")
    if spec["severity"] not in SEVERITY_ORDER:
        raise RegistryError(f"{code}: severity {spec['severity']!r} is not one of {', '.join(SEVERITY_ORDER)}")
    return RuleEntry(
        code,
        spec["severity"],
        int(spec["order"]),
        str(spec["title"]),
        str(spec["message"]),
        str(spec["fix"]),
        str(spec["doc"]).rstrip("\n"),
        spec.get("severity_note"),
        function,
    )


def entries() -> tuple[RuleEntry, ...]:
    """Every rule in output order (``order``), the table and the functions checked to match."""
    _load_rule_modules()
    table = rules_data()["rules"]
    by_id = dict(_FUNCTIONS)
    no_function = sorted(set(table) - set(by_id))
    no_entry = sorted(set(by_id) - set(table))
    if no_function or no_entry:
        raise RegistryError(
            "check_rules.yaml and the @rule functions disagree: "
            + "; ".join(
                part
                for part in (
                    f"no function for {', '.join(no_function)}" if no_function else "",
                    f"no YAML entry for {', '.join(no_entry)}" if no_entry else "",
                )
                if part
            )
        )
    rows = [_entry(code, table[code], by_id[code]) for code in table]
    orders = [r.order for r in rows]
    if len(set(orders)) != len(orders):
        raise RegistryError("two rules share an order in check_rules.yaml: " + str(sorted(orders)))
    return tuple(sorted(rows, key=lambda r: r.order))


def _load_rule_modules() -> None:
    """Import the modules whose @rule decorators fill the registry (idempotent)."""
    from memtune.check import allocator_rules, layout_rules  # noqa: F401


def rule_ids() -> list[str]:
    """Every rule id, ascending (MT001, MT002, ...)."""
    return sorted(rules_data()["rules"])


def rule_range() -> str:
    """The range quoted in prose (``MT001-MT0NN``), derived from the table, never typed."""
    ids = rule_ids()
    return f"{ids[0]}-{ids[-1]}"


class _Safe(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def make(
    code: str, where: str, /, severity: str | None = None, variant: str | None = None, **values: object
) -> Finding:
    """A finding of rule ``code`` at ``where`` (file:line), words filled from check_rules.yaml.

    ``variant`` picks one of the entry's ``variants`` (another message of the same rule, with
    its own severity); ``severity`` lowers or raises one finding (an unknown version...).
    """
    spec = rules_data()["rules"][code]
    if variant is not None:
        spec = {**spec, **spec["variants"][variant]}
    return Finding(
        code,
        severity or spec["severity"],
        _fill(spec["message"], values),
        _fill(spec["fix"], values),
        where or "-",
    )


def _fill(template: str, values: Mapping[str, object]) -> str:
    """str.format with !r support, leaving unknown placeholders visible."""
    try:
        return template.format_map(_Safe(values))
    except (KeyError, ValueError, IndexError):
        return template


def run_all(view: RunView) -> list[Finding]:
    """Every finding, errors first, then warnings, then info; within a severity by the rule's order."""
    table = entries()
    findings: list[Finding] = []
    for entry in table:
        for finding in entry.function(view):
            if finding.rule != entry.id:
                raise RegistryError(f"the function of {entry.id} ({entry.function.__name__}) emitted {finding.rule}")
            findings.append(finding)
    rank = {entry.id: i for i, entry in enumerate(table)}
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], rank[f.rule]))
    return findings
