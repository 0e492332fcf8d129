"""``--log-format json`` / ``CDCNORM_LOG_FORMAT``: one JSON object per log line, with the record's
structured fields, secrets scrubbed everywhere (service/logs.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
import pytest
from typer.testing import CliRunner

from cdcnorm.cli import app
from service import logs
from service.app import Normalizer
from service.config import SecretRedactor, parse_config
from transforms.decoders import Message

SECRET = "json-logs-secret-Qx81"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    yield
    for handler in root.handlers[:]:
        if type(handler).__name__ == "_StderrHandler":
            root.removeHandler(handler)
    root.setLevel(level)
    logs._state.clear()


def _record(message: str, *args: object, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("cdcnorm.test").makeRecord(
        "cdcnorm.test", logging.WARNING, __file__, 1, message, args,
        (type(exc), exc, exc.__traceback__) if exc is not None else None, extra=extra,
    )
    return record


def test_one_object_with_level_logger_message_time_and_extras() -> None:
    line = logs.json_log_formatter().format(_record("dead-letter %s", "x", topic="src", partition=2, offset=41))
    assert "\n" not in line
    obj = orjson.loads(line)
    assert {k: obj[k] for k in ("level", "logger", "message", "topic", "partition", "offset")} == {
        "level": "WARNING", "logger": "cdcnorm.test", "message": "dead-letter x", "topic": "src", "partition": 2,
        "offset": 41,
    }
    assert obj["time"].endswith("+00:00")


def test_secrets_are_scrubbed_from_message_extras_and_exception() -> None:
    SecretRedactor([SECRET]).install()
    try:
        raise RuntimeError(f"login {SECRET} refused")
    except RuntimeError as exc:
        record = _record("with %s", SECRET, exc=exc, detail={"nested": [f"pw={SECRET}"]}, where=SECRET)
    line = logs.json_log_formatter().format(record)
    assert SECRET not in line
    obj = orjson.loads(line)
    assert obj["message"] == "with ***" and obj["where"] == "***" and obj["detail"] == {"nested": ["pw=***"]}
    assert "RuntimeError: login *** refused" in obj["exception"]


def test_the_dead_letter_warning_carries_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure_logging("INFO", "json")
    normalizer = Normalizer(parse_config({"topics": [{"name": "src", "format": "canal-json"}]}))
    runtime = normalizer.runtime_for("src")
    assert runtime is not None
    normalizer.process(Message(b'{"not json', b"k", "src", 3, 17), runtime)
    lines = [orjson.loads(x) for x in capsys.readouterr().err.splitlines()]
    warning = next(x for x in lines if x["message"].startswith("dead-letter"))
    assert {k: warning[k] for k in ("level", "logger", "topic", "partition", "offset", "format", "error_class",
                                    "dlq_topic")} == {
        "level": "WARNING", "logger": "cdcnorm.worker", "topic": "src", "partition": 3, "offset": 17,
        "format": "canal-json", "error_class": "DecodeError", "dlq_topic": "cdcnorm.dlq",
    }


@pytest.mark.parametrize("how", ["option", "env"])
def test_the_cli_sets_the_format(how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    if how == "env":
        monkeypatch.setenv("CDCNORM_LOG_FORMAT", "JSON")
        args = ["formats", "--json"]
    else:
        args = ["--log-format", "json", "formats", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert logs.current_log_format() is logs.LogFormat.JSON
    logging.getLogger("cdcnorm.test").warning("hello", extra={"topic": "t"})
    obj = orjson.loads(capsys.readouterr().err.splitlines()[-1])
    assert (obj["message"], obj["topic"]) == ("hello", "t")


def test_text_stays_the_default_and_lines_are_never_doubled(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure_logging("INFO")
    logs.configure_logging("INFO")
    logging.getLogger("cdcnorm.test").info("once")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].endswith(" INFO cdcnorm.test once")


def test_an_unknown_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCNORM_LOG_FORMAT", "xml")
    result = CliRunner().invoke(app, ["formats", "--json"])
    assert result.exit_code == 2 and "xml" in result.output
