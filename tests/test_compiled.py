"""The compiled modules (transforms.compiled): loaded where the build made them, the same output as
their sources, and the sources run where they were not built or are stale.

`make` builds them in place (setup.py) and leaves transforms/compiled.json, the record of the
build; CI sets CDCNORM_COMPILE=1, so there they must have been built. scripts/run-tests runs the
format, fuzz and compatibility tests again with CDCNORM_INTERPRETED=1 (the sources).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib
import importlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from random import Random

import orjson

import transforms
from transforms.compiled import (
    BUILD_RECORD,
    INTERPRETED_ENV,
    MODULES,
    StaleBuildWarning,
    Status,
    extension_path,
    is_extension,
    source_path,
    status,
)
from transforms.connect import Column, ConnectType, TableSchema
from transforms.decoders import Message
from transforms.decoders.connect_keys import TableName
from transforms.envelope import EmitOptions, SourceInfo
from transforms.errors import DecodeError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(transforms.__file__).resolve().parent
BUILT = (PACKAGE / BUILD_RECORD).is_file()
INTERPRETED = os.environ.get(INTERPRETED_ENV, "") not in ("", "0")
DIFFERENTIAL_FORMATS = ("canal-json", "debezium-json", "arcion-kafka")  # arcion-kafka: the connect modules too
MUTANTS = 300


def test_the_modules_load_as_the_build_left_them() -> None:
    loaded = {m: is_extension(importlib.import_module(m).__file__) for m in MODULES}
    current = status()
    if os.environ.get("CDCNORM_COMPILE") == "1":  # CI: the build had to compile them
        assert BUILT, f"CDCNORM_COMPILE=1 but no {BUILD_RECORD}: the build did not compile"
    if INTERPRETED:
        assert current == Status(False, f"{INTERPRETED_ENV}={os.environ[INTERPRETED_ENV]}")
        assert not any(loaded.values()), [m for m, compiled in loaded.items() if compiled]
    elif BUILT:
        assert current == Status(True, f"{len(MODULES)} modules"), f"{current}: rebuild (make)"
        assert all(loaded.values()), f"loaded from source: {[m for m, compiled in loaded.items() if not compiled]}"
        assert all(extension_path(m) == Path(importlib.import_module(m).__file__ or "") for m in MODULES)
    else:
        assert current == Status(False, "not built") and not any(loaded.values())
    # the modules that are not listed stay interpreted in any case
    for module in ("transforms.compiled", "transforms.errors", "transforms.decoders.dts_avro"):
        assert not is_extension(importlib.import_module(module).__file__)


def _corpus() -> dict[str, str]:
    """The sha256, per golden case and per fuzz batch, of every record (topic, key, value, headers)
    and every error (class, message) the pipeline makes of them."""
    from tests.fuzz.mutations import mutate
    from tests.fuzz.seeds import format_seeds
    from tests.goldens import cases, iter_messages
    from transforms.decoders import create_decoder
    from transforms.envelope import emit
    from transforms.pipeline import Pipeline

    def lines_of(pipeline: Pipeline, message: Message) -> list[bytes]:
        try:
            processed = pipeline.process_rows(message)
        except DecodeError as exc:
            return [f"{type(exc).__name__}: {exc}".encode()]
        out = [orjson.dumps([r.topic, r.key_bytes(), r.value_bytes(), r.headers], default=bytes.hex)
               for r in processed.records]
        return out + [f"{type(e).__name__} row {e.row}: {e}".encode() for e in processed.row_errors]

    digests: dict[str, str] = {}
    for case in cases():
        opts = {k: v for k, v in case.options.items() if not k.startswith("__")}
        decoder = create_decoder(case.format_id, opts)
        pipeline = Pipeline(decoder, EmitOptions(decimal_mode=decoder.options.decimal_handling_mode))
        lines = [line for n, key, value in iter_messages(case, decoder.binary)
                 for line in lines_of(pipeline, Message(value=value, key=key, topic=case.name, offset=n))]
        digests[str(case)] = hashlib.sha256(b"\n".join(lines)).hexdigest()
    for format_id in DIFFERENTIAL_FORMATS:
        seeds = format_seeds(format_id)
        rng = Random(29)
        lines = []
        for _ in range(MUTANTS):
            seed = rng.choice(seeds)
            message, _what = mutate(rng, seed, rng.choice(seeds))
            decoder = seed.decoder()
            lines += lines_of(Pipeline(decoder, EmitOptions(prefix="fuzz")), message)
            try:  # the decoder's own decode too: no net that turns a compiled TypeError into a DecodeError
                lines += [orjson.dumps([r.topic, r.key_bytes(), r.value_bytes()], default=bytes.hex)
                          for r in emit(decoder.decode(message), EmitOptions(prefix="fuzz"))]
            except DecodeError as exc:
                lines.append(f"{type(exc).__name__}: {exc}".encode())
        digests[f"fuzz {format_id}"] = hashlib.sha256(b"\n".join(lines)).hexdigest()
    return digests


def _run(code: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(cwd), **env}, timeout=600, check=False)


def test_the_sources_make_the_bytes_the_compiled_modules_make() -> None:
    """Every golden case and a few hundred fuzz mutants, in a process that runs the modules as built
    (compiled where they were) and in one that runs their sources (CDCNORM_INTERPRETED=1): the same
    records, the same errors. (Fresh processes: what other tests left in this one's caches and
    table budget must not count.)"""
    code = ("import json, transforms\nfrom tests.test_compiled import _corpus\n"
            "print(json.dumps([str(transforms.compiled_status()), _corpus()]))")
    runs = {}
    for interpreted in ("0", "1"):
        done = _run(code, {INTERPRETED_ENV: interpreted})
        assert done.returncode == 0, done.stderr[-3000:]
        runs[interpreted] = json.loads(done.stdout.strip().splitlines()[-1])
    (built_status, built), (source_status, source) = runs["0"], runs["1"]
    assert built_status == str(status()) or INTERPRETED, built_status
    assert source_status == f"interpreted ({INTERPRETED_ENV}=1)"
    assert len(built) > 100 and built.keys() == source.keys()
    differ = [case for case in built if built[case] != source[case]]
    assert not differ, f"{built_status} and interpreted output differ in {differ[:10]}"


def test_a_stale_or_partial_build_runs_the_sources(tmp_path: Path) -> None:
    """A copy of the package whose extension modules do not match its sources (here: stand-ins that
    would fail to load, with a record of other sources) imports the sources, and warns."""
    copied = tmp_path / "transforms"
    shutil.copytree(PACKAGE, copied, ignore=shutil.ignore_patterns("__pycache__", "*.so", BUILD_RECORD))
    for module in MODULES:  # not loadable: the import would fail if they were used
        stand_in = copied.joinpath(*module.split(".")[1:]).with_suffix(".cpython-311-x86_64-linux-gnu.so")
        stand_in.write_bytes(b"not an extension module")
    record = {"modules": {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in MODULES}}
    record["modules"]["transforms.values"] = "0" * 64  # values.py changed since the build
    (copied / BUILD_RECORD).write_text(json.dumps(record))
    code = ("import warnings\nwarnings.simplefilter('always')\nimport transforms\n"
            "from transforms.pipeline import Pipeline\nimport transforms.values as v\n"
            "print(transforms.compiled_status(), v.__file__)")
    for env, expected in (({INTERPRETED_ENV: ""}, "interpreted (stale build: transforms/values.py changed since it was compiled)"),
                          ({INTERPRETED_ENV: "1"}, f"interpreted ({INTERPRETED_ENV}=1)")):
        done = _run(code, {**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == f"{expected} {copied / 'values.py'}"
        assert ("StaleBuildWarning" in done.stderr) == (not env[INTERPRETED_ENV]), done.stderr
    (copied / BUILD_RECORD).unlink()  # extension modules but no record: not this source's build
    done = _run(code, {INTERPRETED_ENV: "", "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert "interpreted (stale build: no valid compiled.json" in done.stdout, done.stdout + done.stderr


def test_the_stale_warning_is_a_runtime_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("x", StaleBuildWarning, stacklevel=1)
    assert issubclass(caught[0].category, RuntimeWarning)


def _frozen_dataclasses() -> list[type]:
    found = []
    for module in MODULES:
        for value in vars(importlib.import_module(module)).values():
            params = getattr(value, "__dataclass_params__", None)
            if isinstance(value, type) and value.__module__ == module and params is not None and params.frozen:
                found.append(value)
    return found


def test_frozen_values_copy_and_pickle() -> None:
    """A compiled frozen dataclass cannot be copied or unpickled the default way (mypyc's
    __setstate__ goes through the frozen __setattr__): each defines __reduce__ (transforms.frozen)."""
    frozen = _frozen_dataclasses()
    assert len(frozen) >= 10
    assert not [c.__qualname__ for c in frozen if "__reduce__" not in vars(c)]
    table = TableSchema("db", None, "t", (Column("id", ConnectType.INT64, False), Column.decimal("p", 10, 2)), ("id", "id"))
    for value in (table, table.columns[1], EmitOptions(prefix="p"), TableName("db", None, "t")):
        for again in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
            assert again == value and type(again) is type(value)
    again = copy.deepcopy(table)
    assert again.key == ("id",) and again.column("p") == table.column("p")  # its index is rebuilt
    source = SourceInfo("mysql", ts_ms=1)
    assert pickle.loads(pickle.dumps(source)) == source


def test_per_message_values_build_compiled_and_copy_and_pickle() -> None:
    """The values built per message write their __init__ out: compiled, a dataclass's generated
    one is interpreted Python (a SourceInfo cost 0.36-0.55 us to build). Compiled, such a class's
    __new__ runs that __init__, so each defines __reduce__ (transforms.frozen) for copy and pickle."""
    from transforms.decoders.base import Decoded
    from transforms.envelope import (
        ChangeEvent,
        NativeLayout,
        NativeSource,
        Operation,
        OutRecord,
        RowEvent,
        TransactionRef,
    )
    from transforms.pipeline import Processed

    classes = (Message, Decoded, Processed, SourceInfo, ChangeEvent, RowEvent, OutRecord, TransactionRef, NativeSource)
    assert not [c.__qualname__ for c in classes if "__reduce__" not in vars(c)]
    if status().compiled:
        assert [c.__qualname__ for c in classes if type(vars(c)["__init__"]).__name__ != "wrapper_descriptor"] == []
    table = TableSchema("db", None, "t", (Column("id", ConnectType.INT64, False),), ("id",))
    source = SourceInfo("mysql", ts_ms=1, fields={"pos": 4})
    layout = NativeLayout(2, None, (), ("before", "after"))
    values = (
        Message(b"v", key=b"k", topic="t", offset=3),
        Decoded([], None),
        Processed([OutRecord("t", {"id": 1}, None)], []),
        source,
        SourceInfo("mysql", native=NativeSource(layout, {"db": "db"}, {"ts_us": 1})),
        ChangeEvent(Operation.CREATE, table, None, {"id": 1}, source, TransactionRef("tx", 1, 2), ts_ms=5),
        RowEvent(table, {"id": 1}, {"id": 1}, False, Operation.CREATE, headers=(("h", b"1"),)),
        OutRecord("t", None, {"id": 1}, (("h", b"1"),)),
    )
    for value in values:
        for again in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
            assert again == value and type(again) is type(value)
    assert Decoded([]).row_errors == [] and Decoded([]).row_errors is not Decoded([]).row_errors
    assert SourceInfo("x").fields == {}
    assert dataclasses.replace(source, ts_ms=2) == SourceInfo("mysql", ts_ms=2, fields={"pos": 4})


def test_every_raise_from_in_a_compiled_module_sets_its_cause() -> None:
    """Compiled code ignores a raise's ``from``: each one raises ``caused_by(error, cause)``."""
    bare = []
    for module in MODULES:
        path = source_path(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.cause is not None:
                call = node.exc
                ok = (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "caused_by"
                      and len(call.args) == 2 and ast.dump(call.args[1]) == ast.dump(node.cause))
                if not ok:
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, f"raise ... from without caused_by: {bare}"
