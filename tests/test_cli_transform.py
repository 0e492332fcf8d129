"""`cdcnorm transform` follows the contract in CANONICAL.md, run as a user runs it."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app
from transforms.envelope import EmitOptions
from transforms.smt.registry import build_chain

ROOT = Path(__file__).resolve().parents[1]
CDCNORM = [sys.executable, "-m", "cdcnorm.cli"]


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CDCNORM, *args], input=stdin, capture_output=True, cwd=ROOT, timeout=60)


def test_transform_prints_json_lines_and_tombstones() -> None:
    proc = _run("transform", "--format", "canal-json", str(ROOT / "tests/data/canal-json/seed-delete.txt"))
    assert proc.returncode == 0, proc.stderr
    lines = [orjson.loads(x) for x in proc.stdout.splitlines()]
    assert [sorted(x) for x in lines] == [["key", "topic", "value"]] * 2
    delete, tombstone = lines
    assert delete["value"]["payload"]["op"] == "d"
    assert delete["key"]["payload"] == {"id": 500000287}
    assert tombstone == {"topic": delete["topic"], "key": delete["key"], "value": None}


def test_bad_lines_go_to_stderr_and_processing_goes_on() -> None:
    good = (ROOT / "tests/data/canal-json/seed-delete.txt").read_bytes().strip()
    stdin = b"{truncated\n" + good + b"\n" + b'{"type":"MERGE","data":[]}\n'
    proc = _run("transform", "--format", "canal-json", "-", stdin=stdin)
    assert proc.returncode == 2
    errors = [orjson.loads(x) for x in proc.stderr.splitlines() if x.startswith(b'{"line"')]
    assert [e["line"] for e in errors] == [1, 3]
    assert all(e["error_class"] == "DecodeError" and "canal-json" in e["error"] for e in errors)
    assert len(proc.stdout.splitlines()) == 2  # the good line's delete + tombstone


def test_a_bad_row_fails_alone_as_in_the_worker() -> None:
    doc = orjson.loads((ROOT / "tests/data/canal-json/flink-canal-data.txt").read_bytes().splitlines()[0])
    doc["data"][7]["id"] = "A101"  # 9 rows, id typed INTEGER
    proc = _run("transform", "--format", "canal-json", "-", stdin=orjson.dumps(doc) + b"\n")
    assert proc.returncode == 2
    errors = [orjson.loads(x) for x in proc.stderr.splitlines() if x.startswith(b'{"line"')]
    assert [(e["line"], e["row"], e["error_class"]) for e in errors] == [(1, 7, "DecodeError")]
    assert "data[7].id" in errors[0]["error"]
    records = [orjson.loads(x) for x in proc.stdout.splitlines()]
    assert [r["key"]["payload"]["id"] for r in records] == [101, 102, 103, 104, 105, 106, 107, 109]


def test_binary_formats_take_base64_lines() -> None:
    proc = _run("transform", "--format", "dts-avro", "-", stdin=base64.b64encode(b"\x00garbage") + b"\nnot base64!\n")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) >= 2


def test_unknown_option_is_a_config_error() -> None:
    proc = _run("transform", "--format", "canal-json", "--option", "no.such=1", "-", stdin=b"")
    assert proc.returncode == 1
    assert b"no.such" in proc.stderr


def test_formats_lists_every_format_with_options() -> None:
    proc = _run("formats", "--json")
    assert proc.returncode == 0
    listed = {f["format"]: f for f in orjson.loads(proc.stdout)}
    assert {"canal-json", "dts-avro", "qlik-avro", "arcion-csv", "auto"} <= set(listed)
    assert any(o["name"] == "decimal.handling.mode" for o in listed["canal-json"]["options"])


def test_readme_chain_example_builds() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    block = re.search(r"```yaml\n(transforms:.*?)```", text, re.S)
    assert block, "docs/configuration.md has a transforms example"
    specs = yaml.safe_load(block.group(1))["transforms"]
    chain = build_chain(specs, emit_options=EmitOptions())
    assert len(chain) == len(specs)


# ----------------------------------------------------------------------------- the worker's pipeline

NO_TABLE = orjson.dumps({
    "data": [{"id": "7", "name": "x"}], "isDdl": False, "type": "INSERT", "es": 1700000000000, "ts": 1700000000001,
    "pkNames": ["id"], "mysqlType": {"id": "int", "name": "varchar(10)"}, "sqlType": {"id": 4, "name": 12},
})
"""A Canal message that names no database and no table: the source topic names its table."""


def _worker_records(config: dict[str, object], topic: str, values: list[bytes]) -> list[dict[str, object]]:
    """What the worker's Normalizer makes of ``values`` consumed from ``topic``, as transform prints it."""
    from service.app import Normalizer
    from service.config import parse_config
    from transforms.decoders import Message

    normalizer = Normalizer(parse_config(config))
    runtime = normalizer.runtime_for(topic)
    assert runtime is not None
    out = []
    for offset, value in enumerate(values):
        outcome = normalizer.process(Message(value, None, topic, 0, offset), runtime)
        assert outcome.dlq is None
        out += [{"topic": normalizer.output_topic(r.topic), "key": r.key, "value": r.value} for r in outcome.records]
    return out


