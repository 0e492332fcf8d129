"""Hypothesis strategies that mutate a valid message into a hostile one.

Three families, drawn per example (one to three operations each):

* **bytes**: flip bits, truncate, insert random or structural bytes (``{``, ``"``, ``\\``,
  ``\\xff``, varint-looking runs), delete or duplicate a range, splice two seeds;
* **tree**: the message taken apart (:class:`tests.fuzz.seeds.Layout`: JSON, or Avro through
  its own schema) and changed where it has meaning: a value of another type (nulls, huge and
  negative numbers, non-finite and denormal floats, numeric/date/JSON-looking strings, unicode,
  long strings, containers), a dropped or renamed key, a value copied elsewhere, wrapped,
  nested deeply, stringified or un-stringified, a list amplified, and JSON held in a string
  (MongoDB images, Qlik ``dataSchema``, DTS ``pk_uk_info``, Arcion cursors) mutated in turn.
  Avro (and CSV) trees get values of the leaf's own type, so the result still encodes and
  reaches the decoder's logic rather than stopping at the Avro reader;
* **key**: the Kafka key replaced (formats that read the key: Debezium, Arcion, Maxwell).

The choices are made with a :class:`random.Random` that Hypothesis seeds (one draw per example
instead of one per choice: Hypothesis spends ~0.1 ms per draw, which would make 10k examples per
format too slow). A failure still replays exactly from Hypothesis's report. Each mutation returns
the mutated :class:`~transforms.decoders.Message` and a short description of what was done.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from random import Random
from typing import Any

from tests.fuzz.seeds import Seed
from transforms.decoders import Message

__all__ = ["mutate"]

Path = tuple[Any, ...]

_STRINGS = [
    "",
    " ",
    "null",
    "true",
    "0",
    "-1",
    "1.5",
    "-0",
    "1e999999999",
    "-1E-999999999",
    "9" * 40,
    "9" * 5000,
    "9" * 20000 + "x",
    "/**/" * 40 + "x",
    "²",
    "-٣",
    "18446744073709551616",
    "NaN",
    "Infinity",
    "0x1F",
    "0000-00-00 00:00:00",
    "9999-12-31 23:59:59.999999999",
    "2020-02-30 25:61:61",
    "-2020-01-01",
    "99999-01-01T00:00:00Z",
    "2020-01-01T00:00:00+99:99",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31 23:59:59-14:00",
    "9" * 100 + "-01-01",
    "838:59:59",
    "-838:59:59.999999",
    "99999999999:00:00",
    "\x00",
    "\u202e\u0301",
    "\U0001f4a5",
    "\udcff",
    "é",
    "\\u0000",
    "{}",
    "[]",
    '{"a":',
    '{"$numberLong":"9223372036854775808"}',
    '{"$date":{"$numberLong":"-99999999999999999"}}',
    '{"$binary":{"base64":"!!","subType":"00"}}',
    "[" * 100 + "]" * 100,
    "zz",
    "ff" * 9,
    "AAAA",
    "====",
    "a.b.c.d",
    ".",
    "db.",
    "enum('a','b')",
    "bit(99999999999)",
    "decimal(99999,99999)",
    "varchar(-1)",
    "NUMBER(-5,-2)",
    "INT(8) unsigned zerofill",
    "geometry",
    "x" * 5000,
]
_INTS = [0, 1, -1, 2, 7, 255, 256, 2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63)]
_JSON_INTS = [*_INTS, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**30)]
_FLOATS = [0.0, -0.0, 0.5, -1.5, 1e308, -1e308, 5e-324, 1e16, 2.0**63, math.inf, -math.inf, math.nan]
_ALPHABET = "aZ09_.-:/ {}[]\"é\u00ff\u4e2d\U0001f600\x00\n"


def _text(rng: Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(_STRINGS)
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 12)))


def _scalar(rng: Random) -> Any:
    pick = rng.randrange(7)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice(_JSON_INTS)
    if pick == 2:
        return rng.randint(-(2**70), 2**70) >> rng.randrange(70)
    if pick == 3:
        return rng.choice(_FLOATS)
    if pick == 4:
        return rng.uniform(-1e6, 1e6)
    return _text(rng)


def _json_value(rng: Random, depth: int = 0) -> Any:
    """A nasty JSON value: mostly scalars, sometimes small containers."""
    pick = rng.random()
    if depth >= 3 or pick < 0.75:
        return _scalar(rng)
    if pick < 0.88:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_text(rng): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _same_type(rng: Random, value: Any) -> Any:
    """A value an Avro writer accepts where ``value`` stood."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice(_INTS) if rng.random() < 0.7 else rng.randint(-(2**63), 2**63 - 1)
    if isinstance(value, float):
        return rng.choice(_FLOATS)
    if isinstance(value, str):
        return _text(rng)
    if isinstance(value, bytes):
        if rng.random() < 0.3:
            return rng.choice([b"", b"\x00" * 9, b"\xff" * 16, bytes(range(256))])
        return rng.randbytes(rng.randint(0, 24))
    return value


