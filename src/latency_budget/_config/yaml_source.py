"""Read YAML with PyYAML's safe loader, keeping line numbers and rejecting duplicate keys.

The budget loader needs the line of every key for its error messages, which plain
``yaml.safe_load`` throws away. We compose the node tree with a ``SafeLoader`` and turn
it into ``Located*`` values that remember where each key and item stood.
"""

from __future__ import annotations

from typing import Any

import yaml

from latency_budget._config.errors import BudgetConfigError

__all__ = ["LocatedDict", "LocatedList", "parse_yaml"]


class LocatedDict(dict[str, Any]):
    """A mapping that remembers its own line and the line of each key (1-based)."""

    line: int
    key_lines: dict[str, int]


class LocatedList(list[Any]):
    """A sequence that remembers its own line and the line of each item (1-based)."""

    line: int
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """The safe loader; only its node composition and scalar construction are used."""


_PLAIN_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def _convert(node: yaml.Node, loader: _Loader, source: str, path: str) -> Any:
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_COLLECTION_TAGS:
        raise BudgetConfigError(source, node.start_mark.line + 1, path, f"invalid YAML: unsupported tag {node.tag!r}")
    if isinstance(node, yaml.MappingNode):
        result = LocatedDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise BudgetConfigError(source, key_line, path, "mapping keys must be plain strings")
            key = loader.construct_object(key_node)
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise BudgetConfigError(source, key_line, path, "YAML merge keys ('<<') are not supported")
            if not isinstance(key, str):
                key = str(key)
            child = f"{path}.{key}" if path else key
            if key in result:
                raise BudgetConfigError(
                    source, key_line, child, f"duplicate key (first defined on line {result.key_lines[key]})"
                )
            result.key_lines[key] = key_line
            result[key] = _convert(value_node, loader, source, child)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = LocatedList()
        items.line = node.start_mark.line + 1
        items.item_lines = []
        for index, item in enumerate(node.value):
            items.item_lines.append(item.start_mark.line + 1)
            items.append(_convert(item, loader, source, f"{path}[{index}]"))
        return items
    return loader.construct_object(node)


def parse_yaml(text: str, source: str) -> Any:
    """Parse one YAML document into Located values; syntax errors become BudgetConfigError."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else None
            problem = exc.problem or str(exc)
            raise BudgetConfigError(source, line, "", f"invalid YAML: {problem}") from None
        except yaml.YAMLError as exc:
            raise BudgetConfigError(source, None, "", f"invalid YAML: {exc}") from None
        if node is None:
            return None
        try:
            return _convert(node, loader, source, "")
        except yaml.constructor.ConstructorError as exc:
            mark = exc.problem_mark
            line = mark.line + 1 if mark is not None else None
            raise BudgetConfigError(source, line, "", f"invalid YAML: {exc.problem}") from None
    finally:
        loader.dispose()
