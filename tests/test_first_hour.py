"""The first hour with cdcnorm, as a new user meets it (issue 27's list): every ordinary mistake
is one line on stderr and a non-zero exit, never a traceback. Each test runs the real command
line in a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[1]


def cdcnorm(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``cdcnorm ARGS`` run from ``cwd`` (this checkout's code, wherever that is)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cdcnorm.cli", *args], capture_output=True, timeout=120,
                          cwd=cwd, input=stdin, env=env)


def one_error_line(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode()
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_transform_of_a_missing_file_or_a_folder(tmp_path: Path, where: str) -> None:
    path = tmp_path / "nothing.jsonl" if where == "missing" else tmp_path
    done = cdcnorm("transform", "--format", "canal-json", str(path), cwd=tmp_path)
    assert done.returncode == 1
    reason = "No such file or directory" if where == "missing" else "Is a directory"
    assert one_error_line(done) == f"error: {path}: {reason}"


def test_a_binary_file_given_as_config(tmp_path: Path) -> None:
    config = tmp_path / "pipeline.yaml"
    config.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\xd0\xff\xfe")
    done = cdcnorm("validate-config", str(config))
    assert done.returncode == 1
    assert one_error_line(done) == f"<file>={config}: not UTF-8 text (byte 12): a config is a YAML file"


CANAL = ROOT / "tests" / "data" / "canal-json" / "flink-canal-data.txt"


def _messages(n: int) -> list[bytes]:
    return [x for x in CANAL.read_bytes().splitlines() if x.strip()][:n]


def test_key_lines_over_a_file_of_values_only_is_refused(tmp_path: Path) -> None:
    values = tmp_path / "values.txt"
    values.write_bytes(b"\n".join(_messages(3)) + b"\n")
    done = cdcnorm("transform", "--format", "canal-json", "--key-lines", str(values))
    assert done.returncode == 1
    assert one_error_line(done) == ("error: --key-lines: line 1 is a canal-json message, not a key; the file seems "
                                    "to hold values only (drop --key-lines)")
    assert done.stdout == b""


def test_key_lines_with_an_unpaired_last_line_fails_that_line(tmp_path: Path) -> None:
    [first] = _messages(1)
    keyed = tmp_path / "keyed.txt"
    keyed.write_bytes(b"\n".join([b'{"id":101}', first, b'{"id":102}']) + b"\n")
    done = cdcnorm("transform", "--format", "canal-json", "--key-lines", str(keyed))
    assert done.returncode == 2  # a line failed
    assert done.stdout.count(b'"topic"') >= 1  # the paired message is printed
    error = one_error_line(done)
    assert '"line":3' in error and "UnpairedKeyLine" in error


def test_piped_tables_are_not_cut_to_80_columns() -> None:
    done = cdcnorm("formats")
    assert done.returncode == 0
    text = done.stdout.decode()
    assert "…" not in text  # rich's ellipsis: nothing cut
    assert max(len(line) for line in text.splitlines()) > 80


def _sink_config(tmp_path: Path, catalog: str) -> Path:
    config = tmp_path / "pipeline.yaml"
    config.write_text("topic_prefix: p\ntopics: [{name: a, format: canal-json}]\n"
                      f"sink: {{topic_pattern: 'p\\..*', catalog: {catalog}}}\n")
    return config


def test_tables_on_a_warehouse_that_does_not_exist_yet(tmp_path: Path) -> None:
    warehouse = tmp_path / "not-yet"
    done = cdcnorm("tables", "-c", str(_sink_config(tmp_path, f"{{name: lake, warehouse: '{warehouse}'}}")))
    assert done.returncode == 1
    assert one_error_line(done) == (f"error: no tables yet: the warehouse {warehouse} does not exist (the sink "
                                    "creates it with its first commit)")


@pytest.mark.integration
@pytest.mark.spark
def test_tables_on_a_catalog_that_does_not_answer(tmp_path: Path) -> None:
    """A REST catalog URI nobody listens on: Spark starts, the catalog cannot be listed; one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    catalog = f"{{name: lake, type: rest, properties: {{uri: 'http://127.0.0.1:{port}'}}}}"
    done = cdcnorm("tables", "-c", str(_sink_config(tmp_path, catalog)))
    assert done.returncode == 1, done.stderr.decode()[-3000:]
    err = done.stderr.decode()
    assert "Traceback" not in err and "py4j" not in err.lower(), err[-3000:]
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.startswith(f"error: rest catalog lake (http://127.0.0.1:{port}): ")


