"""Java artifacts from Maven Central, fetched once into a cache folder through a pinned pom.

A pom in ``service/maven/`` names the artifacts of one local Java service (Apache Kafka's broker
for :mod:`service.local_kafka`). :func:`fetch_artifacts` runs ``mvn dependency:copy-dependencies``
on it into ``<cache>/maven/<pom name>-<pom digest>/`` and returns that folder of jars:

* the cache is ``$CDCNORM_CACHE_DIR`` (default ``$XDG_CACHE_HOME/cdcnorm``, else
  ``~/.cache/cdcnorm``); Maven's own repository (``~/.m2``) caches the downloads as well;
* a folder is complete when its stamp file exists: it is filled under another name and renamed
  into place, so a fetch that was killed leaves nothing half made;
* two processes fetching at once (a test session beside a bench) take turns on a lock file;
* a changed pom has another digest, so it gets a folder of its own.

Nothing is built: the pom has packaging ``pom`` and only its dependencies are copied.

>>> pom_path("kafka").name
'kafka.pom.xml'
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from transforms.errors import CdcnormError

__all__ = ["POMS", "LocalServiceError", "cache_dir", "fetch_artifacts", "java_command", "pom_path"]

log = logging.getLogger(__name__)

POMS = Path(__file__).parent / "maven"
"""The pinned poms, one per local Java service (``<name>.pom.xml``)."""
_STAMP = ".complete"
_FETCH_TIMEOUT_S = 1800


class LocalServiceError(CdcnormError):
    """A local service (a broker, a catalog) cannot be fetched or started; the message says why."""


def cache_dir() -> Path:
    """The folder of cdcnorm's downloads: ``$CDCNORM_CACHE_DIR``, ``$XDG_CACHE_HOME/cdcnorm`` or
    ``~/.cache/cdcnorm``."""
    if explicit := os.environ.get("CDCNORM_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cdcnorm"


def pom_path(name: str) -> Path:
    """The pinned pom of the local service ``name``."""
    return POMS / f"{name}.pom.xml"


def java_command() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise LocalServiceError(
            "java not found (set JAVA_HOME or put a JDK 17+ on PATH; Debian: apt-get install openjdk-17-jre-headless)"
        )
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_artifacts(name: str, progress: Callable[[str], None] | None = None) -> Path:
    """The folder holding the jars of ``service/maven/<name>.pom.xml`` and all their runtime
    dependencies; fetched with Maven the first time (``progress`` is told so), from the cache after."""
    pom = pom_path(name)
    if not pom.exists():
        raise LocalServiceError(f"no pinned pom for {name!r} ({pom} does not exist)")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    root = cache_dir() / "maven"
    target = root / f"{name}-{digest}"
    if (target / _STAMP).exists():
        return target
    with _locked(root / f".{name}.lock"):
        if (target / _STAMP).exists():  # another process fetched it while this one waited
            return target
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalServiceError(
                f"{name}: Maven (mvn) is needed once, to fetch the pinned jars of {pom.name} from Maven Central "
                f"into {target} (Debian: apt-get install maven)"
            )
        java_command()
        partial = root / f".{name}-{digest}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        message = f"fetching {name} from Maven Central once ({pom.name}) into {target}"
        (progress or log.info)(message)
        cmd = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime",
               f"-DoutputDirectory={partial}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_FETCH_TIMEOUT_S, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise LocalServiceError(f"{name}: mvn did not finish within {_FETCH_TIMEOUT_S} s ({' '.join(cmd)})") from None
        jars = sorted(partial.glob("*.jar")) if partial.is_dir() else []
        if proc.returncode != 0 or not jars:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            shutil.rmtree(partial, ignore_errors=True)
            raise LocalServiceError(
                f"{name}: fetching {pom.name} from Maven Central failed (mvn exit {proc.returncode}):\n{tail}"
            )
        (partial / _STAMP).write_text(f"{pom.name} sha256:{digest}\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        (progress or log.info)(f"{name}: {len(jars)} jars in {target}")
        return target
