"""Megatron Bridge Python recipes (``llama3_70b_pretrain_config(...)`` plus ``cfg.x.y = v``).

A recipe is code, and nothing a user gives us is run; the config it builds depends on Bridge's
recipe defaults, which are not here. So the recipe's syntax tree is read for what it states
literally - the recipe call with its literal arguments, the literal overrides - and the helper
refuses in one line that names them and what to pass instead (the YAML the recipe writes, or
an HF config with the parallel sizes).
"""

from __future__ import annotations

from pathlib import Path

from memtune.errors import InputError


def recipe_summary(text: str) -> tuple[list[str], list[str]]:
    """(recipe calls with their literal arguments, literal overrides) read from a Bridge Python
    recipe's syntax tree - never executed: ``llama3_70b_pretrain_config(seq_length=8192)`` and
    ``cfg.model.tensor_model_parallel_size = 4``."""
    import ast

    tree = ast.parse(text)
    calls: list[str] = []
    overrides: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name.endswith(("_config", "_recipe")):
                args = [
                    f"{kw.arg}={kw.value.value!r}"
                    for kw in node.keywords
                    if kw.arg and isinstance(kw.value, ast.Constant)
                ]
                calls.append(f"{name}({', '.join(args)})")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                dotted = ast.unparse(target) if isinstance(target, ast.Attribute) else ""
                parts = dotted.split(".")
                if len(parts) >= 3:  # cfg.section.field = literal
                    overrides.append(f"{'.'.join(parts[1:])}={node.value.value!r}")
    return list(dict.fromkeys(calls)), list(dict.fromkeys(overrides))


def refuse_python_recipe(path: str | Path) -> None:
    """Raise InputError for a Bridge Python recipe (``*.py``): it is never run, so the config it
    builds is unknown here; the one line names the recipe call and the literal overrides read
    from its syntax tree, and what to pass instead."""
    p = Path(path)
    if p.suffix != ".py":
        return
    from memtune.files.textfile import read_text

    try:
        calls, overrides = recipe_summary(read_text(p, "a Megatron Bridge recipe", strict=False))
    except (SyntaxError, ValueError, RecursionError):
        calls, overrides = [], []
    found = "; ".join(filter(None, (", ".join(calls[:3]), ", ".join(overrides[:8]))))
    raise InputError(
        f"{p}: a Python recipe is never run here{f' (it calls {found})' if found else ''}; pass --config "
        "with the YAML the recipe writes (cfg.to_yaml() / the run's config dump) plus these overrides as "
        "KEY=VALUE, or --hf-config with --tp/--pp/--mbs/--gbs/--seq-length"
    )