def test_validate_config_reports_every_problem_in_one_run(tmp_path: Path) -> None:
    """An entry with a bad value beside an unknown format option and an unknown transform, and
    an unknown catalog type: every one in the first run, not round after round."""
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "topic_prefix: p\n"
        "topics:\n"
        "  - {name: a, format: canal-json, errors: explode, options: {no.such.option: 1},\n"
        "     transforms: [{type: NoSuchTransform}]}\n"
        "sink: {topic_pattern: 'p\\..*', catalog: {name: lake, type: nosuchtype}}\n"
    )
    done = cdcnorm("validate-config", str(config))
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "Traceback" not in err
    keys = [line.split("=", 1)[0] for line in err.splitlines()]
    assert keys == ["topics[0].errors", "topics[0].options.no.such.option", "topics[0].transforms[0].type",
                    "sink.catalog.type"], err


def test_a_missing_key_is_named_without_the_section_as_its_value(tmp_path: Path) -> None:
    """A file without ``topics:`` says that key is not set, not the whole document as its value."""
    config = tmp_path / "pipeline.yaml"
    config.write_text("broker: {bootstrap_servers: 'k:9092'}\nsink: {topics: [a]}\n")
    done = cdcnorm("validate-config", str(config))
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == ["topics=(not set): required key is missing"]


def test_transform_shows_the_records_headers(tmp_path: Path) -> None:
    """A primary-key change: Debezium's delete of the old key names the new one in a header."""
    update = tmp_path / "pk-change.txt"
    update.write_text('{"data":[{"id":"2","name":"b"}],"database":"shop","table":"t","pkNames":["id"],"isDdl":false,'
                      '"type":"UPDATE","old":[{"id":"1"}],"es":1,"ts":2,"mysqlType":{"id":"int","name":"varchar(10)"}}\n')
    shown = [orjson.loads(x) for x in cdcnorm("transform", "-f", "canal-json", "--headers", str(update)).stdout.splitlines()]
    named = {name: value for line in shown for name, value in line.get("headers", [])}
    assert orjson.loads(named["__debezium.newkey"])["payload"] == {"id": 2}  # the key as the record key is
    assert orjson.loads(named["__debezium.oldkey"])["payload"] == {"id": 1}
    hidden = cdcnorm("transform", "-f", "canal-json", "--no-headers", str(update)).stdout.splitlines()
    assert len(hidden) == len(shown) and not any("headers" in orjson.loads(x) for x in hidden)


def test_key_lines_keeps_a_key_a_lenient_decoder_would_also_read_as_a_message(tmp_path: Path) -> None:
    """An unwrapped MongoDB key line ({"id": ...}) decodes as a document too; with a document of
    other fields after it, it is the key it claims to be (from a captured Paimon vector)."""
    keyed = tmp_path / "keyed.txt"
    keyed.write_bytes(b'{"id": "dummy"}\n{"id": {"$oid": "596e275826f08b2730779e1f"}, "name": "Sally", "age": 25}\n')
    done = cdcnorm("transform", "--format", "debezium-json", "--option", "unwrapped=true",
                   "--option", "table=db.t", "--key-lines", str(keyed))
    assert done.returncode == 0, done.stderr.decode()
    [record] = [orjson.loads(line) for line in done.stdout.splitlines()]
    # the check decoded the key line with a decoder of its own: the table's schema is the
    # document's (its id an io.debezium.data.Json), not learnt from the key line's string
    [id_field] = record["key"]["schema"]["fields"]
    assert id_field["name"] == "io.debezium.data.Json"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_up_takes_a_kill_or_a_closed_terminal_as_ctrl_c(signum: signal.Signals) -> None:
    """`cdcnorm up` stops what it started on SIGTERM and SIGHUP as on Ctrl-C (its clean-up runs
    on ``KeyboardInterrupt``); the handlers are restored after."""
    from cdcnorm.cli import _signals_interrupt

    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt), _signals_interrupt(signal.SIGTERM, signal.SIGHUP):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler interrupts this
    assert signal.getsignal(signum) is before
