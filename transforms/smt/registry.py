"""Transforms and predicates by name, imported lazily, and chains built from config data.

A chain is a list of step specs, each a mapping::

    {"type": "route", "regex": "...", "replacement": "...",
     "predicate": {"type": "table-matches", "regex": "inventory\\\\..*"}, "negate": false}

``type`` names the transform, ``predicate`` (optional) says when it applies and ``negate``
inverts that; every other key is the transform's config. Unknown names, unknown keys and bad
values raise :class:`~transforms.errors.ConfigError` naming the step, e.g.
``transforms[2].regex``.

A transform or predicate may also be named by the Kafka Connect or Debezium class it mirrors
(:data:`TRANSFORM_ALIASES`, :data:`PREDICATE_ALIASES`): the same class, configured with that
class's option names and, where they differ from ours, its defaults.

>>> chain = build_chain([{"type": "filter", "predicate": {"type": "op-is", "ops": "r"}}])
>>> len(chain)
1
>>> build_chain([{"type": "route", "regex": "(", "replacement": "x"}])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
transforms.errors.ConfigError: invalid config transforms[0].regex='(': ...
>>> type(create_transform("org.apache.kafka.connect.transforms.Filter")).__name__
'Filter'
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from transforms.envelope import EmitOptions
from transforms.errors import ConfigError
from transforms.options import OptionDoc
from transforms.smt.base import ChainStep, Predicate, SmtConfig, Transform, TransformChain
from transforms.smt.config_types import TopicNamingConfig

__all__ = [
    "PREDICATES",
    "PREDICATE_ALIASES",
    "TRANSFORMS",
    "TRANSFORM_ALIASES",
    "Alias",
    "SmtDoc",
    "build_chain",
    "catalog",
    "config_docs",
    "create_predicate",
    "create_transform",
    "predicate_class",
    "transform_class",
]

logger = logging.getLogger(__name__)

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
    "is-tombstone": "transforms.smt.predicates:IsTombstone",
}
"""Predicate name → ``module:Class``."""


@dataclass(frozen=True)
class Alias:
    """Another name of a registered transform or predicate: the Kafka Connect or Debezium class
    it mirrors. ``defaults`` are that class's own defaults where they differ from ours; one is
    used only when neither its key nor any other spelling of that key is set."""

    target: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


_CONNECT = "org.apache.kafka.connect.transforms."

TRANSFORM_ALIASES: dict[str, Alias] = {
    _CONNECT + "RegexRouter": Alias("route"),
    _CONNECT + "Filter": Alias("filter"),
    _CONNECT + "ReplaceField$Value": Alias("replace-field"),
    _CONNECT + "MaskField$Value": Alias("mask", {"replacement": "", "numeric.replacement": True}),
    _CONNECT + "InsertField$Value": Alias("insert-field"),
    "io.debezium.transforms.ExtractNewRecordState": Alias(
        "unwrap", {"delete.tombstone.handling.mode": "tombstone"}
    ),
}
"""Kafka Connect / Debezium class name → the transform it names (Connect's ``$Value`` variants)."""

PREDICATE_ALIASES: dict[str, Alias] = {
    _CONNECT + "predicates.TopicNameMatches": Alias("topic-matches"),
    _CONNECT + "predicates.RecordIsTombstone": Alias("is-tombstone"),
    _CONNECT + "predicates.HasHeaderKey": Alias("has-header-key"),
}
"""Kafka Connect predicate class name → the predicate it names."""

_NOT_SUPPORTED: dict[str, str] = {
    _CONNECT + f"{name}$Key": f"cdcnorm transforms record values only (the key is made of the "
    f"table's key columns); use {_CONNECT}{name}$Value"
    for name in ("ReplaceField", "MaskField", "InsertField")
}

_STEP_KEYS = ("type", "predicate", "negate")

C = TypeVar("C", Transform, Predicate)


def _resolve(
    registry: dict[str, str], aliases: dict[str, Alias], name: Any, key: str, what: str
) -> tuple[Any, Mapping[str, Any]]:
    """The class registered as ``name`` (a short name or a class name) and the alias defaults."""
    alias = aliases.get(name) if isinstance(name, str) else None
    target = alias.target if alias is not None else name
    path = registry.get(target) if isinstance(target, str) else None
    if path is None:
        if isinstance(name, str) and name in _NOT_SUPPORTED:
            raise ConfigError(key, name, _NOT_SUPPORTED[name])
        known = ", ".join(aliases if isinstance(name, str) and "." in name else registry)
        raise ConfigError(key, name, f"unknown {what}; known: {known}")
    module_name, _, class_name = path.partition(":")
    return getattr(importlib.import_module(module_name), class_name), (alias.defaults if alias else {})


def transform_class(name: str) -> type[Transform]:
    """The transform class registered as ``name`` (or a class name it mirrors); ConfigError if none."""
    cls: type[Transform] = _resolve(TRANSFORMS, TRANSFORM_ALIASES, name, "type", "transform")[0]
    return cls


def predicate_class(name: str) -> type[Predicate]:
    """The predicate class registered as ``name`` (or a class name it mirrors); ConfigError if none."""
    cls: type[Predicate] = _resolve(PREDICATES, PREDICATE_ALIASES, name, "type", "predicate")[0]
    return cls


def _loc(parts: Sequence[int | str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _spellings(model: type[SmtConfig]) -> dict[str, str]:
    return {**model.key_spellings, **model.deprecated_keys}


def _read_spellings(
    model: type[SmtConfig], raw: Mapping[str, Any], where: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """``raw`` with other spellings read as the keys they stand for, and key → spelling typed.

    Both spellings of one key together are an error; a deprecated one is logged.
    """
    config = dict(raw)
    typed: dict[str, str] = {}
    declared = {info.alias or name for name, info in model.model_fields.items()}
    for spelling, key in _spellings(model).items():
        if spelling not in raw:
            continue
        if key in raw:
            raise ConfigError(
                f"{where}.{spelling}",
                raw[spelling],
                f"another spelling of {key!r}, which is also set; set only {key}",
            )
        if spelling in model.deprecated_keys:
            logger.warning("%s.%s is deprecated: use %s instead", where, spelling, key)
        if spelling not in declared:
            config[key] = config.pop(spelling)
            typed[key] = spelling
    return config, typed


def _with_defaults(
    model: type[SmtConfig], config: dict[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """``config`` plus the alias ``defaults`` of keys that no spelling sets."""
    spellings = _spellings(model)
    for key, value in defaults.items():
        if key not in config and not any(
            config_key in config for config_key, k in spellings.items() if k == key
        ):
            config[key] = value
    return config


def _validate(
    model: type[SmtConfig], raw: Mapping[str, Any], where: str, what: str, typed: Mapping[str, str]
) -> SmtConfig:
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        errors = exc.errors()
        # an unknown key explains a missing one (a misspelling), so it is reported first
        err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
        loc = _loc(err.get("loc", ()))
        value = raw.get(loc, err.get("input")) if loc else dict(raw)
        loc = typed.get(loc, loc)
        key = f"{where}.{loc}" if loc else where
        reason = err.get("msg", "invalid")
        if reason.startswith("Value error, "):
            reason = reason[len("Value error, ") :]
        if err.get("type") == "missing":
            value, reason = None, "required"
        elif err.get("type") == "extra_forbidden":
            names = {i.alias or n for n, i in model.model_fields.items()} | set(_spellings(model))
            known = sorted(names | set(_STEP_KEYS))
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
    cls: type[C],
    config: Mapping[str, Any],
    defaults: Mapping[str, Any],
    where: str,
    what: str,
    emit_options: EmitOptions | None,
) -> C:
    model = cls.config_model
    raw, typed = _read_spellings(model, config, where)
    raw = _with_defaults(model, _with_naming(model, raw, emit_options), defaults)
    return cls(_validate(model, raw, where, f"{what} {cls.name!r}", typed))


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
    cls, defaults = _resolve(TRANSFORMS, TRANSFORM_ALIASES, name, f"{where}.type", "transform")
    transform: Transform = _create(cls, config, defaults, where, "transform", emit_options)
    return transform


def _make_predicate(
    name: Any, config: Mapping[str, Any], where: str, emit_options: EmitOptions | None
) -> Predicate:
    cls, defaults = _resolve(PREDICATES, PREDICATE_ALIASES, name, f"{where}.type", "predicate")
    predicate: Predicate = _create(cls, config, defaults, where, "predicate", emit_options)
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


def _type_name(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None) or str(annotation)
    return re.sub(r"(?:\w+\.)+(\w+)", r"\1", name)  # no module paths


def _shown_default(value: Any) -> Any:
    if isinstance(value, tuple | frozenset | set):
        return [getattr(v, "value", v) for v in value]
    return getattr(value, "value", value)


def config_docs(target: type[Transform] | type[Predicate] | str) -> list[OptionDoc]:
    """The config keys of a transform or predicate, in declaration order.

    ``target`` is a class, or a name: a short name, or a Kafka Connect/Debezium class name whose
    own defaults then show. Each other spelling of a key follows the key it stands for.

    >>> [d.name for d in config_docs("topic-matches")][-2:]
    ['regex', 'pattern']
    >>> {d.name: d.default for d in config_docs("org.apache.kafka.connect.transforms.MaskField$Value")}["replacement"]
    ''
    """
    defaults: Mapping[str, Any] = {}
    if isinstance(target, str):
        alias = TRANSFORM_ALIASES.get(target) or PREDICATE_ALIASES.get(target)
        defaults = alias.defaults if alias is not None else {}
        if target in TRANSFORMS or target in TRANSFORM_ALIASES:
            target = transform_class(target)
        else:
            target = predicate_class(target)
    model = target.config_model
    spellings = _spellings(model)
    docs = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        default = None if info.is_required() else _shown_default(defaults.get(key, info.default))
        docs.append(
            OptionDoc(
                name=key,
                type=_type_name(info.annotation),
                default=default,
                description=info.description or "",
            )
        )
        for spelling, stands_for in spellings.items():
            if (
                stands_for != key
                or spelling in model.model_fields
                or any(i.alias == spelling for i in model.model_fields.values())
            ):
                continue
            what = "Deprecated: use" if spelling in model.deprecated_keys else "Another spelling of"
            docs.append(
                OptionDoc(name=spelling, type=docs[-1].type, default=None, description=f"{what} {key}.")
            )
    return docs


class SmtDoc(BaseModel):
    """One transform or predicate as a listing shows it: names, summary and config keys."""

    kind: str
    name: str
    aliases: list[str]
    description: str
    options: list[OptionDoc]


def catalog() -> list[SmtDoc]:
    """Every transform, then every predicate, with the Connect/Debezium class names it answers to.

    >>> [d.aliases for d in catalog() if d.name == "unwrap"]
    [['io.debezium.transforms.ExtractNewRecordState']]
    """
    out = []
    for kind, registry, aliases in (
        ("transform", TRANSFORMS, TRANSFORM_ALIASES),
        ("predicate", PREDICATES, PREDICATE_ALIASES),
    ):
        for name in registry:
            cls = transform_class(name) if kind == "transform" else predicate_class(name)
            summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            names = [a for a, alias in aliases.items() if alias.target == name]
            out.append(
                SmtDoc(kind=kind, name=name, aliases=names, description=summary, options=config_docs(cls))
            )
    return out
