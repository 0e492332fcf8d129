"""Per-table settings (``sink.tables``): a table's name, partition spec, write order, mode and
Iceberg properties, chosen by glob patterns over the source's ``<db>.<table>``.

The partition terms are written as Spark DDL writes them (``bucket(16, id)``, ``days(created_at)``,
``truncate(4, sku)``, ``hours(ts)``, ``months(d)``, ``years(d)``, a plain column for identity) and
the write order as ``column [ASC|DESC] [NULLS FIRST|LAST]``. Both are parsed here, so a typo stops
``validate-config`` with the table pattern, the term and why, before a run.

The most specific pattern wins: the one with the most characters that are not wildcards (``shop.orders``
before ``shop.*`` before ``*``); among equally specific ones, the first in the file.
"""

from __future__ import annotations

import fnmatch
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "NAME_FIELDS",
    "PartitionTerm",
    "SortTerm",
    "TableMode",
    "TableNames",
    "TablePattern",
    "TableSettings",
    "check_name_template",
    "check_pattern",
    "differing_sources",
    "parse_partition_term",
    "parse_sort_term",
    "settings_for",
]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`"
_ARG = rf"\s*({_IDENT})\s*"
_NUM = r"\s*(\d+)\s*"
_TIME_TRANSFORMS = {"years": "year", "year": "year", "months": "month", "month": "month",
                    "days": "day", "day": "day", "date": "day", "hours": "hour", "hour": "hour", "date_hour": "hour"}


def _name(token: str) -> str:
    return token[1:-1].replace("``", "`") if token.startswith("`") else token


@dataclass(frozen=True, slots=True)
class PartitionTerm:
    """One partition field: Iceberg's transform (``identity``, ``bucket``, ``truncate``, ``year``,
    ``month``, ``day``, ``hour``), its source column, and the bucket count or truncate width."""

    transform: str
    column: str
    arg: int | None = None

    @property
    def iceberg(self) -> str:
        """The transform as Iceberg prints it (``bucket[16]``, ``day``, ``identity``)."""
        return f"{self.transform}[{self.arg}]" if self.arg is not None else self.transform

    @property
    def ddl(self) -> str:
        """The term as Spark DDL writes it (``bucket(16, `id`)``)."""
        col = "`" + self.column.replace("`", "``") + "`"
        if self.transform == "identity":
            return col
        if self.arg is not None:
            return f"{self.transform}({self.arg}, {col})"
        return f"{self.transform}s({col})"

    @property
    def field_name(self) -> str:
        """The partition field's name, as Iceberg names it by default (``id_bucket``, ``ts_day``)."""
        if self.transform == "identity":
            return self.column
        return f"{self.column}_{'trunc' if self.transform == 'truncate' else self.transform}"


@dataclass(frozen=True, slots=True)
class SortTerm:
    """One column of the write order."""

    column: str
    descending: bool = False
    nulls_first: bool = True

    @property
    def text(self) -> str:
        return f"{self.column} {'DESC' if self.descending else 'ASC'} NULLS {'FIRST' if self.nulls_first else 'LAST'}"


