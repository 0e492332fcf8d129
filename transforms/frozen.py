"""Copying and pickling of frozen dataclasses, compiled or interpreted.

The frozen dataclasses of the compiled modules (:mod:`transforms.compiled`) define
``__reduce__`` as :func:`reduce_frozen`: mypyc's own ``__setstate__`` of a compiled class sets
each attribute through the frozen ``__setattr__``, so without it ``copy.copy``,
``copy.deepcopy`` and ``pickle.loads`` raise ``FrozenInstanceError`` on them. So do the
dataclasses that write their ``__init__`` out (:mod:`transforms.envelope_model`): compiled, such
a class's ``__new__`` runs that ``__init__``, so the ``cls.__new__(cls)`` that copy and pickle
start with fails without the arguments. Interpreted, the outcome is the same as dataclasses'
own: an equal instance.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

__all__ = ["reduce_frozen"]


def reduce_frozen(obj: Any) -> tuple[Any, ...]:
    """``obj.__reduce__()`` for a frozen dataclass: its class and the values of its init fields,
    so a copy or an unpickled instance is built by the constructor (and its ``__post_init__``)."""
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj) if f.init)
