"""Schema-change and transaction events as records: Debezium's ``tableChanges`` (with
``java.sql.Types`` codes) and the transaction topic's BEGIN/END records, with their Connect
schemas. Called by :func:`transforms.envelope.emit`."""

from __future__ import annotations

from typing import Any

from transforms.connect import (
    Column,
    ConnectType,
    Logical,
    TableSchema,
)
from transforms.envelope_codec import (
    _source_block,
)
from transforms.envelope_model import (
    SOURCE,
    TS_MS,
    EmitOptions,
    OutRecord,
    SchemaChangeEvent,
    TransactionEvent,
    TransactionStatus,
)

# java.sql.Types codes for Debezium's tableChanges[].table.columns[].jdbcType, by Connect type
_JDBC_TYPES = {
    ConnectType.INT8: -6,  # TINYINT
    ConnectType.INT16: 5,  # SMALLINT
    ConnectType.INT32: 4,  # INTEGER
    ConnectType.INT64: -5,  # BIGINT
    ConnectType.FLOAT32: 7,  # REAL
    ConnectType.FLOAT64: 8,  # DOUBLE
    ConnectType.BOOLEAN: 16,  # BOOLEAN
    ConnectType.STRING: 12,  # VARCHAR
    ConnectType.BYTES: -3,  # VARBINARY
    ConnectType.ARRAY: 2003,  # ARRAY
    ConnectType.MAP: 1111,  # OTHER
    ConnectType.STRUCT: 2002,  # STRUCT
}
_JDBC_LOGICAL_TYPES = {
    Logical.DECIMAL: 3,  # DECIMAL
    Logical.VARIABLE_SCALE_DECIMAL: 3,
    Logical.DATE: 91,  # DATE
    Logical.CONNECT_DATE: 91,
    Logical.TIME: 92,  # TIME
    Logical.MICRO_TIME: 92,
    Logical.NANO_TIME: 92,
    Logical.CONNECT_TIME: 92,
    Logical.ZONED_TIME: 2013,  # TIME_WITH_TIMEZONE
    Logical.TIMESTAMP: 93,  # TIMESTAMP
    Logical.MICRO_TIMESTAMP: 93,
    Logical.NANO_TIMESTAMP: 93,
    Logical.CONNECT_TIMESTAMP: 93,
    Logical.ZONED_TIMESTAMP: 2014,  # TIMESTAMP_WITH_TIMEZONE
}


def _jdbc_type(col: Column) -> int:
    return _JDBC_LOGICAL_TYPES.get(col.logical or "", _JDBC_TYPES[col.type])


def _table_change(table: TableSchema, change_type: str) -> dict[str, Any]:
    """One ``tableChanges[]`` entry, shaped as Debezium's ``ConnectTableChangeSerializer`` writes it."""
    return {
        "type": change_type,
        "id": f'"{table.qualified_name}"',
        "table": {
            "defaultCharsetName": None,
            "primaryKeyColumnNames": list(table.key),
            "columns": [
                {
                    "name": c.name,
                    "jdbcType": _jdbc_type(c),
                    "nativeType": None,
                    "typeName": c.source_type or c.type.value,
                    "typeExpression": c.source_type or c.type.value,
                    "charsetName": None,
                    "length": c.precision,
                    "scale": c.scale,
                    "position": i + 1,
                    "optional": c.optional,
                    "autoIncremented": None,
                    "generated": None,
                    "comment": None,
                    "defaultValueExpression": None,
                    "enumValues": None,
                }
                for i, c in enumerate(table.columns)
            ],
            "comment": None,
        },
    }


def _field(ctype: str, name: str, optional: bool = True) -> dict[str, Any]:
    return {"type": ctype, "optional": optional, "field": name}


def _string_list(name: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "optional": False}, "optional": True, "field": name}