def parse_partition_term(text: str) -> PartitionTerm:
    """A Spark DDL partition term.

    >>> parse_partition_term("bucket(16, id)"), parse_partition_term("days(created_at)").iceberg
    (PartitionTerm(transform='bucket', column='id', arg=16), 'day')
    >>> parse_partition_term("truncate(sku, 4)") == parse_partition_term("truncate(4, sku)")
    True
    >>> parse_partition_term("bucket(0, id)")
    Traceback (most recent call last):
    ...
    ValueError: 'bucket(0, id)': the bucket count must be at least 1
    """
    s = text.strip()
    if m := re.fullmatch(rf"(?:identity\s*\({_ARG}\)|({_IDENT}))", s, re.IGNORECASE):
        return PartitionTerm("identity", _name(m.group(1) or m.group(2)))
    if m := re.fullmatch(rf"(bucket|truncate)\s*\((?:{_NUM},{_ARG}|{_ARG},{_NUM})\)", s, re.IGNORECASE):
        kind = m.group(1).lower()
        arg = int(m.group(2) or m.group(5))
        column = _name(m.group(3) or m.group(4))
        if arg < 1:
            raise ValueError(f"{text!r}: the {'bucket count' if kind == 'bucket' else 'width'} must be at least 1")
        return PartitionTerm(kind, column, arg)
    if m := re.fullmatch(rf"([A-Za-z_]+)\s*\({_ARG}\)", s):
        name = m.group(1).lower()
        if name in ("bucket", "truncate"):
            needs = "a count" if name == "bucket" else "a width"
            raise ValueError(f"{text!r}: {name} needs {needs}: {name}({'N' if name == 'bucket' else 'W'}, {m.group(2)})")
        kind = _TIME_TRANSFORMS.get(m.group(1).lower())
        if kind is not None:
            return PartitionTerm(kind, _name(m.group(2)))
        raise ValueError(f"{text!r}: unknown transform {m.group(1)!r} (bucket, truncate, years, months, days, hours, "
                         "identity)")
    raise ValueError(f"{text!r} is not a partition term: write a column, bucket(N, col), truncate(W, col), "
                     "years(col), months(col), days(col) or hours(col)")


