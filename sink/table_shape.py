"""A table's shape: its partition spec, write order and per-table properties (``sink.tables``,
:mod:`sink.table_settings`), applied through the Iceberg Java API, and read back for the write
tasks (:class:`TableLayout`).

Applied when the sink creates the table, and when it first writes it in a run if the settings
changed since: a different partition spec is Iceberg's partition evolution (the new spec holds for
new data files; the files written under the old one stay as they are), a different write order
replaces the table's sort order, a property is set. Only metadata changes: nothing is rewritten
behind the user's back (``rewrite_data_files`` does that, when maintenance runs). A setting that
is not given (no matching pattern, or no ``partition_by`` / ``sort_by`` under it) leaves that part
of an existing table as it is.

Every table the sink creates starts unpartitioned (spec 0) and is then evolved to its spec, so its
metadata keeps an unpartitioned spec: the row-delta path writes its equality deletes with that
spec, which makes them apply to every partition (Iceberg's "global" deletes). That is how an update
that moves a row to another partition, or a delete of a row whose partition the change does not
tell, removes the old row wherever it is (``sink/jvm/CdcnormCommits.java``). A table partitioned by
someone else from the start has no such spec; its batches are MERGEd, which finds the stored row
by key across partitions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sink.partitioning import PartitionField, check_term
from sink.table_settings import PartitionTerm, SortTerm, TableSettings
from transforms.errors import CdcnormError

__all__ = ["TableLayout", "TableSettingsError", "apply_shape", "layout_of", "shape_problems"]

log = logging.getLogger("cdcnorm.sink")


class TableSettingsError(CdcnormError):
    """A table's settings (``sink.tables``) do not fit its columns: the table is paused."""


@dataclass(frozen=True)
class TableLayout:
    """A table's current partition spec and write order, as the write tasks use them, and whether
    the row-delta path can write it (``row_deltas``: it has an unpartitioned spec for global
    equality deletes, and its partition fields are top-level columns)."""

    partition: tuple[PartitionField, ...] = ()
    sort: tuple[SortTerm, ...] = ()
    row_deltas: bool = True

    def describe(self) -> dict[str, Any]:
        return {
            "partition_by": [f"{f.transform}({f.column})" for f in self.partition],
            "sort_by": [t.text for t in self.sort],
        }


def _columns(jt: Any) -> dict[str, str]:
    """The table's top-level columns and their Iceberg types."""
    return {f.name(): f.type().toString() for f in jt.schema().columns()}


def shape_problems(settings: TableSettings, columns: dict[str, str]) -> list[str]:
    """What in ``settings`` does not fit a table of ``columns`` (name -> Iceberg type)."""
    problems = []
    if settings.partition_by is not None:
        for term in settings.partition_terms:
            why = check_term(term.iceberg, term.column, columns.get(term.column))
            if why is not None:
                problems.append(f"partition_by {why}")
    if settings.sort_by is not None:
        problems += [f"sort_by {t.column}: the table has no column {t.column}"
                     for t in settings.sort_terms if t.column not in columns]
    return problems


def _term_expression(jvm: Any, term: PartitionTerm) -> Any:
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    if term.transform == "bucket":
        return expressions.bucket(term.column, term.arg)
    if term.transform == "truncate":
        return expressions.truncate(term.column, term.arg)
    return getattr(expressions, term.transform)(term.column)  # year, month, day, hour


def _current_spec(jt: Any) -> list[tuple[str, str, str]]:
    """The current spec's fields: (transform as Iceberg prints it, source column, field name)."""
    schema = jt.schema()
    return [(f.transform().toString(), schema.findColumnName(f.sourceId()), f.name()) for f in jt.spec().fields()]


def _current_sort(jt: Any) -> list[SortTerm] | None:
    """The table's write order as column terms (``None``: it sorts by a transform, which the
    write tasks leave to Spark's writers)."""
    schema = jt.schema()
    terms = []
    for f in jt.sortOrder().fields():
        if f.transform().toString() != "identity":
            return None
        terms.append(SortTerm(schema.findColumnName(f.sourceId()), f.direction().toString() == "DESC",
                              f.nullOrder().toString() == "NULLS_FIRST"))
    return terms


def apply_shape(jvm: Any, jt: Any, settings: TableSettings, tid: str) -> list[str]:
    """Bring the Java table ``jt`` to ``settings`` (see the module); returns what changed, for
    the log. Raises :class:`TableSettingsError` when a term does not fit the table's columns."""
    problems = shape_problems(settings, _columns(jt))
    if problems:
        raise TableSettingsError(f"table {tid}: sink.tables settings do not fit its columns: " + "; ".join(problems))
    changed = []
    if settings.partition_by is not None:
        current = _current_spec(jt)
        desired = settings.partition_terms
        have = {(t, c) for t, c, _ in current}
        want = {(t.iceberg, t.column) for t in desired}
        if have != want:
            update = jt.updateSpec()
            for transform, column, name in current:
                if (transform, column) not in want:
                    update = update.removeField(name)
            for term in desired:
                if (term.iceberg, term.column) not in have:
                    update = update.addField(term.column) if term.transform == "identity" else \
                        update.addField(_term_expression(jvm, term))
            update.commit()
            changed.append("partition spec " + (", ".join(t.ddl for t in desired) or "unpartitioned"))
    if settings.sort_by is not None:
        desired_sort = list(settings.sort_terms)
        if _current_sort(jt) != desired_sort:
            nulls = jvm.org.apache.iceberg.NullOrder
            ref = jvm.org.apache.iceberg.expressions.Expressions.ref
            replace = jt.replaceSortOrder()
            for t in desired_sort:
                order = nulls.NULLS_FIRST if t.nulls_first else nulls.NULLS_LAST
                # the (Term, NullOrder) overloads: py4j does not see the interface's default (String, ...) ones
                replace = replace.desc(ref(t.column), order) if t.descending else replace.asc(ref(t.column), order)
            replace.commit()
            changed.append("write order " + (", ".join(t.text for t in desired_sort) or "none"))
    props = jt.properties()
    missing = {k: v for k, v in settings.properties.items() if props.get(k) != v}
    if missing:
        update = jt.updateProperties()
        for k, v in missing.items():
            update = update.set(k, v)
        update.commit()
        changed.append("properties " + ", ".join(sorted(missing)))
    return changed


def layout_of(jt: Any) -> TableLayout:
    """The Java table's current :class:`TableLayout`."""
    types = _columns(jt)
    partition = tuple(
        PartitionField(transform, column, types.get(column, "")) for transform, column, _ in _current_spec(jt)
    )
    row_deltas = not partition or (
        all(f.source_type for f in partition) and any(s.isUnpartitioned() for s in jt.specs().values())
    )
    return TableLayout(partition, tuple(_current_sort(jt) or ()), row_deltas)
