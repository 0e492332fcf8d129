"""The options of the ``canal-json`` format (:mod:`transforms.decoders.canal_json`).

A module of their own because pydantic models and their validators stay interpreted where the
decoder is compiled (mypyc, :mod:`transforms.compiled`).
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from transforms.decoders.mysql_types import MySqlTypeOptions

__all__ = ["CanalJsonOptions"]


class CanalJsonOptions(MySqlTypeOptions):
    """Options of the ``canal-json`` format (``bigint.unsigned.handling.mode`` as every MySQL-typed format)."""

    timestamp_zone: str = Field(
        "UTC",
        alias="timestamp.zone",
        description="Time zone in which Canal rendered MySQL TIMESTAMP values (an IANA name).",
    )
    default_table: str | None = Field(
        None,
        alias="default.table",
        description="'db.table' (or 'table') for messages without database/table; else the topic name is the table.",
    )

    @field_validator("timestamp_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value
