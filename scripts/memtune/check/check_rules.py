"""The MT rules: memory misconfigurations visible before a Megatron job starts.

The entry point of the check pipeline (``check_env`` calls :func:`run_all`). A rule is one
entry in ``data/check_rules.yaml`` (severity, order, words, documentation) plus one
``@rule`` function in :mod:`~memtune.check.allocator_rules` or
:mod:`~memtune.check.layout_rules`; :mod:`~memtune.check.registry` joins the two and
``references/check-rules.md`` is generated from the result. A finding always names the line
it comes from and the exact line to add or change.
"""

from __future__ import annotations

from memtune.check import allocator_rules, layout_rules  # noqa: F401  (their @rule decorators fill the registry)
from memtune.check.facts import regather_inputs
from memtune.check.registry import SEVERITY_ORDER, Finding, entries, rule_range, run_all

__all__ = ["SEVERITY_ORDER", "Finding", "entries", "regather_inputs", "rule_range", "run_all"]