def test_the_source_topic_names_a_table_the_message_does_not_name(tmp_path: Path) -> None:
    path = tmp_path / "orders 2024.txt"
    path.write_bytes(NO_TABLE + b"\n")
    by_file = _run("transform", "--format", "canal-json", "--topic-prefix", "par", str(path))
    assert by_file.returncode == 0, by_file.stderr
    record = orjson.loads(by_file.stdout.splitlines()[0])
    assert record["topic"] == "par.default.orders_2024"  # the file's stem, never its path
    assert record["value"]["payload"]["source"]["table"] == "orders_2024"

    named = _run("transform", "--format", "canal-json", "--source-topic", "shop-orders", str(path))
    assert orjson.loads(named.stdout.splitlines()[0])["topic"] == "cdcnorm.default.shop-orders"
    stdin = _run("transform", "--format", "canal-json", "-", stdin=NO_TABLE + b"\n")
    assert orjson.loads(stdin.stdout.splitlines()[0])["topic"] == "cdcnorm.default.cdcnorm-transform"

    # the worker, consuming the same message from topic shop-orders, writes the same records
    worker = _worker_records({"topics": [{"name": "shop-orders", "format": "canal-json"}]}, "shop-orders", [NO_TABLE])
    assert [orjson.loads(x) for x in named.stdout.splitlines()] == worker


def test_an_invalid_source_topic_is_refused() -> None:
    proc = _run("transform", "--format", "canal-json", "--source-topic", "a/b", "-", stdin=b"")
    assert proc.returncode == 1 and b"--source-topic=a/b: not a valid Kafka topic name" in proc.stderr


def test_output_topics_are_valid_topic_names_as_the_worker_makes_them() -> None:
    message = orjson.loads(NO_TABLE)
    message.update(database="my db", table="t$1")
    proc = _run("transform", "--format", "canal-json", "-", stdin=orjson.dumps(message) + b"\n")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout.splitlines()[0])["topic"] == "cdcnorm.my_db.t_1"


PIPELINE = {
    "topic_prefix": "lake",
    "topics": [
        {"name": "other", "format": "maxwell-json"},
        {
            "pattern": "shop-.*",
            "format": "canal-json",
            "options": {"decimal.handling.mode": "string"},
            "key_columns": {"shop-eu": ["name"]},
            "transforms": [{"type": "mask", "fields": "email"}, {"type": "insert-field", "static.field": "region",
                                                               "static.value": "eu"}],
            "topic_template": "{prefix}.cdc.{table}",
            "tombstones": False,
        },
    ],
}


def test_config_runs_the_entry_of_the_source_topic_as_the_worker_does(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(PIPELINE))
    lines = [*(ROOT / "tests/data/canal-json/seed-delete.txt").read_bytes().strip().splitlines(), NO_TABLE]
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    proc = _run("transform", "--config", str(config), "--topic", "shop-eu", str(source))
    assert proc.returncode == 0, proc.stderr
    printed = [orjson.loads(x) for x in proc.stdout.splitlines()]
    assert printed == _worker_records(PIPELINE, "shop-eu", lines)
    assert [r["topic"] for r in printed] == ["lake.cdc.tablename", "lake.cdc.shop-eu"]  # template; no tombstone
    assert printed[1]["key"]["payload"] == {"name": "x"}  # key_columns
    assert printed[1]["value"]["payload"]["after"]["region"] == "eu"  # the chain

    keyed = tmp_path / "keyed.txt"
    keyed.write_bytes(b'{"id": 7}\n' + NO_TABLE + b"\n")
    proc = _run("transform", "--config", str(config), "-t", "shop-eu", "--key-lines", str(keyed))
    assert proc.returncode == 0, proc.stderr
    assert [orjson.loads(x) for x in proc.stdout.splitlines()] == printed[1:]


