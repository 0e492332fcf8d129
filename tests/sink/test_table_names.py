"""Table names (``sink.tables.<pattern>.name``, :class:`sink.table_settings.TableNames`): the
templates, their checks in ``validate-config``, the catalog name the parser gives each change, and
the settings a renamed table takes from its source (no Spark)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import yaml

import sink.iceberg as ice
from sink.changes import RecordParser, SinkChange
from sink.config import SinkConfig
from sink.main import read_sink_config
from sink.table_settings import TableMode, TableNames, TableSettings
from sink.table_shape import TableSettingsError
from tests.sink.history import ORDERS
from tests.sink.test_merge_sql import FakeSpark
from transforms.connect import Column, ConnectType, TableSchema
from transforms.envelope import ChangeEvent, EmitOptions, Operation, SourceInfo, emit
from transforms.errors import CdcnormError

USERS_PG = TableSchema("inventory", "public", "users", (Column("id", ConnectType.INT64),), ("id",))


def _parsed(parser: RecordParser, *events: ChangeEvent) -> list[SinkChange]:
    out = []
    for offset, rec in enumerate(emit(list(events), EmitOptions())):
        change = parser.parse(rec.topic, 0, offset, rec.key_bytes(), rec.value_bytes())
        assert change is not None
        out.append(change)
    return out


def _order(n: int) -> ChangeEvent:
    row = {"id": n, "customer": "c", "amount": None, "created": None, "day": None}
    return ChangeEvent(Operation.CREATE, ORDERS, None, row, SourceInfo("t", n))


def test_templates_render_each_placeholder() -> None:
    names = TableNames({
        "shop.orders": TableSettings(name="raw.{db}__{table}"),
        "inventory.*": TableSettings(name="{schema}_{table}"),
        "*.events": TableSettings(name="logs.{topic}"),
        "crm.*": TableSettings(mode=TableMode.CHANGELOG),  # no name: the default
    }, "lake")
    assert names.target("shop", None, "orders", "cdcnorm.shop.orders") == ("raw", "shop__orders")
    assert names.target("inventory", "public", "users", "t") == ("lake", "public_users")  # no namespace: sink.namespace
    assert names.target("shop", None, "events", "cdcnorm.shop.events") == ("logs", "cdcnorm_shop_events")  # dots: _
    assert names.target("crm", None, "users", "t") == ("lake", "users")
    assert names.fixed_namespace is None  # a template names its own namespace
    plain = TableNames({"crm.*": TableSettings(mode=TableMode.CHANGELOG)}, None)
    assert plain.target("crm", "public", "users", "t") == ("crm", "users")  # the source db, as before
    assert plain.target("shop", None, "t", "t") == ("shop", "t")
    assert TableNames({"*": TableSettings(name="{table}")}, "lake").fixed_namespace == "lake"


def test_a_more_specific_pattern_without_a_name_keeps_the_default() -> None:
    names = TableNames({"shop.*": TableSettings(name="raw.{table}"), "shop.orders": TableSettings()}, None)
    assert names.target("shop", None, "orders", "t") == ("shop", "orders")
    assert names.target("shop", None, "users", "t") == ("raw", "users")


def test_namings_pickle_and_compare_by_their_settings() -> None:
    names = TableNames({"*": TableSettings(name="raw.{table}")}, "x")
    again = pickle.loads(pickle.dumps(names))
    assert again == names and hash(again) == hash(names)
    assert again.target("a", None, "b", "t") == ("raw", "b")
    assert TableNames({"*": TableSettings(name="raw.{table}")}, "y") != names
    assert TableNames({"*": TableSettings(name="raw.{table}"), "a.*": TableSettings()}, "x") != names


def test_the_parser_names_each_change_and_keeps_its_source() -> None:
    names = TableNames({"shop.*": TableSettings(name="raw.{db}_{table}")}, "lake")
    users = ChangeEvent(Operation.CREATE, USERS_PG, None, {"id": 1}, SourceInfo("t", 1))
    order, user = _parsed(RecordParser(names=names), _order(1), users)
    assert (order.table, order.source) == (("raw", "shop_orders"), ("shop", "orders"))
    assert (user.table, user.source) == (("lake", "users"), ("inventory", "users"))  # db first, as before
    (plain,) = _parsed(RecordParser(), _order(2))
    assert (plain.table, plain.source) == (("shop", "orders"), None)
    assert pickle.loads(pickle.dumps(order)) == order  # the source travels from the read job to the write job


def _write(tmp_path: Path, tables: Any) -> Path:
    raw = {"broker": {"bootstrap_servers": "k:9092"}, "sink": {"topics": ["t"], "tables": tables}}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize(("template", "why"), [
    ("a.b.{table}", "at most one dot"),
    ("{database}_{table}", "unknown placeholder {database}"),
    ("raw.", "an empty namespace or table name"),
    ("{table:>10}", "{table} takes no format or conversion"),
    ("{table", "write a literal brace twice"),
])
def test_bad_templates_stop_validate_config_with_the_key(tmp_path: Path, template: str, why: str) -> None:
    with pytest.raises(CdcnormError) as info:
        read_sink_config(_write(tmp_path, {"shop.*": {"name": template}, "crm.*": {"mode": "scd9"}}))
    text = str(info.value)
    assert "sink.tables.shop.*.name" in text and why in text, text
    assert "sink.tables.crm.*.mode" in text, "every problem at once"


def _tables(tables: dict[str, Any]) -> ice.IcebergTables:
    config = SinkConfig.from_section({"topics": ["t"], "namespace": "lake", "tables": tables})
    return ice.IcebergTables(FakeSpark(), config)  # type: ignore[arg-type]


def test_a_renamed_table_takes_the_settings_of_its_source() -> None:
    tables = _tables({"shop.*": {"name": "raw.{table}", "mode": "changelog", "partition_by": ["bucket(2, id)"]},
                      "*": {"mode": "history"}})
    tables.note_sources(("raw", "orders"), {("shop", "orders")})
    assert tables.settings_of(("raw", "orders")).mode is TableMode.CHANGELOG
    assert tables.settings_of(("lake", "users")).mode is TableMode.HISTORY  # a table of its own name: "*"


def test_sources_with_different_settings_in_one_table_pause_it() -> None:
    tables = _tables({"shop_1.*": {"name": "shop.{table}"}, "shop_2.*": {"name": "shop.{table}", "mode": "changelog"},
                      "shop_3.*": {"name": "shop.{table}"}})
    tables.note_sources(("shop", "orders"), {("shop_1", "orders"), ("shop_3", "orders")})  # shards: one shape
    with pytest.raises(TableSettingsError) as info:
        tables.note_sources(("shop", "orders"), {("shop_2", "orders")})
    assert "its sources shop_1.orders, shop_3.orders and shop_2.orders have different sink.tables settings" in str(info.value)
