"""cdcnorm's transforms against the real ones: every golden case through both chains.

The records of each golden case (``tests/compat/records.py``) go two ways:

* cdcnorm: the decoded events through a chain built from a spec, then the emitter;
* Kafka Connect: the emitted envelope records (tombstones and headers included) through
  JsonConverter into ``SourceRecord``s, the chain of the real classes named in the same spec (Debezium 3.6's
  ``ExtractNewRecordState``, Connect 4.3's ``RegexRouter``, ``ReplaceField$Value``,
  ``InsertField$Value``, ``MaskField$Value``, ``Filter`` and predicates), and JsonConverter /
  SimpleHeaderConverter back (``tests/compat/java/SmtCompat.java``).

The spec names the transforms by their Connect/Debezium class names, so cdcnorm's side also
goes through the aliases. Both sides must write the same records: count and order, topic, key,
value JSON (schema and payload) and headers, after the differences cdcnorm intends, each
counted (:class:`Expected`):

``null-value``
    ``delete.tombstone.handling.mode=tombstone`` (Debezium 2's ``delete.handling.mode=none``):
    Debezium writes the delete as ``{"schema": <row schema>, "payload": null}``; cdcnorm writes
    a tombstone, and no record at all for a delete without a key.
``keyless-tombstone``
    Debezium writes a tombstone without a key (``delete-to-tombstone`` of a keyless delete);
    cdcnorm writes no keyless tombstone.
``tombstone-headers``
    headers on a tombstone (``__op: d`` from ``add.headers``, a key change's
    ``__debezium.newkey``): the emitter writes tombstones without headers.
``null-header``
    a header whose field is null (``transaction.id`` outside a transaction): Connect writes the
    header with a null value; cdcnorm leaves it out.
``key-change-headers``
    an update that changes the key reaches Debezium as a delete and a create carrying
    ``__debezium.newkey`` / ``__debezium.oldkey`` headers, which its unwrapped rows keep; the rows
    cdcnorm unwraps from the update do not carry them (the emitter adds them to envelopes only).
``required-row``
    Debezium's flat row schema is ``optional: false`` wherever it rebuilt it (``add.fields``, the
    rewrite modes, InsertField, ReplaceField: Connect's ``SchemaUtil.copySchemaBasics`` does not
    copy optionality); cdcnorm's is optional.

Where Connect's chain fails on a record of a case (``route.by.field`` naming a column a later
record lacks), cdcnorm's must fail on it too. And where Connect's ``MaskField`` refuses a value
that cdcnorm masks (a decimal with a scale, a boolean with a replacement), the last test shows
it.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.compat.runtime import JAVA_DIR, JsonLinesJvm
from tests.goldens import Case, cases, iter_messages
from transforms.decoders import Message, create_decoder
from transforms.envelope import EmitOptions, Event, OutRecord, emit
from transforms.errors import CdcnormError, DecodeError
from transforms.pipeline import Pipeline
from transforms.smt import build_chain
from transforms.values import UNAVAILABLE

CONNECT = "org.apache.kafka.connect.transforms."
UNWRAP = "io.debezium.transforms.ExtractNewRecordState"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
MODES = ("drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone")

KEY_CHANGE_HEADERS = ("__debezium.newkey", "__debezium.oldkey")

Record = tuple[str, Any, Any, list[tuple[str, str | None]]]
"""topic, key JSON, value JSON, headers (name, text)."""


class ConnectSmts(JsonLinesJvm):
    """A long-lived ``SmtCompat`` JVM: runs records through real Connect/Debezium transform chains."""

    def __init__(self, cache_root: Path) -> None:
        super().__init__("SmtCompat", [JAVA_DIR / "SmtCompat.java"], cache_root)

    def run(self, runs: list[tuple[list[dict[str, Any]], list[OutRecord]]]) -> list[list[Record] | str]:
        """What each ``(transforms, records)`` run writes, or Connect's error when a record fails."""
        request = {
            "runs": [
                {
                    "transforms": transforms,
                    "records": [
                        {
                            "topic": r.topic,
                            "key": _text(r.key_bytes()),
                            "value": _text(r.value_bytes()),
                            "headers": [(k, v.decode()) for k, v in r.headers],
                        }
                        for r in records
                    ],
                }
                for transforms, records in runs
            ],
        }
        (answer,) = self.request([request])
        out: list[list[Record] | str] = []
        for result in answer["runs"]:
            if not result["ok"]:
                out.append(str(result["error"]))
                continue
            out.append(
                [
                    (r["topic"], _json(r["key"]), _json(r["value"]), [(k, v) for k, v in r["headers"]])
                    for r in result["records"]
                ]
            )
        return out


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode()


