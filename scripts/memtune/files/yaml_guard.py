"""Parse a user's YAML without letting aliases or nesting take the machine down.

``yaml.safe_load`` shares an aliased node instead of copying it, so a "billion laughs"
document (nine levels of ``&aN [*aN-1, *aN-1, ...]``) loads small; but every consumer that
walks the result (flattening a Bridge config, validating card.yaml against a schema,
printing JSON) visits each alias path, and memory or time explodes there. So the node
graph is measured *before* construction: the number of nodes it expands to (aliases
counted every time they are used) and its depth, both bounded far above any real
config. A recursive alias is refused too. Nothing here executes anything: only PyYAML's
safe loader is used.
"""

from __future__ import annotations

from typing import Any

MAX_EXPANDED_NODES = 200_000  # a large Bridge config is a few thousand nodes
MAX_DEPTH = 64  # real configs nest fewer than 15 levels


class YamlLimitError(ValueError):
    """The document is valid YAML but too big or too deep once aliases are expanded."""


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_node(root: Any, max_nodes: int = MAX_EXPANDED_NODES, max_depth: int = MAX_DEPTH) -> None:
    """Raise YamlLimitError when ``root`` expands beyond the bounds or refers to itself.

    Iterative (a 100k-deep document must not hit Python's recursion limit here) and linear
    in the number of *distinct* nodes: sizes of shared nodes are memoised, so measuring a
    bomb costs nothing near what expanding it would.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, depth)
    open_nodes: set[int] = set()  # entered, children not all measured: the current path
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            kids = _children(node)
            size = 1 + sum(measured[id(k)][0] for k in kids)
            depth = 1 + max((measured[id(k)][1] for k in kids), default=0)
            if size > max_nodes:
                raise YamlLimitError(f"expands to more than {max_nodes:,} nodes through aliases (&anchor/*alias)")
            if depth > max_depth:
                raise YamlLimitError(f"is nested deeper than {max_depth} levels")
            measured[key] = (size, depth)
            continue
        if key in measured:
            continue
        if key in open_nodes:
            raise YamlLimitError("contains an alias that refers to itself (recursive anchor)")
        if len(open_nodes) >= max_depth:
            raise YamlLimitError(f"is nested deeper than {max_depth} levels")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in measured)


def compose(text: str) -> Any:
    """The checked node graph of ``text`` (None for an empty document).

    Raises yaml.YAMLError for a syntax error and YamlLimitError for a bomb; a document so
    deep that PyYAML's own recursive composer gives up is reported as too deep as well.
    """
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise YamlLimitError(f"is nested deeper than {MAX_DEPTH} levels") from None
    if node is not None:
        check_node(node)
    return node


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, after the node graph passed check_node."""
    import yaml

    node = compose(text)
    if node is None:
        return None
    return yaml.constructor.SafeConstructor().construct_document(node)
