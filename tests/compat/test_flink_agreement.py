"""Flink 2.3 as a second, independent consumer: its own vendor formats on the vendor file must
give the same changelog as its ``debezium-json`` on our re-emitted records of that file.

For each file below, Flink reads (a) the vendor messages with ``canal-json`` / ``maxwell-json``
/ ``ogg-json`` / ``debezium-json`` and (b) the values our pipeline makes of them with
``debezium-json`` (``schema-include``); the row kinds (+I -U +U -D) and full rows, before-images
included, must agree row for row. See ``tests/compat/flink_rig.py`` for how the columns are
typed on each side and ``flink_rig.flink_refuses`` for the vendor messages Flink's formats do not
take (those are left out of both sides and counted). All files run in one Flink process, started
from its own virtualenv (``scripts/ensure-flink-venv``, made on first use).

Every other restriction is listed per file below with its reason. ``known`` marks a file whose
difference is ours to fix: a strict xfail, so the test turns red (XPASS) once it is fixed and the
mark must go.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.compat.flink_rig import Comparison, TablePlan, compare, jobs_for, plan_tables, run_flink_jobs
from tests.goldens import Case, cases

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Restriction:
    skip_lines: dict[int, str] = field(default_factory=dict)  # vendor line -> why it is left out
    ignore_columns: dict[str, str] = field(default_factory=dict)  # column -> why it is not compared
    known: str | None = None  # a difference of ours, tracked (strict xfail)


_CANAL_GEOMETRY = (
    "canal sends MySQL's internal geometry bytes as ISO-8859-1 text; we emit Debezium's "
    "Geometry struct {wkb, srid}; Flink has no geometry type to compare them in"
)
_CANAL_ENUM = (
    "this vector sends the ENUM index ('1') / SET bitmask ('3'); we map them to labels with the "
    "mysqlType definition (value1, 'a,b'); Flink's canal-json passes the text through"
)

CASES: dict[str, Restriction] = {
    # --- canal-json
    "canal-json/flink-canal-data": Restriction(),
    "canal-json/flink-canal-data-filter-table": Restriction(),
    "canal-json/flink-canal-data-with-init": Restriction(),
    "canal-json/flinkcdc-pipeline-mysqlToKafka-canal-json": Restriction(),
    "canal-json/paimon-canal-alltype": Restriction(
        ignore_columns={
            "_enum": _CANAL_ENUM,
            "_set": _CANAL_ENUM,
            **{
                c: _CANAL_GEOMETRY
                for c in (
                    "_point",
                    "_geometry",
                    "_linestring",
                    "_polygon",
                    "_multipoint",
                    "_multiline",
                    "_multipolygon",
                    "_geometrycollection",
                )
            },
        }
    ),
    "canal-json/paimon-canal-event-insert": Restriction(),
    "canal-json/paimon-canal-event-update": Restriction(),
    "canal-json/paimon-canal-event-delete": Restriction(),
    "canal-json/paimon-canal-event-row": Restriction(),
    "canal-json/paimon-canal-incomplete-1": Restriction(),
    "canal-json/paimon-canal-multitable": Restriction(),
    "canal-json/paimon-canal-nonpk": Restriction(),
    "canal-json/paimon-canal-schemaevolution-1": Restriction(),
    "canal-json/paimon-canal-schemaevolution-2": Restriction(),
    "canal-json/paimon-canal-schemaevolution-3": Restriction(),
    "canal-json/paimon-canal-schemaevolution-4": Restriction(),
    "canal-json/paimon-canal-schemaevolution-5": Restriction(),
    "canal-json/seed-delete": Restriction(),
    "canal-json/unsigned-and-wide-decimals": Restriction(
        skip_lines={
            4: "table 'bare' has only sqlType BIGINT (-5, signed) for 18446744073709551615: we wrap it "
            "to -1 (int64, like Debezium's bigint.unsigned.handling.mode=long); Flink's BIGINT "
            "refuses the text (NumberFormatException), so the table cannot be compared",
        }
    ),
    # --- debezium-json
    "debezium-json/flink-debezium-data-schema-include": Restriction(),
    "debezium-json/flink-debezium-data-schema-exclude": Restriction(),
    "debezium-json/flink-debezium-postgres-data-schema-include": Restriction(),
    "debezium-json/flink-debezium-postgres-data-schema-exclude": Restriction(),
    "debezium-json/flink-debezium-postgres-data-replica-identity": Restriction(),
    "debezium-json/debezium-serde-update": Restriction(),
    "debezium-json/debezium-serde-with-schema": Restriction(),
    "debezium-json/debezium-serde-without-schema": Restriction(),
    "debezium-json/flinkcdc-mysql-debezium-data-schema-exclude": Restriction(),
    "debezium-json/flinkcdc-mysql-debezium-data-schema-exclude-with-numeric-decimal": Restriction(),
    "debezium-json/flinkcdc-mysql-debezium-data-schema-include": Restriction(),
    "debezium-json/paimon-debezium-avro-alltype-as-json": Restriction(),
    "debezium-json/paimon-debezium-nestedtype": Restriction(),
    "debezium-json/paimon-debezium-nullvalue": Restriction(),
    "debezium-json/paimon-debezium-schema-alltype": Restriction(),
    "debezium-json/paimon-debezium-schema-include": Restriction(),
    "debezium-json/paimon-debezium-schema-null-delete": Restriction(),
    "debezium-json/paimon-debezium-schemaevolution-3": Restriction(),
    # --- maxwell-json
    "maxwell-json/flink-maxwell-data": Restriction(),
    "maxwell-json/flink-maxwell-data-2020": Restriction(),
    "maxwell-json/kafka-key": Restriction(),
    "maxwell-json/maxwell-docs-bootstrap": Restriction(),
    "maxwell-json/paimon-maxwell-schemaevolution-1": Restriction(),
    "maxwell-json/paimon-maxwell-schemaevolution-2": Restriction(),
    "maxwell-json/paimon-maxwell-schemaevolution-3": Restriction(),
    "maxwell-json/paimon-maxwell-schemaevolution-4": Restriction(),
    "maxwell-json/unsigned-def": Restriction(),
    # --- ogg-json
    "ogg-json/flink-ogg-data": Restriction(),
    "ogg-json/features": Restriction(),
    "ogg-json/ogg-docs-ismissing": Restriction(),
    "ogg-json/paimon-ogg-event-insert": Restriction(),
    "ogg-json/paimon-ogg-event-update": Restriction(),
    "ogg-json/paimon-ogg-event-delete": Restriction(),
    "ogg-json/paimon-ogg-schemaevolution-3": Restriction(),
}

# Not compared, and why (kept here so the list above reads as the whole choice):
# - *-long variants (bigint.unsigned.handling.mode=long wraps by design; Flink has no such mode),
#   seed-ddl (no change rows), seed-delete-legacy and debezium-serde-unwrapped (every message is
#   one Flink refuses: DELETE without data[], a bare row without an envelope);
# - paimon-debezium-mongodb-* (Flink's debezium-json has no MongoDB support: string documents);
# - several tables in one file where Flink's format cannot select one (debezium-json, maxwell-json,
#   ogg-json have no table filter): flinkcdc-pipeline-mysqlToKafka-debezium-json*,
#   pg-pgoutput-workload, maxwell-docs-dataformat;
# - bad-input files (not JSON).


@dataclass
class FileResult:
    case: Case
    tables: list[tuple[TablePlan, Comparison]]


def _case(case_id: str) -> Case:
    for case in cases(case_id.split("/", 1)[0]):
        if str(case) == case_id:
            return case
    raise LookupError(f"no golden case {case_id}")


@pytest.fixture(scope="session")
def flink_agreement(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    """Every file of CASES through Flink, in one Flink process; results by case id."""
    folder = Path(tmp_path_factory.mktemp("flink"))
    plans: dict[str, list[TablePlan]] = {}
    jobs: list[dict[str, Any]] = []
    for case_id, restriction in CASES.items():
        plans[case_id] = plan_tables(_case(case_id), restriction.skip_lines)
        for plan in plans[case_id]:
            jobs += jobs_for(plan, folder / f"job{len(jobs) // 2}")
    try:
        results = run_flink_jobs(jobs, folder)
    except RuntimeError as exc:
        if "ensure-flink-venv" in str(exc):
            pytest.fail(f"cannot set up PyFlink: {exc}")
        raise
    out: dict[str, FileResult] = {}
    for case_id, table_plans in plans.items():
        ignore = CASES[case_id].ignore_columns
        tables = [
            (p, compare(p, results[f"{p.name}/vendor"], results[f"{p.name}/ours"], ignore))
            for p in table_plans
        ]
        out[case_id] = FileResult(_case(case_id), tables)
    yield out
    # the per-file table, at the end of the session (outside output capture)
    lines = report_lines(out)
    (folder / "report.txt").write_text("\n".join(lines) + "\n")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in lines:
                reporter.write_line(line)


def report_lines(results: dict[str, FileResult]) -> list[str]:
    lines = [f"Flink agreement: {'file':72} {'rows':>5} {'equal':>5} {'left out':>8} {'absent':>6}"]
    for case_id, result in results.items():
        compared = sum(c.compared for _, c in result.tables)
        equal = sum(c.equal for _, c in result.tables)
        skipped = len(result.tables[0][0].skipped) if result.tables else 0
        absent = sum(c.absent_cells for _, c in result.tables)
        lines.append(f"Flink agreement: {case_id:72} {compared:5} {equal:5} {skipped:8} {absent:6}")
    return lines


@pytest.mark.parametrize("case_id", list(CASES), ids=str)
def test_flink_reads_ours_as_it_reads_the_vendor(
    case_id: str, flink_agreement: dict[str, FileResult]
) -> None:
    restriction = CASES[case_id]
    result = flink_agreement[case_id]
    assert result.tables, f"{case_id}: no change records to compare"
    problems: list[str] = []
    for plan, comparison in result.tables:
        print(
            f"{plan.name}: {comparison.compared} rows compared, {comparison.equal} equal, "
            f"{len(plan.skipped)} vendor messages left out, {comparison.absent_cells} absent cells"
        )
        for line, reason in sorted(plan.skipped.items()):
            print(f"  left out line {line}: {reason}")
        if comparison.differences:
            problems.append(f"{plan.name}:\n  " + "\n  ".join(comparison.differences[:8]))
        elif comparison.compared == 0:
            problems.append(f"{plan.name}: no rows on either side")
    if restriction.known and problems:
        pytest.xfail(f"known: {restriction.known}")
    if restriction.known and not problems:
        pytest.fail(f"{case_id} now agrees with Flink: remove its 'known' mark ({restriction.known})")
    assert not problems, "Flink reads our output differently from the vendor file:\n" + "\n".join(problems)
