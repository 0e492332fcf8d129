"""Single-message transforms (SMTs) over canonical events, and chains built from config data.

Each transform is one module with a declared config and a pure ``apply(event) -> list[event]``:
``route`` (:mod:`~transforms.smt.route`), ``filter``, ``replace-field``, ``mask``,
``insert-field`` and ``unwrap``. Predicates (:mod:`~transforms.smt.predicates`) decide where a
step applies. :func:`build_chain` turns a list of step specs into a :class:`TransformChain`;
transform modules are imported on first use. Each transform and predicate also answers to the
class name of the Kafka Connect or Debezium one it mirrors (:data:`TRANSFORM_ALIASES`,
:data:`PREDICATE_ALIASES`), with that class's option names.
"""

from transforms.smt.base import ChainStep, Predicate, SmtConfig, Transform, TransformChain
from transforms.smt.registry import (
    PREDICATE_ALIASES,
    PREDICATES,
    TRANSFORM_ALIASES,
    TRANSFORMS,
    Alias,
    SmtDoc,
    build_chain,
    catalog,
    config_docs,
    create_predicate,
    create_transform,
    predicate_class,
    transform_class,
)

__all__ = [
    "PREDICATES",
    "PREDICATE_ALIASES",
    "TRANSFORMS",
    "TRANSFORM_ALIASES",
    "Alias",
    "ChainStep",
    "Predicate",
    "SmtConfig",
    "SmtDoc",
    "Transform",
    "TransformChain",
    "build_chain",
    "catalog",
    "config_docs",
    "create_predicate",
    "create_transform",
    "predicate_class",
    "transform_class",
]
