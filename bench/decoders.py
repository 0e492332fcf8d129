"""Decoder throughput: ``Pipeline.process`` + record serialization per format, against a baseline.

The workload of a format is its golden inputs (``tests/data/<format>/*.txt``, every message that
decodes, in file order so metadata messages precede the data that needs them) repeated until it
reaches the size. The measured work is what the worker does per message: ``Pipeline.process``
(decode, emit) and ``OutRecord.key_bytes()`` / ``value_bytes()`` of every record.

Baselines on the same bytes in the same run:

* JSON formats: ``orjson.dumps(orjson.loads(value))`` (parse + serialize, nothing else);
* ``arcion-csv``: ``csv.reader`` of the line + ``orjson.dumps`` of the row;
* ``dts-avro``, ``qlik-avro``: ``fastavro.schemaless_reader`` of the message (for Qlik, the
  envelope and the body it carries, as the decoder reads them).

Two floors per JSON format (:meth:`FormatWorkload.floor_work`) bound what any pure-Python
decoder can reach on the same messages: the I/O floor (loads of the input, dumps of the same
output payloads) and the build floor (the I/O floor plus a C copy of every output object). The
note of each format says how much time the pipeline spends beyond the build floor, and how much
the target would allow there.

Run: ``python -m bench.decoders [--size tiny|small|full] [--formats canal-json,...] [--profile FMT]``.
"""

from __future__ import annotations

import cProfile
import csv
import io
import pstats
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bench.common import BenchReport, Ratio, bench_parser, interleaved
from transforms.decoders import Decoder, Message, create_decoder
from transforms.envelope import EmitOptions
from transforms.errors import DecodeError
from transforms.pipeline import Pipeline

__all__ = ["FormatWorkload", "load_workload", "main"]

JSON_TARGET = 0.35
SIZE_BYTES = {"tiny": 64 * 1024, "small": 1024 * 1024, "full": 8 * 1024 * 1024}
REPEATS = {"tiny": 1, "small": 3, "full": 5}
BINARY = ("dts-avro", "qlik-avro")
FORMATS = (
    "canal-json",
    "debezium-json",
    "arcion-kafka",
    "arcion-json",
    "arcion-csv",
    "shareplex-json",
    "cdl-json",
    "qlik-json",
    "maxwell-json",
    "ogg-json",
    "aws-dms-json",
    "aliyun-json",
    "dts-avro",
    "qlik-avro",
)


@dataclass
class FormatWorkload:
    """The messages of one format, each with the pipeline (per golden case options) that takes it."""

    format_id: str
    items: list[tuple[Pipeline, Message]]
    baseline_reads: list[Callable[[], Any]]
    distinct: int

    @property
    def n_bytes(self) -> int:
        return sum(len(m.value or b"") for _, m in self.items)

    def run_pipeline(self) -> int:
        """Process every message and serialize every record; returns the record count."""
        n = 0
        for pipeline, message in self.items:
            for record in pipeline.process(message):
                record.key_bytes()
                record.value_bytes()
                n += 1
        return n

    def run_events(self) -> None:
        """Decode only (decoder + chain): the share of the work that is the decoder's."""
        for pipeline, message in self.items:
            pipeline.events(message)

    def run_process(self) -> None:
        """Decode + emit, without serializing the records."""
        for pipeline, message in self.items:
            pipeline.process(message)

    def run_baseline(self) -> None:
        for read in self.baseline_reads:
            read()

    def floor_work(self, build: bool) -> Callable[[], None]:
        """A floor: what any decoder built on orjson must do, with the logic in between free.

        Per message: ``orjson.loads`` of the input, then ``orjson.dumps`` of every output record's
        key and value *payload*, each spliced behind its pre-serialized Connect schema as the
        emitter does. The payloads are this pipeline's own output, taken beforehand.

        * ``build=False`` (the I/O floor): the payloads are serialized as they are;
        * ``build=True`` (the build floor): each dict and list in a payload is first copied once
          with ``dict.copy``/``list.copy``. A decoder has to build those objects from its input;
          a C-level copy of a finished one is cheaper than any way of building it.

        Nothing is looked up, checked or converted, so a floor's ratio to the baseline is the
        highest ratio a pure-Python decoder producing these records could reach.
        """
        loads, dumps = orjson.loads, orjson.dumps
        # per message: its value, and per output document (key, value) the schema prefix it is
        # spliced behind (b"" for none), its payload and, for the build floor, its copy plan
        plan: list[tuple[bytes, list[tuple[bytes, Any, CopyPlan | None]]]] = []
        for pipeline, message in self.items:
            parts: list[tuple[bytes, Any, CopyPlan | None]] = []
            for record in pipeline.process(message):
                for data in (record.key_bytes(), record.value_bytes()):
                    if data is None:
                        continue
                    doc = loads(data)
                    prefix = b""
                    if isinstance(doc, dict) and list(doc) == ["schema", "payload"]:
                        prefix = b'{"schema":' + dumps(doc["schema"]) + b',"payload":'
                        doc = doc["payload"]
                    copy_plan = _copy_plan(doc) if build and isinstance(doc, dict | list) else None
                    parts.append((prefix, doc, copy_plan))
            plan.append((message.value or b"", parts))

        def run() -> None:
            for value, parts in plan:
                if value:
                    loads(value)  # as the baseline does
                for prefix, payload, copy_plan in parts:
                    if copy_plan is not None:
                        payload = _copy(payload, copy_plan)
                    if prefix:
                        b"".join((prefix, dumps(payload), b"}"))
                    else:
                        dumps(payload)

        return run


