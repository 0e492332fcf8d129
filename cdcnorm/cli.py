"""The ``cdcnorm`` command line.

Heavy imports (Faust, Spark) happen inside the commands that need them, so ``cdcnorm transform``
and ``cdcnorm formats`` start fast.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import os
import signal
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import orjson
import typer
from rich.console import Console
from rich.table import Table

from service.logs import LOG_FORMAT_ENV, LogFormat, configure_logging
from service.topics import DEFAULT_SOURCE_TOPIC, is_valid_topic_name, source_topic_for_file, valid_topic_name
from transforms.decoders import DECODERS, Message, create_decoder, decoder_class
from transforms.envelope import EmitOptions
from transforms.errors import ConfigError, MissingExtraError
from transforms.extras import require_extras
from transforms.options import describe_options
from transforms.pipeline import Pipeline
from transforms.table_budget import DEFAULT_TABLE_BUDGET, set_table_budget

if TYPE_CHECKING:
    from service.config import PipelineConfig

__all__ = ["app", "main"]



class LocalBrokerKind(StrEnum):
    """The broker ``cdcnorm up`` starts when none answers (service.local.BROKERS)."""

    tansu = "tansu"
    kafka = "kafka"


class LocalCatalogKind(StrEnum):
    """The Iceberg catalog ``cdcnorm up`` writes through (cdcnorm.up.CATALOGS)."""

    hadoop = "hadoop"
    rest = "rest"

app = typer.Typer(
    name="cdcnorm",
    help="Normalize vendor CDC streams into canonical Debezium-envelope JSON.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


PIPED_WIDTH = 200
"""Columns of the tables printed into a pipe or a file (``COLUMNS`` overrides): a terminal's
width is its own, but rich's 80 for a pipe cuts the tables' rows."""


def _console() -> Console:
    """The console for the commands' tables: the terminal's width, or :data:`PIPED_WIDTH`
    when the output is not a terminal (``COLUMNS`` set wins, as in rich)."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPED_WIDTH)


def package_version() -> str:
    """The installed ``cdcnorm`` distribution's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cdcnorm")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        from transforms.compiled import status

        formats = [fid for fid in DECODERS if fid != "auto"]
        typer.echo(f"cdcnorm {package_version()} ({len(formats)} input formats + auto; transforms {status()})")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format", envvar=LOG_FORMAT_ENV, case_sensitive=False,
            help="Log lines on stderr as text, or as one JSON object each (level, logger, message, time, "
            "and topic, partition, offset, error_class ... where known).",
        ),
    ] = LogFormat.TEXT,
) -> None:
    """Normalize vendor CDC streams into canonical Debezium-envelope JSON."""
    try:
        configure_logging(log_format=log_format)
    except ImportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def parse_kv(items: list[str] | None, what: str = "--option") -> dict[str, str]:
    """``KEY=VALUE`` strings into a dict; ConfigError on a malformed item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(what, item, "expected KEY=VALUE")
        out[key.strip()] = value
    return out


# What `cdcnorm transform` reads and writes a file in: a Debezium record with its schema is ~3 KB,
# and a write() per record through stdout's 8 KiB buffer made a system call every few records (a
# sixth of the command's CPU time on a file of typed inserts).
_CHUNK = 1 << 20


