"""The depth guard of :func:`transforms.jsonio.loads_limited` is exact: a document nested deeper
than the limit is rejected, one within it passes, whatever its brackets inside strings and
whether its object members were seen (and their depths remembered) before."""

from __future__ import annotations

from random import Random
from typing import Any

import orjson
import pytest

from transforms.jsonio import JsonLimitError, check_depth, loads_limited


def _document(rng: Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice([1, "x{[", None, "]}", 2.5, "},{"])
    if rng.random() < 0.5:
        return [_document(rng, depth - rng.randint(1, 3)) for _ in range(rng.randint(0, 4))]
    return {f"k{i}": _document(rng, depth - rng.randint(1, 3)) for i in range(rng.randint(0, 4))}


def _within(raw: bytes, limit: int) -> bool:
    try:
        loads_limited(raw, max_depth=limit)
    except JsonLimitError as exc:
        assert str(exc) == f"nesting deeper than {limit}"
        return False
    return True


@pytest.mark.parametrize("seed", range(4))
def test_depth_guard_is_exact(seed: int) -> None:
    rng = Random(seed)
    for _ in range(1500):
        doc = _document(rng, rng.randint(1, 30))
        if not isinstance(doc, dict | list):
            continue
        raw = orjson.dumps(doc)
        depth = check_depth(doc, 10_000)
        for limit in {1, 2, 5, 8, depth - 1, depth, depth + 1}:
            if limit >= 1:
                # twice: the second time an object member's depth may come from the cache
                assert _within(raw, limit) == _within(raw, limit) == (depth <= limit), (raw, limit)


def test_a_repeated_member_is_checked_against_each_limit() -> None:
    schema = {"fields": [{"f": {"g": {"h": 1}}} for _ in range(100)]}  # depth 5, 201 '{' and '['
    raw = orjson.dumps({"schema": schema, "payload": {"a": 1}})
    assert _within(raw, 64)
    assert _within(raw, 6)
    assert not _within(raw, 5)
    assert _within(raw, 6)