# A copy plan: the keys (or list indexes) of a document that hold dicts or lists, each with its own
# plan. Copying along a plan copies every container once, in C (``dict.copy``, ``list.copy``).
CopyPlan = tuple[tuple[Any, "CopyPlan"], ...]


def _copy_plan(doc: Any) -> CopyPlan:
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    return tuple((k, _copy_plan(v)) for k, v in items if isinstance(v, dict | list))


def _copy(doc: Any, plan: CopyPlan) -> Any:
    out = doc.copy()
    for k, sub in plan:
        out[k] = _copy(doc[k], sub)
    return out


def _json_baseline(value: bytes) -> Callable[[], Any]:
    loads, dumps = orjson.loads, orjson.dumps
    return lambda: dumps(loads(value))


def _csv_baseline(value: bytes, delimiter: str) -> Callable[[], Any]:
    def read() -> Any:
        text = value.decode()
        return orjson.dumps(next(csv.reader(io.StringIO(text), delimiter=delimiter)))

    return read


def _avro_baseline(format_id: str, value: bytes, decoder: Decoder) -> Callable[[], Any]:
    from fastavro import schemaless_reader

    if format_id == "dts-avro":
        from transforms.decoders.dts_avro import DtsSchemaVersion, record_schema

        for version in (DtsSchemaVersion.CURRENT, DtsSchemaVersion.V2019):
            schema = record_schema(version).record
            fo = io.BytesIO(value)
            try:
                schemaless_reader(fo, schema, return_record_name=True)
            except Exception:
                continue
            if fo.tell() == len(value):
                return lambda: schemaless_reader(io.BytesIO(value), schema, return_record_name=True)
        raise ValueError("no DTS schema reads this message")
    from transforms.decoders import qlik

    envelope_schema = _avro_schema(orjson.dumps(qlik.ENVELOPE_SCHEMA).decode())
    envelope = schemaless_reader(io.BytesIO(value), envelope_schema, None)
    assert isinstance(envelope, dict)
    body = envelope["message"]
    if envelope["type"] == "MD":
        inner = _avro_schema(envelope["messageSchema"])
    else:
        assert isinstance(decoder, qlik.QlikAvroDecoder)
        registered = decoder.reader.resolve(envelope["messageSchemaId"], value)
        inner = _avro_schema(registered.metadata.data_schema)

    def read() -> Any:
        schemaless_reader(io.BytesIO(value), envelope_schema, None)
        return schemaless_reader(io.BytesIO(body), inner, None)

    return read


_avro_schemas: dict[str, Any] = {}


def _avro_schema(text: Any) -> Any:
    """A parsed Avro schema (the baseline parses each schema text once, like the decoder)."""
    from fastavro import parse_schema

    assert isinstance(text, str)
    parsed = _avro_schemas.get(text)
    if parsed is None:
        parsed = _avro_schemas[text] = parse_schema(orjson.loads(text))
    return parsed


def _messages(format_id: str) -> list[tuple[Pipeline, Message, Callable[[], Any]]]:
    from tests.goldens import cases, iter_messages

    out = []
    for case in cases(format_id):
        options = {k: v for k, v in case.options.items() if not k.startswith("__")}
        decoder = create_decoder(format_id, options)
        pipeline = Pipeline(
            decoder,
            EmitOptions(
                prefix=case.options.get("__topic_prefix", "cdcnorm"),
                decimal_mode=decoder.options.decimal_handling_mode,
            ),
        )
        delimiter = str(options.get("csv.delimiter", ","))
        for number, key, payload in iter_messages(case, decoder.binary):
            message = Message(value=payload, key=key, topic=case.name, partition=0, offset=number - 1)
            try:
                pipeline.process(message)
            except DecodeError:
                continue  # bad-input cases: the bench measures the success path
            if format_id in BINARY:
                baseline = _avro_baseline(format_id, payload, decoder)
            elif format_id == "arcion-csv":
                baseline = _csv_baseline(payload, delimiter)
            else:
                baseline = _json_baseline(payload)
            out.append((pipeline, message, baseline))
    return out