# ------------------------------------------------------------------------------------- bytes

_INSERTS = [b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":", b"\x00", b"\xff", b"\xc3", b"\n", b"\x80" * 9, b"\x01" * 5]
_BYTE_KINDS = ["flip", "truncate", "insert", "delete", "duplicate", "splice", "deepen"]


def _mutate_bytes(rng: Random, data: bytes, other: bytes) -> tuple[bytes, str]:
    kind = rng.choice(_BYTE_KINDS)
    n = len(data)
    if kind == "deepen":
        levels = rng.choice([64, 65, 1025, 100_000])
        return b"[" * levels + data + b"]" * levels, f"deepen x{levels}"
    if kind == "flip" and n:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(n)] ^= rng.randint(1, 255)
        return bytes(out), "flip"
    if kind == "truncate" and n:
        cut = rng.randrange(n)
        return data[:cut], f"truncate@{cut}"
    if kind == "delete" and n:
        start = rng.randrange(n)
        end = rng.randint(start, min(n, start + 64))
        return data[:start] + data[end:], f"delete[{start}:{end}]"
    if kind == "duplicate" and n:
        start = rng.randrange(n)
        end = rng.randint(start, min(n, start + 64))
        times = rng.randint(1, 50)
        return data[:end] + data[start:end] * times + data[end:], f"duplicate[{start}:{end}]x{times}"
    if kind == "splice" and other:
        cut, at = rng.randint(0, n), rng.randint(0, len(other))
        return data[:cut] + other[at:], f"splice@{cut}/{at}"
    at = rng.randint(0, n)
    chunk = rng.choice(_INSERTS) if rng.random() < 0.5 else rng.randbytes(rng.randint(1, 32))
    return data[:at] + chunk + data[at:], f"insert@{at}:{chunk[:8]!r}"


# -------------------------------------------------------------------------------------- tree


def _paths(tree: Any, typed: bool) -> list[Path]:
    """Every position in the tree (the root too for JSON), breadth first."""
    out: list[Path] = [] if typed else [()]
    queue: list[tuple[Path, Any]] = [((), tree)]
    for path, node in queue:
        if isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], str):
            queue.append(((*path, 1), node[1]))  # Avro union branch: (record name, value)
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            out.append((*path, key))
            queue.append(((*path, key), child))
    return out


def _get(tree: Any, path: Path) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: Any, path: Path, value: Any) -> Any:
    """Set ``path`` to ``value``; tuples (Avro union values) are rebuilt. Returns the new root."""
    if not path:
        return value
    parent = _get(tree, path[:-1])
    key = path[-1]
    if isinstance(parent, tuple):
        return _set(tree, path[:-1], (parent[0], value))
    parent[key] = value
    return tree


def _json_text(value: Any) -> Any | None:
    if not isinstance(value, str) or value[:1] not in ("{", "["):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _wrap(rng: Random, value: Any) -> Any:
    return rng.choice([[value], {"": value}, {"$numberLong": value}, [value, value]])


_NODE_BUDGET = 20_000
"""Roughly how many JSON nodes amplification may add (mutants stay small enough to be fast)."""
_MAX_MUTANT_BYTES = 512 * 1024


