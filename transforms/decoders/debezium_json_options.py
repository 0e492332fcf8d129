"""The options of the ``debezium-json`` format (:mod:`transforms.decoders.debezium_json`).

A module of their own because pydantic models stay interpreted where the decoder is compiled
(mypyc, :mod:`transforms.compiled`).
"""

from __future__ import annotations

from pydantic import Field

from transforms.options import FormatOptions

__all__ = ["DebeziumJsonOptions"]


class DebeziumJsonOptions(FormatOptions):
    """Options of the ``debezium-json`` format."""

    key_columns: str | None = Field(
        None,
        alias="key.columns",
        description="Comma-separated key columns for every table; overrides the Kafka message key.",
    )
    unwrapped: bool = Field(
        False,
        alias="unwrapped",
        description="Accept ExtractNewRecordState flat rows (no envelope); a row is an upsert ('c') "
        "unless __op or __deleted says otherwise.",
    )
    table: str | None = Field(
        None,
        alias="table",
        description="db.table (or table) for values that do not name their table; "
        "default: the last two parts of the topic name.",
    )
