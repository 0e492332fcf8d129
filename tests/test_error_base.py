"""Every error cdcnorm raises on purpose derives from the one base, ``transforms.errors.CdcnormError``
(``except CdcnormError`` catches them all; anything else is a bug). The exceptions: the pure
library's value errors that its decoders turn into a DecodeError at the message's boundary, and
private control-flow signals (``_Name``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from transforms.errors import CdcnormError

ROOT = Path(__file__).resolve().parents[1]
# raised inside a decoder and turned into its DecodeError (with the field) where the message is
# decoded (transforms.decoders.base.Decoder.decode_rows_safely lets a CdcnormError pass as it is)
INTERNAL = {"AvroMappingError", "CoercionError", "JsonLimitError", "FieldError", "InexactNumber", "NotFast"}


def exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class named like an error in the packages."""
    out = []
    for package in ("transforms", "service", "sink", "cdcnorm", "cdcnorm_common"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and node.bases and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in INTERNAL)
                    for b in node.bases
                ):
                    out.append((module, node.name))
    return out


def test_every_error_raised_on_purpose_derives_from_the_base() -> None:
    found = exception_classes()
    assert len(found) > 20
    wrong = []
    for module, name in found:
        if name.startswith("_") or name in INTERNAL:
            continue
        cls = getattr(importlib.import_module(module), name)
        if not issubclass(cls, CdcnormError):
            wrong.append(f"{module}.{name}")
    assert not wrong, wrong