def _mutate_tree(
    rng: Random, tree: Any, typed: bool, depth: int = 0, paths: list[Path] | None = None
) -> tuple[Any, str]:
    if paths is None:
        paths = _paths(tree, typed)
    if not paths:
        return tree, "none"
    path = rng.choice(paths)
    value = _get(tree, path)
    where = "/".join(str(p) for p in path) or "<root>"
    inner = _json_text(value)
    kinds = ["replace", "replace", "delete", "copy"]
    if isinstance(value, list):
        kinds.append("amplify")
    if inner is not None and depth < 2:
        kinds += ["inner", "inner"]
    if not typed:
        kinds += ["wrap", "nest", "stringify", "unstringify", "rename"]
    kind = rng.choice(kinds)
    parent = _get(tree, path[:-1]) if path else None
    if kind == "delete" and isinstance(parent, dict | list):
        del parent[path[-1]]
        return tree, f"delete {where}"
    if kind == "copy":
        source = rng.choice(paths)
        new = copy.deepcopy(_get(tree, source))
        return _set(tree, path, new), f"copy {'/'.join(map(str, source))} -> {where}"
    if kind == "amplify":
        # copies share their members: bound the nodes a later step could multiply again
        size = 1 + sum(1 for p in paths if p[: len(path)] == path)
        times = rng.randint(2, max(2, min(300, _NODE_BUDGET // size)))
        return _set(tree, path, copy.deepcopy(value) * times), f"amplify {where} x{times}"
    if kind == "inner" and inner is not None:
        mutated, what = _mutate_tree(rng, inner, False, depth + 1)
        return _set(tree, path, json.dumps(mutated)), f"inner {where}: {what}"
    if kind == "wrap":
        return _set(tree, path, _wrap(rng, value)), f"wrap {where}"
    if kind == "nest":
        levels = rng.choice([2, 63, 64, 65, 200, 500])
        new = value
        for i in range(levels):
            new = [new] if i % 2 else {"n": new}
        return _set(tree, path, new), f"nest {where} x{levels}"
    if kind == "stringify":
        return _set(tree, path, value if isinstance(value, str) else json.dumps(value)), f"stringify {where}"
    if kind == "unstringify" and isinstance(value, str):
        try:
            new = json.loads(value)
        except ValueError:
            new = value.split(",")
        return _set(tree, path, new), f"unstringify {where}"
    if kind == "rename" and isinstance(parent, dict):
        names = [k for k in parent if k != path[-1]]
        name = rng.choice(names) if names and rng.random() < 0.5 else _text(rng)
        parent[name] = parent.pop(path[-1])
        return tree, f"rename {where} -> {_short(name)}"
    new = _same_type(rng, value) if typed else _json_value(rng)
    return _set(tree, path, new), f"replace {where}={_short(new)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------- key

_KEYS = [
    None,
    b"",
    b"null",
    b"{}",
    b"[]",
    b'{"id":1}',
    b'{"schema":null,"payload":{"id":1}}',
    b'{"schema":{"type":"struct","fields":[{"field":"id","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"9999999"}}]},"payload":{"id":"AQ=="}}',
    b'{"id":"{\\"$oid\\":1}"}',
    b'{"id":"\\"x"}',
    b'{"pk.id":1}',
    b'["db","t",[{"id":1}]]',
    b"[" * 2000,
    b"\xff\xfe",
]


def _mutate_key(rng: Random, key: bytes | None) -> tuple[bytes | None, str]:
    if key and rng.random() < 0.5:
        try:
            tree = json.loads(key)
        except ValueError:
            mutated_bytes, what = _mutate_bytes(rng, key, b"")
            return mutated_bytes, f"key {what}"
        mutated, what = _mutate_tree(rng, tree, False)
        return json.dumps(mutated).encode(), f"key {what}"
    new = rng.choice(_KEYS)
    return new, f"key={_short(new)}"


# ------------------------------------------------------------------------------------- entry

_FAMILIES = ["bytes", "tree", "tree", "tree", "key"]
_SEED_PATHS: dict[int, list[Path]] = {}


def _seed_paths(seed: Seed, tree: Any, typed: bool) -> list[Path]:
    """The paths of a seed's pristine tree (computed once: large documents have thousands)."""
    paths = _SEED_PATHS.get(id(seed))
    if paths is None:
        paths = _SEED_PATHS[id(seed)] = _paths(tree, typed)
    return paths


def mutate(rng: Random, seed: Seed, other: Seed) -> tuple[Message, str]:
    """A mutant of ``seed`` (``other`` is a second seed to splice with) and what was done."""
    message = seed.message
    value = message.value or b""
    family = rng.choice(_FAMILIES)
    steps: list[str] = []
    if family == "key":
        key, what = _mutate_key(rng, message.key)
        return replace(message, key=key), what
    if family == "tree" and seed.layout is not None:
        layout = seed.layout
        typed = layout.kind != "json"  # Avro and CSV trees take values of the leaf's own type
        tree = layout.decode()
        paths: list[Path] | None = _seed_paths(seed, tree, typed)
        for _ in range(rng.randint(1, 3)):
            tree, what = _mutate_tree(rng, tree, typed, paths=paths)
            paths = None  # the tree changed
            steps.append(what)
        try:
            encoded = layout.encode(tree)
        except Exception:  # the Avro writer refused the tree: fall back to byte mutations
            steps.append("(unencodable, bytes instead)")
        else:
            if len(encoded) <= _MAX_MUTANT_BYTES:
                return replace(message, value=encoded), "; ".join(steps)
            steps.append("(too large, bytes instead)")
    for _ in range(rng.randint(1, 3)):
        value, what = _mutate_bytes(rng, value, other.message.value or b"")
        steps.append(what)
    return replace(message, value=value), "; ".join(steps)