def load_workload(format_id: str, size_bytes: int) -> FormatWorkload:
    """The golden messages of a format repeated to at least ``size_bytes`` of input."""
    base = _messages(format_id)
    if not base:
        raise ValueError(f"{format_id}: no golden message decodes")
    per_round = sum(len(m.value or b"") for _, m, _ in base)
    rounds = max(1, -(-size_bytes // per_round))
    items = [(p, m) for _ in range(rounds) for p, m, _ in base]
    reads = [r for _ in range(rounds) for _, _, r in base]
    return FormatWorkload(format_id, items, reads, len(base))


def _baseline_name(format_id: str) -> str:
    if format_id in BINARY:
        return "fastavro.schemaless_reader"
    if format_id == "arcion-csv":
        return "csv.reader+orjson.dumps"
    return "orjson.loads+dumps"


def measure(report: BenchReport, format_id: str, size_bytes: int, repeats: int) -> None:
    work = load_workload(format_id, size_bytes)
    n_msgs = len(work.items)
    n_records = work.run_pipeline()
    is_json = format_id not in BINARY and format_id != "arcion-csv"
    fns = {
        "baseline": work.run_baseline,
        "pipeline": work.run_pipeline,
        "events": work.run_events,
        "process": work.run_process,
    }
    if is_json:
        fns["io_floor"] = work.floor_work(build=False)
        fns["build_floor"] = work.floor_work(build=True)
    times = interleaved(fns, repeats=repeats, clock="cpu")
    mb = work.n_bytes / 1e6
    full = times["pipeline"]
    decode = min(times["events"], full)
    emit = min(max(0.0, times["process"] - decode), full - decode)
    split = f"decode {decode / full:.0%} / emit {emit / full:.0%} / serialize {max(0.0, full - decode - emit) / full:.0%}"
    budget = ""
    if "build_floor" in times:
        # what the decoder may spend beyond the build floor and still meet the target, per message
        allowed = (times["baseline"] / JSON_TARGET - times["build_floor"]) / n_msgs * 1e6
        spent = (full - times["build_floor"]) / n_msgs * 1e6
        budget = f"; logic beyond the build floor: {spent:.1f} µs/msg, at the target {allowed:.1f}"
    report.add(
        Ratio(
            f"{format_id} msgs/s",
            n_msgs / times["pipeline"],
            n_msgs / times["baseline"],
            "msgs/s",
            target=JSON_TARGET if is_json else None,
            baseline_name=_baseline_name(format_id),
            note=f"{mb / full:.1f} MB/s in; {n_records / n_msgs:.2f} records/msg; {split}{budget}",
        )
    )
    for name, label, what in (
        ("io_floor", "I/O floor", "loads of the input + dumps of the same output"),
        ("build_floor", "build floor", "the I/O floor + a C copy of each output dict/list"),
    ):
        if name in times:
            report.add(
                Ratio(
                    f"{format_id} {label} msgs/s",
                    n_msgs / times[name],
                    n_msgs / times["baseline"],
                    "msgs/s",
                    baseline_name=_baseline_name(format_id),
                    note=f"{what}: a ceiling of the ratio above",
                )
            )


def profile(format_id: str, size_bytes: int, top: int = 30) -> None:
    """cProfile of the pipeline loop of one format, sorted by own time."""
    work = load_workload(format_id, size_bytes)
    work.run_pipeline()
    prof = cProfile.Profile()
    prof.enable()
    work.run_pipeline()
    prof.disable()
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__.splitlines()[0] if __doc__ else "decoder throughput")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated format ids")
    parser.add_argument("--profile", metavar="FORMAT", help="print a cProfile of one format instead")
    args = parser.parse_args(argv)
    size_bytes = SIZE_BYTES[args.size]
    if args.profile:
        profile(args.profile, size_bytes)
        return 0
    formats = [f for f in args.formats.split(",") if f]
    report = BenchReport("decoders", args.size, params={"input_bytes_per_format": size_bytes, "formats": formats})
    for format_id in formats:
        measure(report, format_id, size_bytes, REPEATS[args.size])
    return report.finish(args)


if __name__ == "__main__":
    raise SystemExit(main())