def test_config_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(PIPELINE))
    cases = {
        ("--config", str(config)): b"--config needs --source-topic",
        ("--config", str(config), "--topic", "nobody"): b"no topics[] entry of",
        ("--config", str(config), "--topic", "other", "--format", "canal-json"): b"--format cannot be combined",
    }
    for args, message in cases.items():
        proc = _run("transform", *args, "-", stdin=b"")
        assert proc.returncode == 1 and message in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.splitlines()) == 1
    config.write_text(yaml.safe_dump({"topics": [{"name": "src", "format": "canal-json", "colour": 1}]}))
    proc = _run("transform", "--config", str(config), "--topic", "src", "-", stdin=b"")
    assert proc.returncode == 1 and proc.stderr.startswith(b"topics[0].colour=1: unknown key")


def test_transaction_records_as_the_config_entry_says(tmp_path: Path) -> None:
    data = ROOT / "tests/data/dts-avro/oracle-txn.txt"

    def statuses(*flags: str) -> list[str]:
        proc = _run("transform", *flags, str(data))
        assert proc.returncode == 0, proc.stderr
        values = [orjson.loads(x)["value"] for x in proc.stdout.splitlines()]
        return [v["payload"]["status"] for v in values if v and "status" in v["payload"]]

    assert statuses("--format", "dts-avro") == ["BEGIN", "END"]  # every record the decoder makes
    config = tmp_path / "pipeline.yaml"
    entry = {"name": "txn", "format": "dts-avro"}
    config.write_text(yaml.safe_dump({"topics": [entry]}))
    assert statuses("--config", str(config), "--topic", "txn") == []  # the worker's default drops them
    config.write_text(yaml.safe_dump({"topics": [{**entry, "transaction_metadata": True}]}))
    assert statuses("--config", str(config), "--topic", "txn") == ["BEGIN", "END"]


@pytest.mark.parametrize(
    "argv",
    [["transform", "--config", "pipeline.yaml", "--topic", "src", "-"], ["dlq", "replay", "--config", "pipeline.yaml"]],
    ids=["transform-config", "dlq-replay"],
)
def test_commands_of_the_worker_pipeline_name_the_service_extra(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cdcnorm.cli import main
    from transforms.extras import EXTRAS

    monkeypatch.setitem(EXTRAS, "service", (*EXTRAS["service"], "cdcnorm_test_module_that_is_not_installed"))
    monkeypatch.setattr(sys, "argv", ["cdcnorm", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.rstrip().endswith("pip install 'cdcnorm[service]'"), err


def test_transform_without_config_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from transforms.extras import EXTRAS

    monkeypatch.setitem(EXTRAS, "service", (*EXTRAS["service"], "cdcnorm_test_module_that_is_not_installed"))
    result = CliRunner().invoke(app, ["transform", "--format", "canal-json", "-"], input=NO_TABLE + b"\n")
    assert result.exit_code == 0, result.output


def test_a_file_is_written_through_a_large_buffer_with_the_same_records_as_from_stdin(tmp_path: Path) -> None:
    """From a file to a file the records go through a 1 MiB buffer (a 3 KB record per write()
    through stdout's 8 KiB one made a system call every few records); the output is the one
    stdin gives, record for record, and a bad line in the middle fails alone."""
    from bench.typed_canal import canal_messages

    lines = list(canal_messages(1_000, tables=3))
    lines.insert(500, b"{truncated")
    path = tmp_path / "typed.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with (tmp_path / "out.json").open("wb") as out:  # a file, as a user redirects stdout
        from_file = subprocess.run([*CDCNORM, "transform", "--format", "canal-json", "--source-topic", "typed",
                                    str(path)], stdout=out, stderr=subprocess.PIPE, cwd=ROOT, timeout=60)
    written = (tmp_path / "out.json").read_bytes()
    from_stdin = _run("transform", "--format", "canal-json", "--source-topic", "typed", "-", stdin=path.read_bytes())
    assert from_file.returncode == from_stdin.returncode == 2
    assert len(written) > 2 * (1 << 20)  # more than one buffer, and a last partial one
    assert written == from_stdin.stdout
    records = [orjson.loads(x) for x in written.splitlines()]
    assert [r["key"]["payload"]["id"] for r in records] == list(range(1_000))
    assert [orjson.loads(x)["line"] for x in from_file.stderr.splitlines() if x.startswith(b'{"line"')] == [501]
