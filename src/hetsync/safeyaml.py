"""YAML for user input, with limits: scenario files and ``--set`` values.

PyYAML's ``safe_load`` builds no arbitrary objects, but it still lets a
document hurt the process that reads it, and it hides mistakes:

- a key given twice keeps the last value without a word (``lr: 0.1`` near
  the top, ``lr: 5`` further down);
- aliases share nodes, so a few lines (``a: &a [x, x]``, ``b: &b [*a, *a]``,
  ...: "billion laughs") stand for a structure of 10⁹ values, which every
  later walk over it (a message, a copy, a JSON dump) then expands;
- nesting is composed recursively, so a document 5,000 levels deep raises
  ``RecursionError`` from inside the library;
- the pure-Python reader takes tens of microseconds per value, so a large
  document (a megabyte of small lists) takes minutes to read.

:func:`safe_load` reads like ``yaml.safe_load`` and refuses all four with a
:class:`YAMLLimitError` (a ``yaml.YAMLError``) that says what and where:
reading stops once it has taken ``MAX_READ_S`` seconds. (Scenario files are
also bounded in size before they are read: ``hetsync.limits``.)
"""

from __future__ import annotations

import time
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_READ_S", "YAMLLimitError", "safe_load"]

MAX_DEPTH = 100  # nested mappings and lists; a scenario needs about 4
MAX_ALIAS_NODES = 10_000  # values that aliases may add to the document as written
MAX_READ_S = 10.0  # seconds reading one document may take (a scenario takes milliseconds)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLLimitError(yaml.YAMLError):
    """A document that breaks one of the limits (the message says which)."""

    def __init__(self, message: str, mark: Any = None) -> None:
        line = f" (line {mark.line + 1})" if mark is not None else ""
        super().__init__(f"{message}{line}")


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._written = 0  # nodes as written (an alias counts once, as itself)
        self._open: set[str] = set()  # anchors whose node is still being composed
        self._limit_s = MAX_READ_S
        self._deadline = time.monotonic() + MAX_READ_S

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if time.monotonic() > self._deadline:
            raise YAMLLimitError(
                f"reading it took longer than {self._limit_s:g} s, stopped here: a scenario is a few hundred "
                "lines at most; write long per-worker lists with generators such as {linspace: [a, b]}",
                self.peek_event().start_mark,
            )
        if self.check_event(AliasEvent):
            event = self.peek_event()
            if event.anchor in self._open:
                raise YAMLLimitError(f"alias *{event.anchor} refers to a node that contains it", event.start_mark)
            self._written += 1
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        event = self.peek_event()
        if self._depth >= MAX_DEPTH:
            raise YAMLLimitError(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        anchor = getattr(event, "anchor", None)
        self._depth += 1
        self._written += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)

    def compose_document(self) -> Node:
        node = super().compose_document()
        limit = self._written + MAX_ALIAS_NODES
        if _expanded_size(node, limit) > limit:
            raise YAMLLimitError(
                f"aliases expand the document by more than {MAX_ALIAS_NODES} values: write the values out",
                node.start_mark,
            )
        return node  # type: ignore[no-any-return]

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base` merges on purpose; keys given beside it win
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable: the constructor says so
                    continue
                if duplicate:
                    raise YAMLLimitError(f"key {key!r} is given twice: keep one", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def _expanded_size(root: Node, limit: int) -> int:
    """Nodes in the document with every alias replaced by a copy of its
    target; counting stops once it passes ``limit``. Iterative (no recursion)
    and memoized by node, so a bomb is measured without being expanded."""
    size: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in size:
            continue
        kids = _children(node)
        if children_done or not kids:
            size[id(node)] = min(limit + 1, 1 + sum(size[id(k)] for k in kids))
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
    return size[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the limits above: raises :class:`YAMLLimitError`
    (duplicate key, alias expansion, depth) or another ``yaml.YAMLError``."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except RecursionError:  # not reached within MAX_DEPTH; a guard all the same
        raise YAMLLimitError("nested too deeply") from None
    finally:
        loader.dispose()
