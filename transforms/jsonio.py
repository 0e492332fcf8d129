"""Fast JSON parsing with input limits (orjson).

Oversized messages and deeply nested documents are rejected with a :class:`DecodeError`
before or right after parsing, so hostile input cannot exhaust memory or the stack.
"""

from __future__ import annotations

from typing import Any

import orjson

from transforms.errors import DecodeError

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_DEPTH", "check_depth", "loads_object"]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64


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
    if len(data) > max_bytes:
        raise DecodeError(format_id, None, f"message of {len(data)} bytes exceeds the limit of {max_bytes}", data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(format_id, None, f"invalid JSON: {exc}", data) from exc
    if not isinstance(value, dict):
        raise DecodeError(format_id, None, f"expected a JSON object, found {type(value).__name__}", data)
    # orjson itself refuses nesting beyond 1024; walk the document only when it could be deeper
    # than the limit (counting openers is a cheap upper bound on the depth).
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return value
    try:
        check_depth(value, max_depth)
    except ValueError as exc:
        raise DecodeError(format_id, None, str(exc), data) from exc
    return value
