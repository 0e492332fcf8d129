"""Fast JSON parsing with input limits (orjson).

Oversized messages and deeply nested documents are rejected before or right after parsing, so
hostile input cannot exhaust memory or the stack: :func:`loads_object` (a whole message) raises
a :class:`DecodeError`; :func:`loads_limited` (any JSON text, e.g. one embedded in a field: a
MongoDB image, a Qlik ``dataSchema``, a Kafka key) raises :class:`JsonLimitError`, which the
caller turns into a DecodeError naming the field.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from transforms.errors import DecodeError, caused_by

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


def _depth_within(value: Any, max_depth: int) -> int | None:
    """The nesting depth of ``value`` (a parsed container), or ``None`` past ``max_depth``.

    Level by level, so that there is no call per container; orjson only produces ``dict`` and
    ``list`` containers.
    """
    dicts: list[dict[str, Any]] = [value] if type(value) is dict else []
    lists: list[list[Any]] = [] if dicts else [value]
    depth = 0
    while dicts or lists:
        depth += 1
        if depth > max_depth:
            return None
        next_dicts: list[dict[str, Any]] = []
        next_lists: list[list[Any]] = []
        add_dict, add_list = next_dicts.append, next_lists.append
        for container in dicts:
            for item in container.values():
                kind = type(item)
                if kind is dict:
                    add_dict(item)
                elif kind is list:
                    add_list(item)
        for items in lists:
            for item in items:
                kind = type(item)
                if kind is dict:
                    add_dict(item)
                elif kind is list:
                    add_list(item)
        dicts, lists = next_dicts, next_lists
    return depth


class _MemberDepths:
    """The nesting depths of recently checked object members, by their exact JSON text.

    A message that embeds a large structure that repeats from message to message (a Kafka
    Connect schema: hundreds of containers) would otherwise be walked in full every time. The
    text determines the structure, so a remembered depth is exact for any member that
    serializes to the same text. Bounded by entries and total bytes (least recently used first).
    """

    def __init__(self, max_entries: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        self._depths: OrderedDict[bytes, int] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0

    def get(self, text: bytes) -> int | None:
        depth = self._depths.get(text)
        if depth is not None:
            self._depths.move_to_end(text)
        return depth

    def put(self, text: bytes, depth: int) -> None:
        if len(text) > self._max_bytes // 8 or text in self._depths:
            return
        self._depths[text] = depth
        self._bytes += len(text)
        while len(self._depths) > self._max_entries or self._bytes > self._max_bytes:
            dropped, _ = self._depths.popitem(last=False)
            self._bytes -= len(dropped)


_MEMBER_DEPTHS = _MemberDepths()


def _member_within(member: Any, max_depth: int) -> bool:
    """Whether an object member (a container) nests no deeper than ``max_depth``.

    Its JSON text bounds its depth by its openers, else its remembered depth decides, else it is
    walked (and its depth remembered).
    """
    try:
        text = orjson.dumps(member)
    except orjson.JSONEncodeError:  # e.g. nested beyond orjson's serializer: walk it
        return _depth_within(member, max_depth) is not None
    depth = _MEMBER_DEPTHS.get(text)
    if depth is None:
        if text.count(b"{") + text.count(b"[") <= max_depth:
            return True
        depth = _depth_within(member, max_depth)
        if depth is None:
            return False
        _MEMBER_DEPTHS.put(text, depth)
    return depth <= max_depth


def _within_depth(value: Any, max_depth: int) -> bool:
    """Whether a parsed container nests no deeper than ``max_depth`` (at least 1).

    An object is checked member by member (see :func:`_member_within`), anything else walked.
    """
    if type(value) is dict and max_depth > 1:
        for member in value.values():
            kind = type(member)
            if (kind is dict or kind is list) and not _member_within(member, max_depth - 1):
                return False
        return True
    return _depth_within(value, max_depth) is not None


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
        raise caused_by(JsonLimitError(f"invalid JSON: {exc}"), exc) from exc
    if not isinstance(value, dict | list):
        return value
    # orjson itself refuses nesting beyond 1024; look at the document only when it could be
    # deeper than the limit: counting openers is a cheap upper bound on the depth. (The '['
    # are not counted when there is none, which find tells with a memchr, or when the '{' alone
    # exceed the limit.)
    raw = data.encode() if isinstance(data, str) else data
    openers = raw.count(b"{")
    if openers <= max_depth and (raw.find(b"[") < 0 or openers + raw.count(b"[") <= max_depth):
        return value
    if max_depth >= 1 and _within_depth(value, max_depth):
        return value
    try:
        check_depth(value, max_depth)
    except ValueError as too_deep:
        raise caused_by(JsonLimitError(str(too_deep)), too_deep) from too_deep
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
        raise caused_by(DecodeError(format_id, None, str(exc), data), exc) from exc
    if not isinstance(value, dict):
        raise DecodeError(format_id, None, f"expected a JSON object, found {type(value).__name__}", data)
    return value
