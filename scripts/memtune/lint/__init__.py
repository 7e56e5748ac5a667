"""Tier-1 static validation of the skill package (what ``scripts/lint_skill.py`` runs).

One module per family of checks, each returning a list of ``Finding``s:

- ``frontmatter``  the agentskills.io rules on SKILL.md's YAML header (+ project metadata rules)
- ``skills_ref``   the reference validator (PyPI ``skills-ref``) on a copy named after the skill
- ``skill_body``   body length, required sections, Failure Diagnosis table, helper commands
- ``cards``        skill-card.md sections, card.yaml and evals/evals.json against their schemas
- ``links``        every relative Markdown link (and #anchor) resolves inside the package
- ``security``     secrets and pipe-to-shell in every shipped file; ``pysafety`` for Python code
- ``runner``       runs them all in order

The rule tables (allowed fields, required sections, secret patterns, network modules) live
in ``memtune/data/lint/*.yaml`` so that changing a rule never means editing code.
"""
