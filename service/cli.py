"""The ``cdcnorm`` command line.

Heavy imports (Faust, Spark) happen inside the commands that need them, so ``cdcnorm transform``
and ``cdcnorm formats`` start fast.
"""

from __future__ import annotations

import base64
import binascii
import sys
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import orjson
import typer
from rich.console import Console
from rich.table import Table

from transforms.decoders import DECODERS, Message, create_decoder, decoder_class
from transforms.envelope import EmitOptions
from transforms.errors import CdcnormError, ConfigError
from transforms.options import describe_options
from transforms.pipeline import Pipeline

__all__ = ["app", "main"]

app = typer.Typer(
    name="cdcnorm",
    help="Normalize vendor CDC streams into canonical Debezium-envelope JSON.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def parse_kv(items: list[str] | None, what: str = "--option") -> dict[str, str]:
    """``KEY=VALUE`` strings into a dict; ConfigError on a malformed item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(what, item, "expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _open_input(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    return Path(path).open("rb")


@app.command()
def transform(
    file: Annotated[str, typer.Argument(help="Input file, one message per line ('-' for stdin).")] = "-",
    format_id: Annotated[str, typer.Option("--format", "-f", help="Input format id (see `cdcnorm formats`).")] = "auto",
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Format option KEY=VALUE.")] = None,
    topic_prefix: Annotated[str, typer.Option("--topic-prefix", help="Logical server name / topic prefix.")] = "cdcnorm",
    tombstones: Annotated[bool, typer.Option("--tombstones/--no-tombstones", help="Emit a tombstone after each delete.")] = True,
) -> None:
    """Decode messages offline and print canonical records as JSON lines.

    Binary formats (dts-avro, qlik-avro) take one base64 message per line. A line that fails
    prints a JSON error on stderr and processing goes on; the exit code is 2 if any line failed.
    """
    try:
        decoder = create_decoder(format_id, parse_kv(option))
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    pipeline = Pipeline(
        decoder,
        EmitOptions(prefix=topic_prefix, decimal_mode=decoder.options.decimal_handling_mode, tombstones=tombstones),
    )
    binary = decoder.binary
    failed = 0
    out = sys.stdout.buffer
    err = sys.stderr.buffer
    with _open_input(file) as stream:
        for number, raw_line in enumerate(stream, start=1):
            line = raw_line.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                payload = _b64line(line, number) if binary else line
                records = pipeline.process(Message(value=payload, topic=file, offset=number - 1))
            except CdcnormError as exc:
                failed += 1
                err.write(
                    orjson.dumps({"line": number, "error": str(exc), "error_class": type(exc).__name__}) + b"\n"
                )
                continue
            for record in records:
                out.write(record.to_json_line() + b"\n")
    out.flush()
    if failed:
        raise typer.Exit(2)


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
    console = Console()
    for row in rows:
        table = Table(title=f"{row['format']}: {row['description']}", title_justify="left")
        table.add_column("option")
        table.add_column("type")
        table.add_column("default")
        table.add_column("description")
        for opt in row["options"]:
            table.add_row(opt["name"], opt["type"], str(opt["default"]), opt["description"])
        console.print(table)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