# Debezium's io.debezium.connector.schema.Change (ConnectTableChangeSerializer), as JsonConverter writes it
_CHANGE_SCHEMA = {
    "type": "struct",
    "fields": [
        _field("string", "type", False),
        _field("string", "id", False),
        {
            "type": "struct",
            "fields": [
                _field("string", "defaultCharsetName"),
                _string_list("primaryKeyColumnNames"),
                {
                    "type": "array",
                    "items": {
                        "type": "struct",
                        "fields": [
                            _field("string", "name", False),
                            _field("int32", "jdbcType", False),
                            _field("int32", "nativeType"),
                            _field("string", "typeName", False),
                            _field("string", "typeExpression"),
                            _field("string", "charsetName"),
                            _field("int32", "length"),
                            _field("int32", "scale"),
                            _field("int32", "position", False),
                            _field("boolean", "optional"),
                            _field("boolean", "autoIncremented"),
                            _field("boolean", "generated"),
                            _field("string", "comment"),
                            _field("string", "defaultValueExpression"),
                            _string_list("enumValues"),
                        ],
                        "optional": False,
                        "name": "io.debezium.connector.schema.Column",
                        "version": 1,
                    },
                    "optional": False,
                    "field": "columns",
                },
                _field("string", "comment"),
            ],
            "optional": True,
            "name": "io.debezium.connector.schema.Table",
            "version": 1,
            "field": "table",
        },
    ],
    "optional": False,
    "name": "io.debezium.connector.schema.Change",
    "version": 1,
}


_SCHEMA_CHANGE_KEY_SCHEMA = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "databaseName"}],
    "optional": False,
    "name": "io.debezium.connector.common.SchemaChangeKey",
    "version": 1,
}


def _emit_schema_change(event: SchemaChangeEvent, opts: EmitOptions) -> list[OutRecord]:
    source, source_schema = _source_block(event.source, event.db, event.schema, event.table, opts)
    payload = {
        SOURCE: source,
        TS_MS: event.ts_ms if event.ts_ms is not None else event.source.ts_ms,
        "databaseName": event.db or event.schema or "",
        "schemaName": event.schema,
        "ddl": event.ddl,
        "tableChanges": [_table_change(event.new_table, event.change_type)] if event.new_table else [],
    }
    key_payload_ = {"databaseName": event.db or event.schema or ""}
    topic = event.topic or opts.prefix
    if not opts.schemas:
        return [OutRecord(topic, key_payload_, payload)]
    value_schema = {
        "type": "struct",
        "fields": [
            source_schema,
            {"type": "int64", "optional": True, "field": TS_MS},
            {"type": "string", "optional": True, "field": "databaseName"},
            {"type": "string", "optional": True, "field": "schemaName"},
            {"type": "string", "optional": True, "field": "ddl"},
            {
                "type": "array",
                "items": _CHANGE_SCHEMA,
                "optional": False,
                "field": "tableChanges",
            },
        ],
        "optional": False,
        "name": "io.debezium.connector.common.SchemaChangeValue",
        "version": 1,
    }
    return [
        OutRecord(
            topic,
            {"schema": _SCHEMA_CHANGE_KEY_SCHEMA, "payload": key_payload_},
            {"schema": value_schema, "payload": payload},
        )
    ]


_TX_KEY_SCHEMA = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"}],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "version": 1,
}
_TX_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "data_collection"},
                    {"type": "int64", "optional": False, "field": "event_count"},
                ],
                "optional": False,
            },
            "optional": True,
            "field": "data_collections",
        },
        {"type": "int64", "optional": True, "field": "ts_ms"},  # Debezium: required; null when the format has no time
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}


def _emit_transaction(event: TransactionEvent, opts: EmitOptions) -> list[OutRecord]:
    payload: dict[str, Any] = {
        "status": event.status.value,
        "id": event.id,
        "event_count": event.event_count,
        "data_collections": [{"data_collection": n, "event_count": c} for n, c in event.data_collections]
        if event.status is TransactionStatus.END
        else None,
        "ts_ms": event.ts_ms if event.ts_ms is not None else event.source.ts_ms,
    }
    topic = event.topic or opts.transaction_topic or f"{opts.prefix}.transaction"
    key = {"id": event.id}
    if not opts.schemas:
        return [OutRecord(topic, key, payload)]
    return [
        OutRecord(topic, {"schema": _TX_KEY_SCHEMA, "payload": key}, {"schema": _TX_VALUE_SCHEMA, "payload": payload})
    ]
