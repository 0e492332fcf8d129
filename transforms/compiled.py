"""Which modules of :mod:`transforms` this process runs compiled (mypyc), and the switch to their source.

The modules of :data:`MODULES` (the hot path of ``canal-json`` and ``debezium-json``, the
emitter and what they share) are compiled by mypyc where the project is built with a C compiler
and mypy at hand (``setup.py``: ``make``, CI and the worker image build them; ``CDCNORM_COMPILE=0``
builds without). A compiled module is an extension module beside its source, built from that
source: there is no second implementation, and the source is what runs where nothing was
compiled (the fallback, tested as well).

The build writes :data:`BUILD_RECORD` beside this file: the sha256 of each module's source it
compiled. When :mod:`transforms` is imported (this module is its first import), :func:`activate`
decides once for the process, all or none (compiled modules call one another directly, so they
cannot be mixed with their sources):

* **compiled** where every module has its extension module and the record matches its source;
* **interpreted** (the sources are imported, ahead of the extension modules) where nothing was
  built, where ``CDCNORM_INTERPRETED=1`` is set, or where a source changed after the build (a
  checkout edited since ``make``): a stale extension module would run old code, so a
  :class:`StaleBuildWarning` names the file and the command that rebuilds.

:func:`status` tells which; ``cdcnorm --version`` and the worker's start line print it. This
module imports the standard library only: ``setup.py`` reads :data:`MODULES` from it without
importing the package.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "BUILD_RECORD",
    "INTERPRETED_ENV",
    "MODULES",
    "StaleBuildWarning",
    "Status",
    "activate",
    "build_record",
    "extension_path",
    "is_extension",
    "source_path",
    "status",
]

MODULES: tuple[str, ...] = (
    "transforms.connect",
    "transforms.table_budget",
    "transforms.values",
    "transforms.jsonio",
    "transforms.envelope_model",
    "transforms.envelope_codec",
    "transforms.envelope",
    "transforms.pipeline",
    "transforms.decoders.base",
    "transforms.decoders.cache",
    "transforms.decoders.fields",
    "transforms.decoders.rowplan",
    "transforms.decoders.canal_json",
    "transforms.decoders.schemaless_json",
    "transforms.decoders.connect_schema",
    "transforms.decoders.connect_values",
    "transforms.decoders.connect_keys",
    "transforms.decoders.connect_source",
    "transforms.decoders.connect_json",
    "transforms.decoders.debezium_json",
)
"""The compiled modules. Every other module of the project stays interpreted."""

BUILD_RECORD = "compiled.json"
INTERPRETED_ENV = "CDCNORM_INTERPRETED"
REBUILD = "make (or: pip install --no-build-isolation --no-deps -e .)"

_PACKAGE = Path(__file__).resolve().parent


class StaleBuildWarning(RuntimeWarning):
    """The compiled modules are older than their sources: this process runs the sources."""


@dataclass(frozen=True)
class Status:
    """Whether the compiled modules run, and why not when they do not."""

    compiled: bool
    reason: str
    """What decided: ``20 modules``, ``not built``, ``CDCNORM_INTERPRETED=1``, ``stale build: ...``."""

    def __str__(self) -> str:
        return f"{'compiled' if self.compiled else 'interpreted'} ({self.reason})"


def source_path(module: str) -> Path:
    """The source file of a module of :data:`MODULES` (``transforms.values`` → ``.../transforms/values.py``)."""
    return _PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")


def extension_path(module: str) -> Path | None:
    """The extension module built for ``module`` beside its source, if there is one."""
    base = source_path(module).with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.is_file():
            return candidate
    return None


def is_extension(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` (a module's ``__file__``) is an extension module, i.e. compiled code."""
    return path is not None and str(path).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def source_digest(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def build_record(modules: Sequence[str] = MODULES) -> dict[str, object]:
    """What the build writes to :data:`BUILD_RECORD`: the digest of each compiled module's source."""
    return {"modules": {module: source_digest(module) for module in modules}}


def _stale(built: list[str]) -> str | None:
    """Why the built extension modules do not match the sources (``None``: they do)."""
    missing = [m for m in MODULES if m not in built]
    if missing:
        return f"{source_path(missing[0]).name} was not compiled"
    try:
        recorded = json.loads((_PACKAGE / BUILD_RECORD).read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"no valid {BUILD_RECORD} beside the extension modules"
    for module in MODULES:
        if recorded.get(module) != source_digest(module):
            return f"{source_path(module).relative_to(_PACKAGE.parent)} changed since it was compiled"
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the modules of :data:`MODULES` from their sources, ahead of their extension modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


_status: Status | None = None


def activate() -> Status:
    """Decide, once per process and before any of them is imported, how :data:`MODULES` load."""
    global _status
    if _status is not None:
        return _status
    built = [m for m in MODULES if extension_path(m) is not None]
    if not built:
        decided = Status(False, "not built")
    elif os.environ.get(INTERPRETED_ENV, "") not in ("", "0"):
        decided = Status(False, f"{INTERPRETED_ENV}={os.environ[INTERPRETED_ENV]}")
    elif (stale := _stale(built)) is not None:
        warnings.warn(
            f"cdcnorm: the compiled modules of transforms/ are stale ({stale}); running their sources. "
            f"Rebuild them: {REBUILD}",
            StaleBuildWarning,
            stacklevel=2,
        )
        decided = Status(False, f"stale build: {stale}")
    else:
        decided = Status(True, f"{len(built)} modules")
    if not decided.compiled and built:
        sys.meta_path.insert(0, _SourceFinder())
    _status = decided
    return decided


def status() -> Status:
    """How this process runs :data:`MODULES` (decided when :mod:`transforms` was imported)."""
    return activate()


activate()
