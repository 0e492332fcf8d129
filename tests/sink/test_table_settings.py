"""Per-table settings (``sink.tables``, :mod:`sink.table_settings`): the partition and sort terms
as Spark DDL writes them, the patterns, the most specific match, every problem at once with its
key, and the column checks made when a table's columns are known (:mod:`sink.table_shape`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sink.main import read_sink_config
from sink.table_settings import (
    PartitionTerm,
    SortTerm,
    TableMode,
    TableSettings,
    parse_partition_term,
    parse_sort_term,
    settings_for,
)
from sink.table_shape import shape_problems
from transforms.configfile import ConfigErrors


@pytest.mark.parametrize(("text", "term", "iceberg"), [
    ("id", PartitionTerm("identity", "id"), "identity"),
    ("identity(region)", PartitionTerm("identity", "region"), "identity"),
    ("`odd name`", PartitionTerm("identity", "odd name"), "identity"),
    ("bucket(16, id)", PartitionTerm("bucket", "id", 16), "bucket[16]"),
    ("BUCKET( 4 ,id )", PartitionTerm("bucket", "id", 4), "bucket[4]"),
    ("truncate(4, sku)", PartitionTerm("truncate", "sku", 4), "truncate[4]"),
    ("truncate(sku, 4)", PartitionTerm("truncate", "sku", 4), "truncate[4]"),
    ("days(created_at)", PartitionTerm("day", "created_at"), "day"),
    ("date(created_at)", PartitionTerm("day", "created_at"), "day"),
    ("hours(ts)", PartitionTerm("hour", "ts"), "hour"),
    ("months(d)", PartitionTerm("month", "d"), "month"),
    ("years(d)", PartitionTerm("year", "d"), "year"),
])
def test_partition_terms_as_spark_ddl_writes_them(text: str, term: PartitionTerm, iceberg: str) -> None:
    assert parse_partition_term(text) == term
    assert term.iceberg == iceberg
    assert parse_partition_term(term.ddl) == term  # the DDL it writes reads back


@pytest.mark.parametrize(("text", "why"), [
    ("bucket(id)", r"bucket needs a count: bucket\(N, id\)"),
    ("bucket(0, id)", "at least 1"),
    ("weeks(ts)", "unknown transform 'weeks'"),
    ("days(a, b)", "not a partition term"),
])
def test_bad_partition_terms_say_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_partition_term(text)


def test_sort_terms() -> None:
    assert parse_sort_term("id") == SortTerm("id", False, True)
    assert parse_sort_term("ts desc") == SortTerm("ts", True, False)
    assert parse_sort_term("ts ASC NULLS LAST") == SortTerm("ts", False, False)
    with pytest.raises(ValueError, match="not a sort term"):
        parse_sort_term("ts sideways")


def test_the_most_specific_pattern_wins() -> None:
    tables = {
        "*": TableSettings(sort_by=("a",)),
        "shop.*": TableSettings(partition_by=("bucket(4, id)",)),
        "shop.orders": TableSettings(mode=TableMode.HISTORY),
        "*.orders": TableSettings(mode=TableMode.CHANGELOG),
    }
    assert settings_for(tables, "shop", "orders").mode is TableMode.HISTORY
    assert settings_for(tables, "crm", "orders").mode is TableMode.CHANGELOG
    assert settings_for(tables, "shop", "users").partition_by == ("bucket(4, id)",)
    assert settings_for(tables, "crm", "users").sort_by == ("a",)
    assert settings_for({}, "x", "y") == TableSettings()


def _write(tmp_path: Path, tables: Any) -> Path:
    raw = {"broker": {"bootstrap_servers": "k:9092"}, "sink": {"topics": ["t"], "tables": tables}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_every_bad_setting_is_reported_at_once_with_its_key(tmp_path: Path) -> None:
    tables = {
        "shop.orders": {"partition_by": ["bucket(0, id)", "days(ts)", "hours(ts)"], "sort_by": ["id up"]},
        "orders": {"mode": "history"},
        "crm.*": {"mode": "scd9", "colour": 1},
    }
    with pytest.raises(ConfigErrors) as info:
        read_sink_config(_write(tmp_path, tables))
    text = str(info.value)
    for needle in ("sink.tables.shop.orders.partition_by", "bucket count must be at least 1",
                   "a second time partition (years, months, days, hours) of column ts",
                   "sink.tables.shop.orders.sort_by", "'id up' is not a sort term",
                   "'orders' matches no table", "sink.tables.crm.*.mode", "scd9", "sink.tables.crm.*.colour"):
        assert needle in text, (needle, text)


def test_a_good_tables_section_loads(tmp_path: Path) -> None:
    sink, _, _ = read_sink_config(_write(tmp_path, {"shop.*": {"partition_by": ["bucket(16, id)"], "mode": "changelog",
                                                               "properties": {"write.target-file-size-bytes": "1"}}}))
    assert sink.tables["shop.*"].partition_terms == (PartitionTerm("bucket", "id", 16),)


def test_terms_are_checked_against_the_tables_columns() -> None:
    settings = TableSettings(partition_by=("hours(d)", "bucket(4, price)", "truncate(2, gone)", "days(ts)"),
                             sort_by=("nope",))
    problems = shape_problems(settings, {"d": "date", "price": "double", "ts": "timestamptz"})
    assert problems == [
        "partition_by hour(d): hour needs a timestamp column, d is date",
        "partition_by bucket[4](price): bucket cannot hash a double column",
        "partition_by truncate[2](gone): the table has no column gone",
        "sort_by nope: the table has no column nope",
    ]