def parse_sort_term(text: str) -> SortTerm:
    """A write-order term: ``column [ASC|DESC] [NULLS FIRST|LAST]`` (nulls first when ascending,
    last when descending, as Iceberg's default).

    >>> parse_sort_term("created_at desc")
    SortTerm(column='created_at', descending=True, nulls_first=False)
    """
    m = re.fullmatch(rf"\s*({_IDENT})(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(f"{text!r} is not a sort term: write `column [ASC|DESC] [NULLS FIRST|LAST]`")
    descending = (m.group(2) or "asc").lower() == "desc"
    nulls = m.group(3)
    return SortTerm(_name(m.group(1)), descending, (not descending) if nulls is None else nulls.lower() == "first")


class TableMode(StrEnum):
    """What a table holds (``sink.tables.<pattern>.mode``)."""

    UPSERT = "upsert"  # the current state by key (the default)
    CHANGELOG = "changelog"  # every change appended, deletes and truncates too (the "bronze" table)
    HISTORY = "history"  # slowly changing dimension type 2: every version with its validity (sink.scd2)


class TableSettings(BaseModel):
    """How the tables one pattern matches are shaped (``sink.tables.<pattern>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition_by: tuple[str, ...] | None = Field(
        None, description="Iceberg partition transforms as Spark DDL writes them: bucket(16, id), days(created_at), "
                          "truncate(4, sku), a column for identity. [] : unpartitioned. Not set: an existing "
                          "table's spec is left as it is (new tables are unpartitioned)."
    )
    sort_by: tuple[str, ...] | None = Field(
        None, description="The table's write order: `column [ASC|DESC] [NULLS FIRST|LAST]`. [] : unsorted. Not set: "
                          "an existing table's order is left as it is."
    )
    name: str | None = Field(
        None, description="The table's identifier in the catalog, a template over {db}, {schema}, {table} and {topic}: "
                          "`<namespace>.<table>` or `<table>` alone (then in sink.namespace, else the source db). "
                          "Dots in a value become underscores. Not set: <sink.namespace or db>.<table>.",
    )
    properties: dict[str, str] = Field(default_factory=dict, description="Iceberg table properties of these tables.")
    mode: TableMode = Field(
        TableMode.UPSERT,
        description="upsert: the current state by key. changelog: every change appended with its op, sequence, source "
                    "timestamp, topic/partition/offset and commit time (also for keyless tables). history: every "
                    "version of a row with __valid_from/__valid_to/__is_current (SCD type 2; keyed tables). Fixed "
                    "when the table is created.",
    )

    @field_validator("name")
    @classmethod
    def _name_template(cls, value: str | None) -> str | None:
        return value if value is None else check_name_template(value)

    @field_validator("partition_by")
    @classmethod
    def _partition_terms(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        problems = []
        fields: set[tuple[str, str]] = set()
        for term in value:
            try:
                parsed = parse_partition_term(term)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            kind = "time" if parsed.transform in ("year", "month", "day", "hour") else parsed.transform
            if (parsed.column, kind) in fields:
                what = "time partition (years, months, days, hours)" if kind == "time" else f"{kind} partition"
                problems.append(f"{term!r}: a second {what} of column {parsed.column} (Iceberg refuses redundant partitions)")
            fields.add((parsed.column, kind))
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("sort_by")
    @classmethod
    def _sort_terms(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        problems = []
        for term in value:
            try:
                parse_sort_term(term)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @property
    def partition_terms(self) -> tuple[PartitionTerm, ...]:
        return tuple(parse_partition_term(t) for t in self.partition_by or ())

    @property
    def sort_terms(self) -> tuple[SortTerm, ...]:
        return tuple(parse_sort_term(t) for t in self.sort_by or ())


DEFAULT_SETTINGS = TableSettings()


def _specificity(pattern: str) -> int:
    return sum(1 for c in pattern if c not in "*?[]")


def check_pattern(pattern: str) -> str:
    """``sink.tables``' keys are globs over ``<db>.<table>``: a key with neither a dot nor a
    ``*`` would match no table.

    >>> check_pattern("orders")
    Traceback (most recent call last):
    ...
    ValueError: 'orders' matches no table: the keys match <db>.<table> (as the source names it), e.g. shop.orders, *.orders, shop.*, *
    """
    if "." not in pattern and "*" not in pattern:
        raise ValueError(f"{pattern!r} matches no table: the keys match <db>.<table> (as the source names it), "
                         "e.g. shop.orders, *.orders, shop.*, *")
    return pattern


NAME_FIELDS = ("db", "schema", "table", "topic")


def check_name_template(template: str) -> str:
    """A ``name`` template: ``<namespace>.<table>`` or ``<table>``, each part literal text and
    ``{db}``, ``{schema}``, ``{table}``, ``{topic}``.

    >>> check_name_template("raw.{db}_{table}")
    'raw.{db}_{table}'
    >>> check_name_template("{database}.{table}")
    Traceback (most recent call last):
    ...
    ValueError: '{database}.{table}': unknown placeholder {database} (one of {db}, {schema}, {table}, {topic})
    """
    fields = ", ".join("{" + f + "}" for f in NAME_FIELDS)
    parts = template.split(".")
    if len(parts) > 2:
        raise ValueError(f"{template!r}: at most one dot, <namespace>.<table> or <table> (dots in a value become _)")
    if any(not p.strip() for p in parts):
        raise ValueError(f"{template!r}: an empty namespace or table name")
    for part in parts:
        try:
            parsed = list(string.Formatter().parse(part))
        except ValueError as exc:
            raise ValueError(f"{template!r}: {exc} (write a literal brace twice: {{{{ }}}})") from None
        for _, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in NAME_FIELDS:
                raise ValueError(f"{template!r}: unknown placeholder {{{name}}} (one of {fields})")
            if spec or conversion:
                raise ValueError(f"{template!r}: {{{name}}} takes no format or conversion")
    return template


TablePattern = Annotated[str, AfterValidator(check_pattern)]
"""A ``sink.tables`` key (checked with the values, so every problem is reported at once)."""


def settings_for(tables: dict[str, TableSettings], db: str, table: str) -> TableSettings:
    """The settings of the source table ``db.table``: its most specific matching pattern's
    (case-sensitive globs), else the defaults.

    >>> t = {"*": TableSettings(sort_by=("a",)), "shop.*": TableSettings(partition_by=("bucket(4, id)",))}
    >>> settings_for(t, "shop", "orders").partition_by, settings_for(t, "crm", "users").sort_by
    (('bucket(4, id)',), ('a',))
    """
    name = f"{db}.{table}"
    best: tuple[int, TableSettings] | None = None
    for pattern, settings in tables.items():
        if fnmatch.fnmatchcase(name, pattern):
            score = _specificity(pattern)
            if best is None or score > best[0]:
                best = (score, settings)
    return DEFAULT_SETTINGS if best is None else best[1]


def differing_sources(tables: dict[str, TableSettings], sources: Iterable[tuple[str, str]]) -> str | None:
    """Why source tables named into one table cannot share it: settings that differ in anything
    but the name; ``None`` when they agree.

    >>> t = {"a.*": TableSettings(name="x.{table}"), "b.*": TableSettings(name="x.{table}", mode=TableMode.CHANGELOG)}
    >>> differing_sources(t, [("a", "t"), ("b", "t")])
    'its sources a.t and b.t have different sink.tables settings (mode, partitioning, order or properties); give them one, or names that keep them apart'
    """
    shapes: list[tuple[TableSettings, list[str]]] = []  # settings apart from the name, their sources
    for db, name in sorted(sources):
        settings = settings_for(tables, db, name).model_copy(update={"name": None})
        same = next((names for shape, names in shapes if shape == settings), None)
        if same is None:
            shapes.append((settings, [f"{db}.{name}"]))
        else:
            same.append(f"{db}.{name}")
    if len(shapes) < 2:
        return None
    return (f"its sources {' and '.join(', '.join(n) for _, n in shapes)} have different sink.tables settings "
            "(mode, partitioning, order or properties); give them one, or names that keep them apart")


class TableNames:
    """Where each source table lands in the sink's catalog: ``(namespace, table)``.

    Without a ``name`` template the table keeps its source name, in ``sink.namespace`` when that
    is set, else in its source db. A template's values are the source's ``db`` (else its schema),
    ``schema`` (else its db), ``table`` and the record's ``topic``; a dot in a value becomes ``_``
    so that the template alone decides where the namespace ends.

    >>> names = TableNames({"shop.*": TableSettings(name="raw.{db}_{table}")}, "lake")
    >>> names.target("shop", None, "orders", "n.shop.orders"), names.target("crm", "public", "users", "t")
    (('raw', 'shop_orders'), ('lake', 'users'))
    >>> TableNames({"*": TableSettings(name="{topic}")}, None).target("crm", "public", "users", "n.crm.users")
    ('crm', 'n_crm_users')
    """

    __slots__ = ("_cache", "_key", "_namespace", "_tables", "_templated")

    def __init__(self, tables: dict[str, TableSettings], namespace: str | None) -> None:
        self._tables = tables
        self._namespace = namespace
        self._templated = any(s.name for s in tables.values())
        self._cache: dict[tuple[str, str | None, str, str], tuple[str, str]] = {}
        # equal namings are one (an executor's parsers are kept per naming, each unpickled anew)
        self._key = (namespace, tuple((p, s.name) for p, s in tables.items()))

    def __reduce__(self) -> tuple[type[TableNames], tuple[dict[str, TableSettings], str | None]]:
        return TableNames, (self._tables, self._namespace)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableNames) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def fixed_namespace(self) -> str | None:
        """``sink.namespace`` when every table lands in it (no template names a namespace)."""
        if any(s.name and "." in s.name for s in self._tables.values()):
            return None
        return self._namespace

    def target(self, db: str, schema: str | None, table: str, topic: str) -> tuple[str, str]:
        """The ``(namespace, table)`` the source table ``db.table`` (read from ``topic``) lands in."""
        if not self._templated:
            return (self._namespace or db, table)
        key = (db, schema, table, topic)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._render(db, schema, table, topic)
        return hit

    def _render(self, db: str, schema: str | None, table: str, topic: str) -> tuple[str, str]:
        template = settings_for(self._tables, db, table).name
        namespace = self._namespace or db
        if template is None:
            return (namespace, table)
        values = {"db": db, "schema": schema or db, "table": table, "topic": topic}
        flat = {k: v.replace(".", "_") for k, v in values.items()}
        *ns, name = (part.format_map(flat) for part in template.split("."))
        return (ns[0] if ns else namespace, name)
