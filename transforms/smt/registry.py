"""Transforms and predicates by name, imported lazily, and chains built from config data.

A chain is a list of step specs, each a mapping::

    {"type": "route", "regex": "...", "replacement": "...",
     "predicate": {"type": "table-matches", "regex": "inventory\\\\..*"}, "negate": false}

``type`` names the transform, ``predicate`` (optional) says when it applies and ``negate``
inverts that; every other key is the transform's config. Unknown names, unknown keys and bad
values raise :class:`~transforms.errors.ConfigError` naming the step, e.g.
``transforms[2].regex``.

>>> chain = build_chain([{"type": "filter", "predicate": {"type": "op-is", "ops": "r"}}])
>>> len(chain)
1
>>> build_chain([{"type": "route", "regex": "(", "replacement": "x"}])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
transforms.errors.ConfigError: invalid config transforms[0].regex='(': ...
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from transforms.envelope import EmitOptions
from transforms.errors import ConfigError
from transforms.options import OptionDoc
from transforms.smt.base import ChainStep, Predicate, SmtConfig, Transform, TransformChain
from transforms.smt.config_types import TopicNamingConfig

__all__ = [
    "PREDICATES",
    "TRANSFORMS",
    "build_chain",
    "config_docs",
    "create_predicate",
    "create_transform",
    "predicate_class",
    "transform_class",
]

TRANSFORMS: dict[str, str] = {
    "route": "transforms.smt.route:RouteByRegex",
    "filter": "transforms.smt.filter:Filter",
    "replace-field": "transforms.smt.replace_field:ReplaceField",
    "mask": "transforms.smt.mask:MaskField",
    "insert-field": "transforms.smt.insert_field:InsertField",
    "unwrap": "transforms.smt.unwrap:ExtractNewRecordState",
}
"""Transform name → ``module:Class``. Modules are imported on first use."""

PREDICATES: dict[str, str] = {
    "topic-matches": "transforms.smt.predicates:TopicMatches",
    "table-matches": "transforms.smt.predicates:TableMatches",
    "op-is": "transforms.smt.predicates:OpIs",
    "is-schema-change": "transforms.smt.predicates:IsSchemaChange",
    "is-transaction": "transforms.smt.predicates:IsTransaction",
    "has-header-key": "transforms.smt.predicates:HasHeaderKey",
}
"""Predicate name → ``module:Class``."""

_STEP_KEYS = ("type", "predicate", "negate")

C = TypeVar("C", Transform, Predicate)


def _load(registry: dict[str, str], name: Any, key: str, what: str) -> Any:
    target = registry.get(name) if isinstance(name, str) else None
    if target is None:
        raise ConfigError(key, name, f"unknown {what}; known: {', '.join(registry)}")
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def transform_class(name: str) -> type[Transform]:
    """The transform class registered as ``name``; ConfigError if there is none."""
    cls: type[Transform] = _load(TRANSFORMS, name, "type", "transform")
    return cls


def predicate_class(name: str) -> type[Predicate]:
    """The predicate class registered as ``name``; ConfigError if there is none."""
    cls: type[Predicate] = _load(PREDICATES, name, "type", "predicate")
    return cls


def _loc(parts: Sequence[int | str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validate(model: type[SmtConfig], raw: Mapping[str, Any], where: str, what: str) -> SmtConfig:
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        errors = exc.errors()
        # an unknown key explains a missing one (a misspelling), so it is reported first
        err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
        loc = _loc(err.get("loc", ()))
        key = f"{where}.{loc}" if loc else where
        reason = err.get("msg", "invalid")
        if reason.startswith("Value error, "):
            reason = reason[len("Value error, ") :]
        value = raw.get(loc, err.get("input")) if loc else dict(raw)
        if err.get("type") == "missing":
            value, reason = None, "required"
        elif err.get("type") == "extra_forbidden":
            known = sorted({i.alias or n for n, i in model.model_fields.items()} | set(_STEP_KEYS))
            reason = f"unknown key for {what}; known: {', '.join(known)}"
        raise ConfigError(key, value, reason) from exc


def _with_naming(
    model: type[SmtConfig], raw: Mapping[str, Any], emit_options: EmitOptions | None
) -> dict[str, Any]:
    config = dict(raw)
    if emit_options is not None and issubclass(model, TopicNamingConfig):
        config.setdefault("topic.prefix", emit_options.prefix)
        config.setdefault("topic.template", emit_options.topic_template)
        if emit_options.transaction_topic is not None:
            config.setdefault("transaction.topic", emit_options.transaction_topic)
    return config


def _create(
    cls: type[C], config: Mapping[str, Any], where: str, what: str, emit_options: EmitOptions | None
) -> C:
    raw = _with_naming(cls.config_model, config, emit_options)
    return cls(_validate(cls.config_model, raw, where, f"{what} {cls.name!r}"))


def create_transform(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    where: str = "transform",
    emit_options: EmitOptions | None = None,
) -> Transform:
    """A configured transform. ``emit_options`` supplies the topic naming to steps that need it.

    >>> create_transform("mask", {"fields": "email"}).config.replacement
    '****'
    """
    return _make_transform(name, config or {}, where, emit_options)


def create_predicate(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    where: str = "predicate",
    emit_options: EmitOptions | None = None,
) -> Predicate:
    """A configured predicate."""
    return _make_predicate(name, config or {}, where, emit_options)


def _make_transform(
    name: Any, config: Mapping[str, Any], where: str, emit_options: EmitOptions | None
) -> Transform:
    cls = _load(TRANSFORMS, name, f"{where}.type", "transform")
    transform: Transform = _create(cls, config, where, "transform", emit_options)
    return transform


def _make_predicate(
    name: Any, config: Mapping[str, Any], where: str, emit_options: EmitOptions | None
) -> Predicate:
    cls = _load(PREDICATES, name, f"{where}.type", "predicate")
    predicate: Predicate = _create(cls, config, where, "predicate", emit_options)
    return predicate


def _negate(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(key, value, "expected true or false")


def _step(index: int, spec: Any, emit_options: EmitOptions | None) -> ChainStep:
    where = f"transforms[{index}]"
    if not isinstance(spec, Mapping):
        raise ConfigError(where, spec, "expected a mapping with a 'type'")
    config = {k: v for k, v in spec.items() if k not in _STEP_KEYS}
    transform = _make_transform(spec.get("type"), config, where, emit_options)
    negate = _negate(spec.get("negate", False), f"{where}.negate")
    raw_predicate = spec.get("predicate")
    if raw_predicate is None:
        if negate:
            raise ConfigError(f"{where}.negate", spec.get("negate"), "negate needs a predicate")
        return ChainStep(transform)
    pwhere = f"{where}.predicate"
    if not isinstance(raw_predicate, Mapping):
        raise ConfigError(pwhere, raw_predicate, "expected a mapping with a 'type'")
    pconfig = {k: v for k, v in raw_predicate.items() if k != "type"}
    predicate = _make_predicate(raw_predicate.get("type"), pconfig, pwhere, emit_options)
    return ChainStep(transform, predicate, negate)


def build_chain(
    specs: Sequence[Mapping[str, Any]] | None, *, emit_options: EmitOptions | None = None
) -> TransformChain:
    """A chain from step specs, validated up front; the steps run in list order.

    ``emit_options`` are the pipeline's: steps that need destination topics (``route``,
    ``topic-matches``, ``insert-field`` with ``topic``) take their naming from them unless the
    spec sets ``topic.prefix`` / ``topic.template`` itself.
    """
    if specs is None:
        return TransformChain()
    if isinstance(specs, str | bytes) or not isinstance(specs, Sequence):
        raise ConfigError("transforms", specs, "expected a list of transform specs")
    return TransformChain([_step(i, spec, emit_options) for i, spec in enumerate(specs)])


def config_docs(cls: type[Transform] | type[Predicate]) -> list[OptionDoc]:
    """The declared config keys of a transform or predicate class, in declaration order."""
    docs = []
    for name, info in cls.config_model.model_fields.items():
        default = info.default
        docs.append(
            OptionDoc(
                name=info.alias or name,
                type=getattr(info.annotation, "__name__", None)
                or str(info.annotation).replace("typing.", ""),
                default=None if info.is_required() else getattr(default, "value", default),
                description=info.description or "",
            )
        )
    return docs