def _json(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


@pytest.fixture(scope="module")
def connect_smts(java_classes_dir: Callable[[str], Path]) -> Iterator[ConnectSmts]:
    with ConnectSmts(java_classes_dir("smt-compat")) as runner:
        yield runner


# ------------------------------------------------------------------------------ both sides


@dataclass(frozen=True)
class Decoded:
    """A golden case decoded once: its events message by message, and the envelope records."""

    case: Case
    emit_options: EmitOptions
    events: list[list[Event]]
    envelopes: list[OutRecord]

    def through(self, specs: list[dict[str, Any]]) -> list[Record]:
        """What cdcnorm's chain of ``specs`` writes for the case (the chain never changes its input)."""
        chain = build_chain(specs, emit_options=self.emit_options)
        out = [r for events in self.events for r in emit(chain.apply(events), self.emit_options)]
        return [
            (
                r.topic,
                _json(_text(r.key_bytes())),
                _json(_text(r.value_bytes())),
                [(k, v.decode()) for k, v in r.headers],
            )
            for r in out
        ]


@functools.cache
def _decoded() -> list[Decoded]:
    out = []
    for case in cases():
        options = {k: v for k, v in case.options.items() if not k.startswith("__")}
        decoder = create_decoder(case.format_id, options)
        emit_options = EmitOptions(
            prefix=case.options.get("__topic_prefix", "cdcnorm"),
            decimal_mode=decoder.options.decimal_handling_mode,
        )
        pipeline = Pipeline(decoder, emit_options)
        events = []
        for number, key, payload in iter_messages(case, decoder.binary):
            try:
                events.append(
                    pipeline.events(Message(value=payload, key=key, topic=case.name, offset=number - 1))
                )
            except DecodeError:
                continue
        envelopes = [r for each in events for r in emit(each, emit_options)]
        out.append(Decoded(case, emit_options, events, envelopes))
    return out


@dataclass
class Expected:
    """Connect's records as cdcnorm means to write them, and how often each difference applied."""

    records: list[Record] = field(default_factory=list)
    differences: Counter[str] = field(default_factory=Counter)

    def add(self, record: Record) -> None:
        topic, key, value, headers = record
        if isinstance(value, dict) and "payload" in value and value["payload"] is None:
            self.differences["null-value"] += 1
            value = None
        if value is None and key is None:
            self.differences["keyless-tombstone"] += 1
            return
        if value is None and headers:
            self.differences["tombstone-headers"] += 1
            headers = []
        if value is not None and any(k in KEY_CHANGE_HEADERS for k, _ in headers):
            self.differences["key-change-headers"] += 1
            headers = [(k, v) for k, v in headers if k not in KEY_CHANGE_HEADERS]
        if any(v is None for _, v in headers):
            self.differences["null-header"] += 1
            headers = [(k, v) for k, v in headers if v is not None]
        schema = value.get("schema") if isinstance(value, dict) else None
        if isinstance(schema, dict) and _flat_row(schema) and schema.get("optional") is False:
            self.differences["required-row"] += 1
            value = {**value, "schema": {**schema, "optional": True}}
        self.records.append((topic, key, value, headers))


def _flat_row(schema: dict[str, Any]) -> bool:
    name = schema.get("name")
    return isinstance(name, str) and name.endswith(".Value") and schema.get("type") == "struct"


def _connect_chain(specs: list[dict[str, Any]], overrides: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The same chain for SmtCompat: class names and string configs."""
    chain = []
    for i, spec in enumerate(specs):
        config = {k: v for k, v in spec.items() if k not in ("type", "predicate", "negate")}
        step: dict[str, Any] = {"class": spec["type"], "config": overrides.get(i, config)}
        if "predicate" in spec:
            predicate = dict(spec["predicate"])
            step["predicate"] = {"class": predicate.pop("type"), "config": predicate}
            step["negate"] = spec.get("negate", False)
        chain.append(step)
    return chain


# ------------------------------------------------------------------------------ the chains


@dataclass(frozen=True)
class Columns:
    """Columns of a case's first table to configure field transforms with."""

    key: tuple[str, ...] | None
    """``None`` when no record of the table has a key (the field chains then skip the case)."""
    strings: tuple[str, ...]
    numbers: tuple[str, ...]
    others: tuple[str, ...]
    single_table: bool
    table_field: str


def _columns(envelopes: list[OutRecord]) -> Columns | None:
    changes = [r for r in envelopes if isinstance(r.value, dict) and _is_envelope(r.value.get("schema"))]
    if not changes:
        return None
    first = changes[0]
    assert first.value is not None
    fields = {f["field"]: f for f in first.value["schema"]["fields"]}
    row = fields["after"]["fields"]
    keyed = [r.key for r in changes if r.topic == first.topic and r.key is not None]
    key = tuple(f["field"] for f in keyed[0]["schema"]["fields"]) if keyed else None
    placeholders = {
        name
        for r in changes
        for image in ("before", "after")
        for name, value in (r.value["payload"].get(image) or {}).items()  # type: ignore[index]
        if value == UNAVAILABLE
    }
    kept = key or ()
    plain = [f for f in row if "name" not in f and f["field"] not in kept and f["field"] not in placeholders]
    source = {f["field"] for f in fields["source"]["fields"]}
    return Columns(
        key=key,
        strings=tuple(f["field"] for f in plain if f["type"] == "string"),
        numbers=tuple(
            f["field"] for f in plain if f["type"] in ("int8", "int16", "int32", "int64", "float", "double")
        ),
        others=tuple(f["field"] for f in row if f["field"] not in kept),
        single_table=len({r.topic for r in changes}) == 1,
        table_field="collection" if "table" not in source and "collection" in source else "table",
    )


def _is_envelope(schema: Any) -> bool:
    return isinstance(schema, dict) and str(schema.get("name", "")).endswith(".Envelope")


DATA_TOPICS = {"type": CONNECT + "predicates.TopicNameMatches", "pattern": r"(?:[^.]+\.){2,}[^.]+"}
"""Table topics (``<prefix>.<db>.<table>``), not the schema-change or transaction topic: cdcnorm's
field transforms change only rows, Connect's change any struct value (guarded as Connect users
guard them)."""


def _rows_only(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "predicate": DATA_TOPICS}


def _unwrap(mode: str, cols: Columns, **more: Any) -> dict[str, Any]:
    fields = f"op,{cols.table_field},source.ts_ms"
    return {
        "type": UNWRAP,
        "delete.tombstone.handling.mode": mode,
        "add.fields": fields,
        "add.headers": f"{fields},transaction.id",
        **more,
    }


Chain = Callable[[Columns], tuple[list[dict[str, Any]], dict[int, dict[str, Any]]] | None]
"""A chain for a case's columns: cdcnorm's specs and Connect's config where it is spelled
otherwise (by step index), or ``None`` when the case has no columns to configure it with."""

CHAINS: dict[str, Chain] = {
    **{f"unwrap-{mode}": (lambda c, m=mode: ([_unwrap(m, c)], {})) for mode in MODES},
    "unwrap-legacy-rewrite-keep-tombstones": lambda c: (
        [{"type": UNWRAP, "delete.handling.mode": "rewrite", "drop.tombstones": False, "add.fields": "op"}],
        {0: {"delete.tombstone.handling.mode": "rewrite-with-tombstone", "add.fields": "op"}},
    ),
    "unwrap-legacy-none": lambda c: (
        [{"type": UNWRAP, "delete.handling.mode": "none"}],
        {0: {"delete.tombstone.handling.mode": "tombstone"}},
    ),
    "unwrap-route-by-field": lambda c: (
        (
            [_unwrap("rewrite-with-tombstone", c, **{"route.by.field": c.strings[0]})],
            {},
        )
        if c.single_table and c.strings
        else None
    ),
    "regex-router": lambda c: (
        [
            _unwrap("rewrite", c),
            {
                "type": CONNECT + "RegexRouter",
                "regex": r"([^.]+)\.([^.]+)\.(.*)",
                "replacement": "lake.$3_$2",
            },
        ],
        {},
    ),
    "regex-router-if-topic-name-matches": lambda c: (
        [
            _unwrap("rewrite-with-tombstone", c),
            {
                "type": CONNECT + "RegexRouter",
                "regex": r"(.*)",
                "replacement": "$1.a_to_m",
                "predicate": {
                    "type": CONNECT + "predicates.TopicNameMatches",
                    "pattern": r".*\.[a-mA-M][^.]*",
                },
            },
        ],
        {},
    ),
    "filter-tombstones": lambda c: (
        [
            _unwrap("rewrite-with-tombstone", c),
            {"type": CONNECT + "Filter", "predicate": {"type": CONNECT + "predicates.RecordIsTombstone"}},
        ],
        {},
    ),
    "filter-null-deletes": lambda c: (
        [
            _unwrap("tombstone", c),
            {"type": CONNECT + "Filter", "predicate": {"type": CONNECT + "predicates.RecordIsTombstone"}},
        ],
        {},
    ),
    "filter-unless-has-header-key": lambda c: (
        [
            _unwrap("rewrite", c),
            {
                "type": CONNECT + "Filter",
                "predicate": {"type": CONNECT + "predicates.HasHeaderKey", "name": "__op"},
                "negate": True,
            },
        ],
        {},
    ),
    "replace-field-exclude-renames": lambda c: (
        (
            [
                _unwrap("rewrite", c),
                _rows_only(
                    {
                        "type": CONNECT + "ReplaceField$Value",
                        "exclude": c.others[-1],
                        "renames": f"{c.others[0]}:{c.others[0]}_renamed,__op:operation",
                    }
                ),
            ],
            {},
        )
        if c.key is not None and len(c.others) >= 2
        else None
    ),
    "replace-field-blacklist": lambda c: (
        (
            [
                _unwrap("rewrite", c),
                _rows_only({"type": CONNECT + "ReplaceField$Value", "blacklist": f"{c.others[0]},__deleted"}),
            ],
            {1: {"exclude": f"{c.others[0]},__deleted"}},
        )
        if c.key is not None and c.others
        else None
    ),
    "replace-field-include": lambda c: (
        (
            [
                _unwrap("drop", c),
                _rows_only(
                    {
                        "type": CONNECT + "ReplaceField$Value",
                        "include": ",".join((*(c.key or ()), c.others[0])),
                    }
                ),
            ],
            {},
        )
        if c.key is not None and c.single_table and c.others
        else None
    ),
    "insert-field": lambda c: (
        [
            _unwrap("rewrite", c),
            _rows_only(
                {
                    "type": CONNECT + "InsertField$Value",
                    "static.field": "region!",
                    "static.value": "eu",
                    "topic.field": "src_topic",
                }
            ),
        ],
        {},
    ),
    "mask-field": lambda c: (
        (
            [
                _unwrap("rewrite", c),
                _rows_only({"type": CONNECT + "MaskField$Value", "fields": ",".join(c.strings + c.numbers)}),
            ],
            {},
        )
        if c.key is not None and c.single_table and (c.strings or c.numbers)
        else None
    ),
    "mask-field-replacement": lambda c: (
        (
            [
                _unwrap("rewrite", c),
                _rows_only(
                    {
                        "type": CONNECT + "MaskField$Value",
                        "fields": ",".join(c.strings + c.numbers),
                        "replacement": "7",
                    }
                ),
            ],
            {},
        )
        if c.key is not None and c.single_table and (c.strings or c.numbers)
        else None
    ),
}

DIFFERENCES: dict[str, Counter[str]] = {}
"""Per chain, once its test ran: cases and records compared, and each intended difference seen."""


@pytest.mark.parametrize("chain", list(CHAINS))
def test_chain_writes_what_connect_writes(chain: str, connect_smts: ConnectSmts) -> None:
    """Every golden case through the chain both ways: the same records, but for the intended differences."""
    runs = []
    for decoded in _decoded():
        cols = _columns(decoded.envelopes)
        built = CHAINS[chain](cols) if cols is not None else None
        if built is not None:
            specs, overrides = built
            runs.append((decoded, specs, _connect_chain(specs, overrides)))
    assert runs
    results = connect_smts.run([(connect, decoded.envelopes) for decoded, _, connect in runs])
    compared = Counter[str]()
    mismatches = []
    for (decoded, specs, _), theirs in zip(runs, results, strict=True):
        if isinstance(theirs, str):  # a record Connect's chain fails on: cdcnorm's must fail too
            with pytest.raises(CdcnormError):
                decoded.through(specs)
            compared["both-refused"] += 1
            continue
        expected = Expected()
        for record in theirs:
            expected.add(record)
        ours = decoded.through(specs)
        compared["cases"] += 1
        compared["records"] += len(ours)
        compared.update(expected.differences)
        if ours != expected.records:
            mismatches.append((decoded.case, _first_difference(expected.records, ours)))
    DIFFERENCES[chain] = compared
    assert not mismatches, "\n".join(f"{case}: {diff}" for case, diff in mismatches[:10])
    assert set(compared) - {"cases", "records", "both-refused"} <= _INTENDED[chain], compared
    assert compared["cases"] > 2 * compared["both-refused"], compared


def _first_difference(want: list[Record], got: list[Record]) -> str:
    if len(want) != len(got):
        return f"Connect wrote {len(want)} records, cdcnorm {len(got)}: {[r[0] for r in want]} / {[r[0] for r in got]}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        for part, a, b in zip(("topic", "key", "value", "headers"), w, g, strict=True):
            if a != b:
                return f"record {i} {part}: Connect {_clip(a)}\n    cdcnorm {_clip(b)}"
    return "equal"


def _clip(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) < 1500 else text[:1500] + "..."


_ROWS = {"required-row", "null-header", "key-change-headers"}
_INTENDED: dict[str, set[str]] = {
    "unwrap-drop": _ROWS,
    "unwrap-tombstone": _ROWS | {"null-value", "tombstone-headers", "keyless-tombstone"},
    "unwrap-rewrite": _ROWS,
    "unwrap-rewrite-with-tombstone": _ROWS | {"tombstone-headers"},
    "unwrap-delete-to-tombstone": _ROWS | {"keyless-tombstone", "tombstone-headers"},
    "unwrap-legacy-rewrite-keep-tombstones": _ROWS | {"tombstone-headers"},
    "unwrap-legacy-none": _ROWS | {"null-value", "keyless-tombstone", "tombstone-headers"},
    "unwrap-route-by-field": _ROWS | {"tombstone-headers"},
    "regex-router": _ROWS,
    "regex-router-if-topic-name-matches": _ROWS | {"tombstone-headers"},
    "filter-tombstones": _ROWS,
    "filter-null-deletes": _ROWS,
    "filter-unless-has-header-key": _ROWS,
    "replace-field-exclude-renames": _ROWS,
    "replace-field-blacklist": _ROWS,
    "replace-field-include": _ROWS,
    "insert-field": _ROWS,
    "mask-field": _ROWS,
    "mask-field-replacement": _ROWS,
}
"""The differences each chain may show (see the module docstring); anything else fails."""


def test_every_chain_says_which_differences_it_may_show() -> None:
    assert set(_INTENDED) == set(CHAINS)
    assert all(re.fullmatch(r"[a-z-]+", name) for name in CHAINS)


def test_where_connect_mask_field_refuses_cdcnorm_masks(connect_smts: ConnectSmts) -> None:
    """Connect's MaskField writes 0 with scale 0 into a Decimal column (JsonConverter then refuses
    it) and refuses booleans with a replacement; cdcnorm masks both (``0.00``, ``false``)."""
    runs = []
    for decoded in _decoded():
        cols = _columns(decoded.envelopes)
        if cols is None or cols.key is None or not cols.single_table:
            continue
        first = next(
            r for r in decoded.envelopes if isinstance(r.value, dict) and _is_envelope(r.value["schema"])
        )
        assert first.value is not None
        row = {f["field"]: f for f in first.value["schema"]["fields"]}["after"]["fields"]
        for kind, extra, wanted in (
            ("decimal", {}, lambda f: f.get("name") == DECIMAL and f["parameters"]["scale"] != "0"),
            ("boolean", {"replacement": "7"}, lambda f: f["type"] == "boolean"),
        ):
            fields = [f["field"] for f in row if wanted(f) and f["field"] not in cols.key]
            if fields:
                mask = {"type": CONNECT + "MaskField$Value", "fields": ",".join(fields), **extra}
                specs = [_unwrap("rewrite", cols), _rows_only(mask)]
                runs.append((kind, decoded, specs))
    results = connect_smts.run([(_connect_chain(specs, {}), decoded.envelopes) for _, decoded, specs in runs])
    refused = Counter[str]()
    for (kind, decoded, specs), theirs in zip(runs, results, strict=True):
        assert isinstance(theirs, str), f"{decoded.case}: Connect masked {kind} columns"
        assert ("mismatching scale" if kind == "decimal" else "with custom replacement") in theirs
        assert decoded.through(specs)  # cdcnorm writes the case
        refused[kind] += 1
    assert refused["decimal"] and refused["boolean"]
