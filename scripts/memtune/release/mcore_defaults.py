#!/usr/bin/env python3
"""Write data/mcore_config_defaults.yaml from a Megatron-Core source tree: the class defaults of
the TransformerConfig / ModelParallelConfig fields that data/megatron_flags.yaml calls
memory-relevant but not modelled (its warned and refused classes).

Why: a Megatron Bridge run-config dump writes every TransformerConfig field, defaults included,
so the Bridge reader can only tell a feature the user turned on from a default by comparing the
value with the class default (``readers/bridge_config.py``: ``unmodelled_model_fields``).

    python3 scripts/memtune/release/mcore_defaults.py --source DIR/megatron/core --version 0.19.2

DIR is an unzipped megatron-core wheel (``pip download --no-deps megatron-core==X``); not run in
CI, which has no Megatron-Core.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

if not __package__:  # run as a file: make memtune importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.dont_write_bytecode = True  # and leave no bytecode cache inside the signed tree

from memtune.files.paths import DATA_DIR  # noqa: E402
from memtune.readers.megatron_flags import flag_classes  # noqa: E402
from memtune.release.generated_page import run_command  # noqa: E402

PROG = "mcore_defaults.py"
FILES = ("model_parallel_config.py", "transformer/transformer_config.py")


def _arithmetic(node: ast.expr) -> object:
    """A default written as arithmetic on numbers (``1024 * 1024``); anything else raises."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Pow)):
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)):
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            return left**right
    return ast.literal_eval(node)


def literal_defaults(path: Path) -> dict[str, object]:
    """``name: type = <literal>`` fields of every class in ``path`` (arithmetic on numbers
    included); a default that is not a literal (``field(...)``, ``torch.float32``) is left out."""
    out: dict[str, object] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                try:
                    out[stmt.target.id] = _arithmetic(stmt.value)
                except ValueError:
                    continue
    return out


@click.command(help=(__doc__ or "").split("\n\n")[0])
@click.option(
    "--source", required=True, type=click.Path(exists=True, file_okay=False), help="megatron/core of a release"
)
@click.option("--version", "version", required=True, help="that release's version, written into the file")
def command(source: str, version: str) -> int:
    defaults: dict[str, object] = {}
    for name in FILES:
        defaults.update(literal_defaults(Path(source) / name))
    table = flag_classes()
    wanted = {k: defaults[k] for k in sorted(set(table.warned) | set(table.refused)) if k in defaults}
    lines = [
        "# Defaults of Megatron-Core's TransformerConfig / ModelParallelConfig fields that",
        "# data/megatron_flags.yaml classes as warned or refused (memory-relevant, not modelled), read",
        f"# from megatron-core {version} ({', '.join(FILES)}) by scripts/memtune/release/mcore_defaults.py.",
        "# The Bridge reader warns about such a field only when a config sets it to another value.",
        f"version: {version!r}",
        "defaults:",
        *(f"  {k}: {json.dumps(v)}" for k, v in wanted.items()),
    ]
    (DATA_DIR / "mcore_config_defaults.yaml").write_text("\n".join(lines) + "\n")
    click.echo(f"{len(wanted)} defaults written to {DATA_DIR / 'mcore_config_defaults.yaml'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run :func:`command`; a usage error is one line and exit 2, like the helpers'."""
    return run_command(command, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())