def _output(path: str) -> BinaryIO:
    """Where ``cdcnorm transform`` writes its records: stdout, through a 1 MiB buffer when it
    reads a file and stdout is not a terminal (from stdin, a live stream maybe, or to a terminal,
    stdout as it is)."""
    out = sys.stdout.buffer
    if path == "-" or out.isatty():
        return out
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a file (a test runner's capture): as it is
        return out
    out.flush()
    return io.BufferedWriter(io.FileIO(fd, "wb", closefd=False), buffer_size=_CHUNK)


def _open_input(path: str) -> BinaryIO:
    """The input file (``-``: stdin); a file that cannot be opened is a one-line error, exit 1."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return Path(path).open("rb", buffering=_CHUNK)
    except OSError as exc:
        typer.echo(f"error: {path}: {exc.strerror}", err=True)
        raise typer.Exit(1) from None


@app.command()
def transform(
    file: Annotated[str, typer.Argument(help="Input file, one message per line ('-' for stdin).")] = "-",
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c",
            help="Pipeline YAML: run its topics[] entry for --source-topic exactly as the worker does "
            "(format, options, key_columns, transforms, topic_template, tombstones, ...).",
        ),
    ] = None,
    source_topic: Annotated[
        str | None,
        typer.Option(
            "--source-topic", "--topic", "-t",
            help="The Kafka topic the messages come from: it picks the --config entry and, as in the worker, "
            "names the table of a message that names none. Default: FILE's stem as a topic name "
            f"('{DEFAULT_SOURCE_TOPIC}' for stdin); required with --config.",
        ),
    ] = None,
    format_id: Annotated[
        str | None, typer.Option("--format", "-f", help="Input format id (see `cdcnorm formats`). Default: auto.")
    ] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Format option KEY=VALUE.")] = None,
    topic_prefix: Annotated[
        str | None, typer.Option("--topic-prefix", help="Logical server name / topic prefix. Default: cdcnorm.")
    ] = None,
    tombstones: Annotated[
        bool | None,
        typer.Option("--tombstones/--no-tombstones", help="Emit a tombstone after each delete. Default: on."),
    ] = None,
    headers: Annotated[
        bool,
        typer.Option(
            "--headers/--no-headers",
            help="Print each record's headers (__debezium.newkey/oldkey of a key change, the chain's insert-field "
            "headers) as [name, value] pairs. Default: on.",
        ),
    ] = True,
    key_lines: Annotated[
        bool,
        typer.Option(
            "--key-lines",
            help="Lines alternate: the Kafka key, then the value ('null' for no key, or for a tombstone value).",
        ),
    ] = False,
    table_cache_columns: Annotated[
        int | None,
        typer.Option(
            "--table-cache-columns",
            min=1000,
            help="Memory budget of per-table state in columns, as the worker's worker.table_cache_columns "
            f"(default {DEFAULT_TABLE_BUDGET:,}; with --config, the config's).",
        ),
    ] = None,
) -> None:
    """Decode messages offline and print canonical records as JSON lines.

    With --config, the messages go through the worker's own pipeline of the entry that handles
    --source-topic (the worker drops transaction records unless the entry sets
    transaction_metadata); else through the decoder of --format and --option. Either way the source
    topic names the table of a message that names none, and output topics are made valid topic
    names, as in the worker.

    Binary formats (dts-avro, qlik-avro) take one base64 message per line. A line that fails
    prints a JSON error on stderr and processing goes on; the exit code is 2 if any line failed.
    A bad row of a multi-row message (Canal's data[]) fails alone, as in the worker: the line's
    other rows are printed, and the error names the row ({"line", "row", "error", ...}).
    With --key-lines each message is two lines, its key and then its value, as `cdcnorm tail`
    and Kafka tools print them; a Debezium key names the key columns of a table.
    """
    flags = {"--format": format_id, "--option": option, "--topic-prefix": topic_prefix, "--tombstones": tombstones,
             "--table-cache-columns": table_cache_columns}
    if config is not None:
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            typer.echo(f"error: {', '.join(given)} cannot be combined with --config: the config entry sets them", err=True)
            raise typer.Exit(1)
        if source_topic is None:
            typer.echo("error: --config needs --source-topic (--topic): the source topic picks the entry", err=True)
            raise typer.Exit(1)
    topic = source_topic if source_topic is not None else source_topic_for_file(file)
    if not is_valid_topic_name(topic):
        typer.echo(f"error: --source-topic={topic}: not a valid Kafka topic name (letters, digits, '.', '_', '-')",
                   err=True)
        raise typer.Exit(1)
    pipeline: Pipeline
    output_topic: Callable[[str], str]
    if config is not None:
        require_extras("cdcnorm transform --config", "service")  # the worker's pipeline (service.app)
        from service.app import Normalizer
        from service.config import load_config

        try:
            normalizer = Normalizer(load_config(config, for_worker=False, sections=config_sections()))  # offline: no group to join
        except ConfigError as exc:
            raise _config_error(exc) from exc
        runtime = normalizer.runtime_for(topic)
        if runtime is None:
            typer.echo(f"error: no topics[] entry of {config} handles source topic {topic!r}", err=True)
            raise typer.Exit(1)
        pipeline, output_topic, format_id = runtime.pipeline, normalizer.output_topic, runtime.format_id
    else:
        format_id = format_id or "auto"
        set_table_budget(table_cache_columns or DEFAULT_TABLE_BUDGET)
        try:
            decoder = create_decoder(format_id, parse_kv(option))
        except ConfigError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        emit = EmitOptions(prefix=topic_prefix or "cdcnorm", decimal_mode=decoder.options.decimal_handling_mode,
                           tombstones=tombstones is not False)
        pipeline, output_topic = Pipeline(decoder, emit), valid_topic_name
    binary = pipeline.decoder.binary
    failed = 0
    out = _output(file)
    err = sys.stderr.buffer
    key: bytes | None = None
    key_number = 0
    expect_key = key_lines
    first_pair = key_lines
    topic_json: dict[str, bytes] = {}  # a record's topic -> its output topic as JSON (few tables, many records)
    try:
        with _open_input(file) as stream:
            for number, raw_line in enumerate(stream, start=1):
                line = raw_line.rstrip(b"\r\n")
                if not line.strip():
                    continue
                if expect_key:
                    key, expect_key, key_number = (None if line.strip() == b"null" else line), False, number
                    continue
                expect_key = key_lines
                if first_pair and key is not None:
                    first_pair = False
                    _refuse_a_message_as_key(pipeline, key, line, key_number, topic, binary)
                if key_lines and line.strip() == b"null":
                    continue  # a tombstone: the emitter writes its own after each delete
                try:
                    payload = _b64line(line, number) if binary else line
                    processed = pipeline.process_rows(Message(value=payload, key=key, topic=topic, offset=number - 1))
                except Exception as exc:  # as the worker: any failure of a message is that message's
                    failed += 1
                    err.write(
                        orjson.dumps({"line": number, "error": str(exc), "error_class": type(exc).__name__}) + b"\n"
                    )
                    continue
                for row_error in processed.row_errors:  # as the worker: a bad row loses only itself
                    failed += 1
                    err.write(orjson.dumps({"line": number, "row": row_error.row, "error": str(row_error),
                                            "error_class": type(row_error).__name__}) + b"\n")
                for record in processed.records:
                    # {"topic", "key", "value"[, "headers"]} from the bytes the worker produces (the
                    # same JSON as dumping the record's dicts, a shared schema spliced in)
                    topic_bytes = topic_json.get(record.topic)
                    if topic_bytes is None:
                        if len(topic_json) >= 4096:
                            topic_json.clear()
                        topic_bytes = topic_json[record.topic] = orjson.dumps(output_topic(record.topic))
                    parts = [b'{"topic":', topic_bytes, b',"key":',
                             record.key_bytes() or b"null", b',"value":', record.value_bytes() or b"null"]
                    if headers and record.headers:  # as the worker produces them: name and value (UTF-8 text)
                        parts += (b',"headers":', orjson.dumps([[name, value.decode("utf-8", "backslashreplace")]
                                                                 for name, value in record.headers]))
                    parts.append(b"}\n")
                    out.write(b"".join(parts))
    finally:  # what was made before a failure or Ctrl-C is written
        out.flush()
    if key_lines and not expect_key:  # the last key line had no value line after it
        failed += 1
        err.write(orjson.dumps({"line": key_number, "error": "a key line without its value line after it (with "
                                "--key-lines the lines alternate: key, value)", "error_class": "UnpairedKeyLine"}) + b"\n")
    out.flush()
    detected = getattr(pipeline.decoder, "detected", None) if format_id == "auto" else None
    if detected is not None:
        err.write(orjson.dumps({"detected": dict(detected)}) + b"\n")
        err.flush()
    if failed:
        raise typer.Exit(2)


def _refuse_a_message_as_key(pipeline: Pipeline, key: bytes, value: bytes, number: int, topic: str,
                             binary: bool) -> None:
    """With --key-lines, the first key line must not itself be a message of the format: a file
    of values alone would otherwise be read as key, value, key, ... (half its messages lost, the
    others keyed by a message). A key line is taken for a message when it decodes as one and, for
    a text format, has the same top-level fields as the line after it (lenient decoders, such as
    MongoDB's, accept a key like {"id": 1} as a message too). One line on stderr and exit 1."""
    # a decoder of its own: one that learns schemas as it reads must not learn the key's
    probe = Pipeline(type(pipeline.decoder)(pipeline.decoder.options, None), pipeline.emit_options)
    try:
        payload = _b64line(key, number) if binary else key
        processed = probe.process_rows(Message(value=payload, key=None, topic=topic, offset=number - 1))
    except Exception:
        return
    if not processed.records or (not binary and _top_level_fields(key) != _top_level_fields(value)):
        return
    typer.echo(f"error: --key-lines: line {number} is a {pipeline.decoder.format_id} message, not a key; "
               "the file seems to hold values only (drop --key-lines)", err=True)
    raise typer.Exit(1)


def _top_level_fields(line: bytes) -> frozenset[str] | None:
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return frozenset(parsed) if isinstance(parsed, dict) else None


def _b64line(line: bytes, number: int) -> bytes:
    from transforms.errors import DecodeError

    try:
        return base64.b64decode(line.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError("cli", None, f"line {number} is not valid base64", line) from exc


@app.command()
def formats(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the input formats and their options."""
    rows: list[dict[str, Any]] = []
    for fid in DECODERS:
        try:
            cls = decoder_class(fid)
        except ConfigError:
            continue
        rows.append(
            {
                "format": fid,
                "description": cls.description,
                "binary": cls.binary,
                "options": [o.model_dump() for o in describe_options(cls.options_model)],
            }
        )
    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    console = _console()
    for row in rows:
        table = Table(title=f"{row['format']}: {row['description']}", title_justify="left")
        table.add_column("option")
        table.add_column("type")
        table.add_column("default")
        table.add_column("description")
        for opt in row["options"]:
            table.add_row(opt["name"], opt["type"], str(opt["default"]), opt["description"])
        console.print(table)


def config_sections() -> dict[str, Any]:
    """The sections of pipeline.yaml other parts own, checked with the rest of the file: the
    sink's (its model needs pydantic only, not Spark)."""
    from sink.config import SinkConfig

    return {"sink": SinkConfig}


def _config_error(exc: ConfigError) -> typer.Exit:
    value = exc.value if isinstance(exc.value, str) else orjson.dumps(exc.value, default=str).decode()
    typer.echo(f"{exc.key}={value}: {exc.reason}", err=True)
    return typer.Exit(1)


def _load_pipeline_config(path: Path, *, check_formats: bool = True, for_worker: bool = True) -> PipelineConfig:
    """The pipeline config at ``path``, its secrets masked in every log line from now on; a config
    error is its ``key=value: reason`` line on stderr and exit code 1. ``for_worker``: refuse what
    the worker's Kafka client cannot do too (``broker.group_protocol: consumer``); False for
    commands that never join a consumer group."""
    from service.config import SecretRedactor, load_config

    try:
        cfg = load_config(path, check_formats=check_formats, for_worker=for_worker, sections=config_sections())
    except ConfigError as exc:
        raise _config_error(exc) from exc
    SecretRedactor(cfg.secret_values()).install()
    return cfg


@app.command("validate-config")
def validate_config(
    config: Annotated[Path, typer.Argument(help="Pipeline YAML file.")],
) -> None:
    """Validate a pipeline config and print a summary.

    Every problem of the file is printed, one `key=value: reason` line each, on stderr
    (values of secret keys masked), and the exit code is 1.
    """
    from service.config import format_config_error, load_config

    try:
        cfg = load_config(config, sections=config_sections())
    except ConfigError as exc:
        for error in getattr(exc, "errors", None) or [exc]:
            typer.echo(format_config_error(error), err=True)
        raise typer.Exit(1) from exc
    console = _console()
    console.print(
        f"[bold]{config}[/bold]: valid. prefix={cfg.topic_prefix} brokers={cfg.broker.bootstrap} "
        f"redis={cfg.redis.display_url} group={cfg.worker.app_id} sink={'configured' if cfg.sink else 'none'}",
        markup=True, highlight=False,
    )
    console.print(
        f"security: kafka {cfg.broker.describe_security()}; redis {cfg.redis.describe_security()}",
        markup=False, highlight=False, soft_wrap=True,
    )
    table = Table(title_justify="left")
    for column in ("source", "format", "transforms", "errors", "dlq", "template", "completion", "transactions"):
        table.add_column(column)
    for row in cfg.summary():
        table.add_row(*(str(v) for v in row.values()))
    console.print(table)


@app.command()
def worker(
    config: Annotated[Path, typer.Option("--config", "-c", help="Pipeline YAML file.")],
    web_port: Annotated[int | None, typer.Option("--web-port", help="Override web.port.")] = None,
) -> None:
    """Run the Faust normalization worker (Ctrl-C / SIGTERM to stop)."""
    require_extras("cdcnorm worker", "service")
    from service.app import run_worker

    cfg = _load_pipeline_config(config)
    code = run_worker(cfg, web_port=web_port)
    if code:
        raise typer.Exit(code)


@app.command()
def up(
    bootstrap: Annotated[str | None, typer.Option("--bootstrap", help="Use this broker (host:port) if it answers.")] = None,
    redis_url: Annotated[str, typer.Option("--redis-url", help="Use this Redis if it answers.")] = "redis://127.0.0.1:6379/0",
    duration: Annotated[float | None, typer.Option("--duration", help="Stop after this many seconds.")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep running after the samples are processed (Ctrl-C stops).")] = False,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix", help="Output topic prefix.")] = "cdcnorm",
    sink: Annotated[bool, typer.Option("--sink/--no-sink", help="Also run the Iceberg sink and show the tables.")] = True,
    broker: Annotated[
        LocalBrokerKind,
        typer.Option("--broker", help="The broker to start when none answers: tansu (light, memory only) or "
                     "kafka (Apache Kafka, KRaft; needs a JDK 17 and, once, Maven to fetch its jars)."),
    ] = LocalBrokerKind.tansu,
    catalog: Annotated[
        LocalCatalogKind,
        typer.Option("--catalog", help="The Iceberg catalog the sink writes through: hadoop (a folder) or rest "
                     "(Apache Iceberg's REST catalog server, started on loopback; needs a JDK 17 and, once, Maven)."),
    ] = LocalCatalogKind.hadoop,
) -> None:
    """Run the pipeline locally on the sample messages of every format and print a summary.

    Starts a broker (Tansu, or Apache Kafka with --broker kafka) and/or redis-server on loopback
    when none answers, creates the source topics, feeds the samples, runs the worker and shows
    its progress; stops everything it started.
    """
    from rich.live import Live
    from rich.text import Text

    require_extras("cdcnorm up", "service", *(["sink"] if sink else []),
                   *(["local"] if broker is LocalBrokerKind.tansu else []))
    from cdcnorm.up import run_up
    from service.maven import LocalServiceError

    console = _console()
    with Live(Text("starting..."), console=console, refresh_per_second=4, transient=True) as live:

        def ready(result: Any) -> None:  # every sample is through (or up stopped before): the summary
            _print_up_summary(live.console, result, keep=keep)

        try:
            with _signals_interrupt(signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: everything started is stopped
                result = run_up(
                    bootstrap=bootstrap,
                    redis_url=redis_url,
                    duration_s=duration,
                    keep=keep,
                    prefix=topic_prefix,
                    with_sink=sink,
                    broker=broker.value,
                    catalog=catalog.value,
                    progress=lambda line: live.update(Text(line)),
                    log=lambda line: live.console.print(line, markup=False, highlight=False),
                    on_ready=ready,
                )
        except LocalServiceError as exc:
            live.stop()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:  # before the pipeline ran (while services started): they are stopped
            live.stop()
            typer.echo("interrupted; stopped everything `up` started", err=True)
            raise typer.Exit(130) from None
    if keep and result.finished:
        console.print("stopped everything `up` started", markup=False, highlight=False)
    if not result.finished:
        raise typer.Exit(1)


@contextlib.contextmanager
def _signals_interrupt(*signals: signal.Signals) -> Iterator[None]:
    """Within the block, ``signals`` interrupt as Ctrl-C does (``KeyboardInterrupt``), so a
    terminal closed (SIGHUP) or a ``kill`` (SIGTERM) runs the same clean-up; restored after."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _print_up_summary(console: Console, result: Any, *, keep: bool) -> None:
    table = Table(title="cdcnorm up: per format", title_justify="left")
    for column in ("format", "source topic", "produced", "messages in", "records out", "DLQ"):
        table.add_column(column, justify="right" if column in ("produced", "messages in", "records out", "DLQ") else "left")
    for row in result.rows:
        table.add_row(
            row["format"], row["source_topic"], str(row["produced"]), str(row["messages_in"]),
            str(row["records_out"]), str(row["dlq"]),
        )
    console.print(table)
    console.print("all samples processed" if result.finished else "[yellow]stopped before all samples were processed[/yellow]")
    console.print(f"broker: {result.context.broker}", markup=False, highlight=False)
    console.print(f"output topics ({len(result.output_topics)}): {', '.join(result.output_topics)}")
    if result.tables:
        _print_tables(console, result.tables, f"Iceberg tables, read back through the {result.context.catalog}")
    started_broker = any(p.name in ("tansu", "kafka") for p in result.context.processes)
    example = next((t for t in result.output_topics if t.endswith(".tpch.region")), "TOPIC")
    look = f"cdcnorm tail {example} --bootstrap {result.context.bootstrap} --from-beginning"
    if keep and result.finished:
        console.print(f"the pipeline keeps running; in another terminal look at the records with:\n  {look}\n"
                      "Ctrl-C stops everything `up` started", markup=False, highlight=False)
    elif started_broker:
        console.print(f"look at records with: {look}  (the broker started by `up` is stopped now; "
                      "rerun with --keep, as `make up` does, to look while it runs)", markup=False, highlight=False)
    else:
        console.print(f"look at records with: {look}", markup=False, highlight=False)


@app.command()
def tail(
    topic: Annotated[str, typer.Argument(help="Topic to print.")],
    bootstrap: Annotated[
        str | None, typer.Option("--bootstrap", help="Broker host:port (default: the config's, else 127.0.0.1:9092).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Take the broker and its SASL/TLS settings from this pipeline YAML.")
    ] = None,
    from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Start at the earliest offset.")] = False,
    partition: Annotated[int | None, typer.Option("--partition", "-p", min=0, help="Read this partition only.")] = None,
    offset: Annotated[
        int | None, typer.Option("--offset", min=0, help="Start at this offset (of each partition read).")
    ] = None,
    max_records: Annotated[
        int | None, typer.Option("--count", "--max", "-n", min=1, help="Stop after N records.")
    ] = None,
    idle_timeout: Annotated[float | None, typer.Option("--idle-timeout", help="Stop after S seconds without records.")] = None,
    payload_only: Annotated[
        bool, typer.Option("--payload-only", help="Print keys and values without their Connect `schema`.")
    ] = False,
    unwrap: Annotated[
        bool,
        typer.Option(
            "--unwrap",
            help="Print a change's value as its flat row, as ExtractNewRecordState does: `after`, or for a delete "
            "`before`, with `__deleted` \"true\"/\"false\"; other records as they are.",
        ),
    ] = False,
    connect_timeout: Annotated[
        float, typer.Option("--connect-timeout", min=0.1, help="Give up when the broker does not answer within S seconds.")
    ] = 10.0,
) -> None:
    """Print the records of a topic as JSON lines: topic, partition, offset, key, value, headers.

    Reads without a consumer group and stops after --count records or --idle-timeout seconds
    without one (never by the broker's high watermarks). A broker that does not answer, or a
    topic or partition that does not exist, is a one-line error with exit code 1.
    """
    require_extras("cdcnorm tail", "service")
    from service.tail import TailError, tail_topic

    kafka: dict[str, Any] = {"bootstrap.servers": "127.0.0.1:9092"}
    if config is not None:
        kafka = _load_pipeline_config(config, check_formats=False, for_worker=False).broker.librdkafka()
        kafka.pop("client.id", None)
    if bootstrap is not None:
        kafka["bootstrap.servers"] = bootstrap
    out = sys.stdout.buffer
    try:
        for line in tail_topic(topic, kafka, from_beginning=from_beginning, partition=partition, offset=offset,
                               max_records=max_records, idle_timeout_s=idle_timeout, payload_only=payload_only,
                               unwrap=unwrap, connect_timeout_s=connect_timeout):
            out.write(line + b"\n")
            out.flush()
    except KeyboardInterrupt:
        pass
    except TailError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


dlq_app = typer.Typer(name="dlq", help="The dead-letter queue.", no_args_is_help=True)
app.add_typer(dlq_app, name="dlq")


@dlq_app.command("replay")
def dlq_replay(
    config: Annotated[Path, typer.Option("--config", "-c", help="Pipeline YAML: the config to replay with.")],
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", "-t", help="DLQ topic to replay (repeatable). Default: every entry's dlq_topic."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would happen: produce nothing, commit nothing, write no state.")
    ] = False,
    group: Annotated[str, typer.Option("--group", help="Consumer group that remembers how far replays got.")] = "cdcnorm-dlq-replay",
    idle_timeout: Annotated[
        float, typer.Option("--idle-timeout", min=0.5, help="Stop after S seconds without a dead letter.")
    ] = 5.0,
    max_records: Annotated[int | None, typer.Option("--count", "-n", min=1, help="Stop after N dead letters.")] = None,
    bootstrap: Annotated[str | None, typer.Option("--bootstrap", help="Broker host:port instead of the config's.")] = None,
    connect_timeout: Annotated[
        float, typer.Option("--connect-timeout", min=0.1, help="Give up when the broker does not answer within S seconds.")
    ] = 10.0,
) -> None:
    """Run dead letters through the current config again and produce what they now become.

    Each dead letter is normalized by the entry that handles its `__connect.errors.topic`, as the
    worker would now. Its records go to their output topics; one that still fails goes back to
    its entry's DLQ with the new error, one no entry handles back to its DLQ unchanged (never
    lost). Offsets of the group are committed only after the broker acknowledged what each dead
    letter became. Prints one JSON line per dead letter and a summary on stderr. Exit code 0 when
    every one was replayed, 2 when some failed again or cannot be replayed, 1 on an error.
    """
    require_extras("cdcnorm dlq replay", "service")
    from service.replay import ReplayError, default_dlq_topics, replay_dead_letters

    # the replay assigns its partitions and commits as a simple group: it never joins one, so any
    # broker.group_protocol does (the worker's refusal of consumer is not the replay's)
    cfg = _load_pipeline_config(config, for_worker=False)
    if bootstrap is not None:
        cfg = cfg.model_copy(update={"broker": cfg.broker.model_copy(update={"bootstrap_servers": [bootstrap]})})
    topics = topic or default_dlq_topics(cfg)
    out = sys.stdout.buffer

    def show(result: Any) -> None:
        out.write(result.to_json() + b"\n")
        out.flush()

    try:
        summary = replay_dead_letters(cfg, topics, dry_run=dry_run, group=group, idle_timeout_s=idle_timeout,
                                      max_records=max_records, connect_timeout_s=connect_timeout, on_result=show)
    except ReplayError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(summary.describe(topics), err=True)
    if not summary.clean:
        raise typer.Exit(2)


def _print_tables(console: Console, tables: dict[str, Any], title: str) -> None:
    summary = Table(title=title, title_justify="left")
    # On a narrow terminal the sample row is cut, then long table names; never the counts.
    counts = {"rows": "count", "snapshots": "snapshots", "data files": "data_files"}
    count_widths = {
        header: max([len(header), *(len(str(info[key])) for info in tables.values())])
        for header, key in counts.items()
    }
    room = console.width - 2 * (len(counts) + 2) - (len(counts) + 3) - sum(count_widths.values())
    name_width = min(max((len(n) for n in tables), default=5), 40, max(12, room - 10))
    summary.add_column("table", no_wrap=True, overflow="ellipsis", width=name_width)
    for header, width in count_widths.items():
        summary.add_column(header, no_wrap=True, justify="right", width=width)
    summary.add_column("a row", no_wrap=True, overflow="ellipsis", width=max(10, min(90, room - name_width)))
    for name, info in tables.items():
        sample = orjson.dumps(info["rows"][0], default=str).decode() if info["rows"] else ""
        summary.add_row(name, *(str(info[key]) for key in counts.values()), sample)
    console.print(summary)


def _shape_line(info: dict[str, Any]) -> str:
    """``upsert, partitioned by bucket[16](id), ordered by id ASC NULLS FIRST`` (sink.inspect)."""
    parts = [info.get("mode", "upsert")]
    parts.append(f"partitioned by {', '.join(info['partition_by'])}" if info.get("partition_by") else "unpartitioned")
    if info.get("sort_by"):
        parts.append(f"ordered by {', '.join(info['sort_by'])}")
    return ", ".join(parts)


@app.command()
def sink(
    config: Annotated[Path, typer.Option("--config", "-c", help="Pipeline YAML with a `sink:` section.")],
    once: Annotated[bool, typer.Option("--once", help="Drain the topics, then stop.")] = False,
    max_batches: Annotated[int | None, typer.Option("--max-batches", help="Stop after N non-empty batches.")] = None,
    log_level: Annotated[str, typer.Option("--log-level", envvar="CDCNORM_LOG_LEVEL",
                                           help="DEBUG shows each micro-batch's ranges as read.")] = "INFO",
) -> None:
    """Run the PySpark micro-batch sink: normalized topics into Iceberg tables."""
    from sink.main import run_sink

    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise typer.BadParameter(f"{log_level!r}: one of DEBUG, INFO, WARNING, ERROR", param_hint="--log-level")
    configure_logging(log_level.upper())
    try:
        code = run_sink(config, once=once, max_batches=max_batches)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    raise typer.Exit(code)


@app.command()
def tables(
    config: Annotated[Path, typer.Option("--config", "-c", help="Pipeline YAML with a `sink:` section.")],
    limit: Annotated[int, typer.Option("--limit", min=0, help="Rows to show per table (0: none).")] = 5,
) -> None:
    """Show the sink's Iceberg tables: row counts, snapshots, files, then up to --limit rows each."""
    require_extras("cdcnorm tables", "sink")
    from sink.inspect import CatalogUnreadable, read_tables
    from sink.main import load_sink_config

    try:
        sink_config, _ = load_sink_config(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    cat = sink_config.catalog
    where = sink_config.warehouse_path() if cat.type == "hadoop" else cat.properties.get("uri", cat.type)
    if cat.type == "hadoop" and "://" not in where and not Path(where).exists():
        typer.echo(f"error: no tables yet: the warehouse {where} does not exist (the sink creates it with its "
                   "first commit)", err=True)
        raise typer.Exit(1)
    try:
        found = read_tables(sink_config, limit)
    except CatalogUnreadable as exc:
        typer.echo(f"error: {cat.type} catalog {cat.name} ({where}): {exc}", err=True)
        raise typer.Exit(1) from None
    console = _console()
    _print_tables(console, found, f"Iceberg tables ({cat.type} catalog {cat.name}: {where})")
    for name, info in found.items():
        console.print(f"{name}: {_shape_line(info)}", highlight=False)
        if info["rows"]:
            console.print(f"{name}: {len(info['rows'])} of {info['count']} rows", style="bold", highlight=False)
            for row in info["rows"]:
                console.print(orjson.dumps(row, default=str).decode(), markup=False, highlight=False, soft_wrap=True)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except MissingExtraError as exc:  # a command of a part that is not installed: say which extra
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
