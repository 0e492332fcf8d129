"""Fast JSON parsing with input limits (orjson).

Oversized messages and deeply nested documents are rejected before or right after parsing, so
hostile input cannot exhaust memory or the stack: :func:`loads_object` (a whole message) raises
a :class:`DecodeError`; :func:`loads_limited` (any JSON text, e.g. one embedded in a field: a
MongoDB image, a Qlik ``dataSchema``, a Kafka key) raises :class:`JsonLimitError`, which the
caller turns into a DecodeError naming the field.
"""

from __future__ import annotations

from typing import Any

import orjson

from transforms.errors import DecodeError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "JsonLimitError",
    "check_depth",
    "loads_limited",
    "loads_object",
]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64


class JsonLimitError(ValueError):
    """A JSON text is invalid, larger or more deeply nested than allowed; the message says which."""


def check_depth(value: Any, max_depth: int) -> int:
    """The nesting depth of a parsed JSON value; raises ValueError past ``max_depth``."""
    depth = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > max_depth:
            raise ValueError(f"nesting deeper than {max_depth}")
        depth = max(depth, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item if isinstance(v, dict | list))
    return depth


def _within_depth(value: Any, levels_left: int) -> bool:
    """Whether ``value`` (a container at the current level) nests no deeper than allowed.

    ``levels_left`` counts the levels still allowed below the current one. Recursion depth is
    bounded by the limit, and orjson only produces ``dict``/``list`` containers.
    """
    for item in value.values() if type(value) is dict else value:
        kind = type(item)
        if (kind is dict or kind is list) and (levels_left <= 0 or not _within_depth(item, levels_left - 1)):
            return False
    return True


def loads_limited(
    data: bytes | str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    what: str = "document",
) -> Any:
    """Parse one JSON value within the limits, or raise :class:`JsonLimitError`.

    >>> loads_limited('[[1]]', max_depth=2)
    [[1]]
    """
    if len(data) > max_bytes:
        raise JsonLimitError(f"{what} of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JsonLimitError(f"invalid JSON: {exc}") from exc
    if not isinstance(value, dict | list):
        return value
    # orjson itself refuses nesting beyond 1024; walk the document only when it could be deeper
    # than the limit (counting openers is a cheap upper bound on the depth).
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return value
    # the recursive walk is the fast one; its recursion is bounded by the limit
    if 1 <= max_depth <= 256 and _within_depth(value, max_depth - 1):
        return value
    try:
        check_depth(value, max_depth)
    except ValueError as exc:
        raise JsonLimitError(str(exc)) from exc
    return value


def loads_object(
    data: bytes | str,
    format_id: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> dict[str, Any]:
    """Parse one JSON object, or raise a :class:`DecodeError` that names the format.

    >>> loads_object(b'{"a": 1}', "canal-json")
    {'a': 1}
    """
    try:
        value = loads_limited(data, max_bytes=max_bytes, max_depth=max_depth, what="message")
    except JsonLimitError as exc:
        raise DecodeError(format_id, None, str(exc), data) from exc
    if not isinstance(value, dict):
        raise DecodeError(format_id, None, f"expected a JSON object, found {type(value).__name__}", data)
    return value
