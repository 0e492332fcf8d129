"""Kafka topic names: the one rule by which the worker and the CLI make a name a valid topic.

The worker hands each decoder the Kafka topic a message came from; a decoder names the table of
a message that carries none after that source topic (how exactly is the format's business).
``cdcnorm transform`` reads files, so it needs a source topic too: ``--source-topic``, by default
:func:`source_topic_for_file`. Output topics (``<prefix>.<db>.<table>`` and templates) are made
valid by :func:`valid_topic_name`, in the worker (``Normalizer.output_topic``) and the CLI alike.

>>> valid_topic_name("par.default./data/in.txt")
'par.default._data_in.txt'
>>> source_topic_for_file("/data/orders 2024.txt")
'orders_2024'
"""

from __future__ import annotations

import re
from pathlib import PurePath

__all__ = ["DEFAULT_SOURCE_TOPIC", "MAX_TOPIC_LENGTH", "is_valid_topic_name", "source_topic_for_file", "valid_topic_name"]

MAX_TOPIC_LENGTH = 249
"""Kafka's limit on the length of a topic name."""
DEFAULT_SOURCE_TOPIC = "cdcnorm-transform"
"""The source topic of messages read from standard input (or a file whose name has no usable stem)."""

_INVALID_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def is_valid_topic_name(name: str) -> bool:
    """Whether Kafka accepts ``name`` as a topic name (``[A-Za-z0-9._-]``, 1 to 249, not ``.``/``..``)."""
    return (
        0 < len(name) <= MAX_TOPIC_LENGTH
        and name not in (".", "..")
        and _INVALID_TOPIC_CHARS.search(name) is None
    )


def valid_topic_name(name: str) -> str:
    """``name`` as a valid Kafka topic name: characters outside ``[A-Za-z0-9._-]`` become ``_``
    (as Debezium's topic naming does), cut to 249 characters; ``""``, ``.`` and ``..`` become ``_``.

    >>> valid_topic_name("p.$db.t")
    'p._db.t'
    """
    safe = _INVALID_TOPIC_CHARS.sub("_", name)[:MAX_TOPIC_LENGTH]
    return "_" if safe in ("", ".", "..") else safe


def source_topic_for_file(path: str) -> str:
    """The source topic ``cdcnorm transform`` assumes for the messages of ``path``: the file's
    stem made a valid topic name; :data:`DEFAULT_SOURCE_TOPIC` for ``-`` (standard input).

    >>> source_topic_for_file("tests/data/canal-json/seed-delete.txt")
    'seed-delete'
    >>> source_topic_for_file("-")
    'cdcnorm-transform'
    """
    if path == "-":
        return DEFAULT_SOURCE_TOPIC
    stem = PurePath(path).stem
    return valid_topic_name(stem) if stem.strip(".") else DEFAULT_SOURCE_TOPIC
