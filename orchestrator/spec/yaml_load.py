"""A YAML loader for specs that cannot hurt the driver: bounded in size, time and memory.

``load_yaml(text, origin)`` refuses, with a ``SpecError`` (exit 2) whose message is bounded:

- a file over ``MAX_BYTES``;
- a duplicate key in any mapping (YAML keeps the last one in silence);
- more than ``MAX_ALIASES`` aliases (``*name``), or a document whose expanded size (every
  alias counted as the nodes it stands for) passes ``MAX_NODES``: an alias bomb is a few
  hundred bytes that expand to billions of nodes once anything walks them;
- YAML that does not parse (the message names the file and the line).

It is PyYAML's ``SafeLoader`` (no Python objects, no tags) with those checks; the expanded
size is counted on the constructed value with a walk that stops at the bound, so the check
itself is bounded.
"""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.errors import SpecError

__all__ = ["load_yaml", "MAX_BYTES", "MAX_ALIASES", "MAX_NODES", "MAX_MESSAGE", "bounded"]

MAX_BYTES = 256 * 1024  # a spec is a page or two; a trace or request file is not a spec
MAX_ALIASES = 64
MAX_NODES = 200_000
MAX_MESSAGE = 2000  # characters of an error message


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" ... ({len(text) - limit} more characters)"


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise SpecError(f"more than {MAX_ALIASES} YAML aliases (*name), line "
                                f"{mark.line + 1}: a spec needs few; refusing what may be an "
                                "alias bomb")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise SpecError(f"duplicate key {bounded(repr(key), 80)} at line "
                                f"{key_node.start_mark.line + 1} (first at line {seen[key]}): "
                                "YAML would keep the last in silence; keep one")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _too_big(value: Any, limit: int) -> bool:
    """Whether ``value`` has more than ``limit`` nodes when every shared part is counted
    each time it appears (stops as soon as it knows)."""
    count = 0
    stack = [value]
    while stack:
        v = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def load_yaml(text: str, origin: str) -> Any:
    """The spec's YAML as plain data; ``SpecError`` for anything in the module doc."""
    size = len(text.encode())
    if size > MAX_BYTES:
        raise SpecError(f"{origin}: {size:,} bytes; a spec may have at most {MAX_BYTES:,} "
                        "(list long value sets as a range, or point workload at a file)")
    loader = _Loader(text)
    loader.name = str(origin)  # marks name the file, not "<unicode string>"
    try:
        data = loader.get_single_data()
    except SpecError as err:
        raise SpecError(f"{origin}: {err}") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{origin}: not valid YAML: {bounded(str(err), 600)}") from None
    finally:
        loader.dispose()
    if _too_big(data, MAX_NODES):
        raise SpecError(f"{origin}: expands to more than {MAX_NODES:,} values (aliases "
                        "counted as what they repeat); refusing what may be an alias bomb")
    return data
