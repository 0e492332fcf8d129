"""The Faust agent and the per-message normalizer, without a broker (``agent.test_context()``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import orjson
import pytest

from service.app import FatalMessageError, Normalizer, create_app
from service.config import parse_config
from service.dlq import ERROR_CLASS, ERROR_OFFSET, ERROR_PARTITION, ERROR_TOPIC, FORMAT_HEADER
from transforms.decoders import Message
from transforms.metadata import InMemoryMetadataStore

CANAL_INSERT = orjson.dumps(
    {
        "data": [{"id": "1", "name": "a", "email": "a@x"}, {"id": "2", "name": "b", "email": "b@x"}],
        "database": "shop",
        "table": "users",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": 1700000000000,
        "ts": 1700000000100,
        "mysqlType": {"id": "int", "name": "varchar(10)", "email": "varchar(20)"},
        "sqlType": {"id": 4, "name": 12, "email": 12},
        "old": None,
    }
)
CANAL_DELETE = orjson.dumps(
    {
        "data": [{"id": "1", "name": "a", "email": "a@x"}],
        "database": "shop",
        "table": "users",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "DELETE",
        "es": 1700000001000,
        "ts": 1700000001100,
        "mysqlType": {"id": "int", "name": "varchar(10)", "email": "varchar(20)"},
        "sqlType": {"id": 4, "name": 12, "email": 12},
        "old": None,
    }
)


class FakeSender:
    """Records sends; the returned futures are already resolved (broker ack)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]] = []

    async def __call__(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
    ) -> Awaitable[Any]:
        self.sent.append((topic, key, value, tuple(headers)))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def config(**entry: Any) -> Any:
    return parse_config(
        {
            "topic_prefix": "out",
            "web": {"enabled": False},
            "topics": [
                {"name": "src.canal", "format": "canal-json", **entry},
                {"pattern": "other\\..*", "format": "debezium-json"},
            ],
        }
    )


def normalizer(cfg: Any) -> Normalizer:
    return Normalizer(cfg, InMemoryMetadataStore())


def test_normalizer_keys_and_tombstones() -> None:
    cfg = config()
    n = normalizer(cfg)
    rt = n.runtime_for("src.canal")
    assert rt is not None and rt.format_id == "canal-json"
    records = n.process(Message(CANAL_INSERT, topic="src.canal", partition=0, offset=0), rt).records
    assert [r.topic for r in records] == ["out.shop.users", "out.shop.users"]
    assert [orjson.loads(r.key_bytes() or b"null")["payload"] for r in records] == [{"id": 1}, {"id": 2}]
    records = n.process(Message(CANAL_DELETE, topic="src.canal", partition=0, offset=1), rt).records
    assert [r.value is None for r in records] == [False, True]
    assert records[0].value is not None and records[0].value["payload"]["op"] == "d"
    assert records[1].key == records[0].key


def test_normalizer_tombstones_off_and_template() -> None:
    n = normalizer(config(tombstones=False, topic_template="{prefix}.x.{table}"))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_DELETE, topic="src.canal"), rt).records
    assert [r.topic for r in records] == ["out.x.users"]


def test_normalizer_key_override() -> None:
    n = normalizer(config(key_columns={"shop.users": ["email"]}))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_INSERT, topic="src.canal"), rt).records
    assert orjson.loads(records[0].key_bytes() or b"null")["payload"] == {"email": "a@x"}


def test_normalizer_chain_applied() -> None:
    n = normalizer(config(transforms=[{"type": "mask", "fields": "email"}]))
    rt = n.runtime_for("src.canal")
    assert rt is not None
    records = n.process(Message(CANAL_INSERT, topic="src.canal"), rt).records
    assert records[0].value is not None
    assert records[0].value["payload"]["after"]["email"] != "a@x"


def test_normalizer_routing() -> None:
    n = normalizer(config())
    other = n.runtime_for("other.topic")
    assert other is not None and other.format_id == "debezium-json"
    assert n.runtime_for("unrelated") is None
    assert n.runtime_for("out.shop.users") is None


def test_normalizer_dead_letter_and_fail() -> None:
    n = normalizer(config())
    rt = n.runtime_for("src.canal")
    assert rt is not None
    msg = Message(b"{not json", key=b"k1", topic="src.canal", partition=2, offset=9, headers=(("h", b"v"),))
    outcome = n.process(msg, rt)
    assert outcome.records == [] and outcome.dlq is not None
    topic, key, value, headers = outcome.dlq
    assert (topic, key, value) == ("out.dlq", b"k1", b"{not json")
    h = dict(headers)
    assert h["h"] == b"v"
    assert h[ERROR_TOPIC] == b"src.canal" and h[ERROR_PARTITION] == b"2" and h[ERROR_OFFSET] == b"9"
    assert h[ERROR_CLASS].endswith(b"DecodeError") and h[FORMAT_HEADER] == b"canal-json"
    failing = normalizer(config(errors="fail"))
    rt = failing.runtime_for("src.canal")
    assert rt is not None
    with pytest.raises(FatalMessageError):
        failing.process(msg, rt)


async def _wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def test_agent_routes_keys_and_dead_letters() -> None:
    cfg = config(transforms=[{"type": "mask", "fields": "email"}])
    sender = FakeSender()
    app = create_app(cfg, normalizer=normalizer(cfg), sender=sender)
    agent = next(a for a in app.agents.values() if "normalize.0" in a.name)

    async def run() -> None:
        async with agent.test_context() as wrapped:
            await wrapped.put(CANAL_INSERT, key=b"a", wait=False)
            await wrapped.put(b"garbage", key=b"bad", headers=[("x", b"1")], wait=False)
            await wrapped.put(CANAL_DELETE, key=b"b", wait=False)
            await _wait_for(lambda: len(sender.sent) == 5)

    asyncio.run(run())
    topics = [s[0] for s in sender.sent]
    assert topics == ["out.shop.users", "out.shop.users", "out.dlq", "out.shop.users", "out.shop.users"]
    assert list(app.agents) == ["cdcnorm.normalize.0", "cdcnorm.normalize.1"]
    dlq = sender.sent[2]
    assert dlq[1] == b"bad" and dlq[2] == b"garbage"
    assert dict(dlq[3])[ERROR_TOPIC] == b"src.canal"
    keys = [orjson.loads(s[1])["payload"] for s in sender.sent if s[0] != "out.dlq"]
    assert keys == [{"id": 1}, {"id": 2}, {"id": 1}, {"id": 1}]
    values = [orjson.loads(s[2]) if s[2] else None for s in sender.sent if s[0] != "out.dlq"]
    assert values[0]["payload"]["after"]["email"] != "a@x"
    assert values[2]["payload"]["op"] == "d" and values[3] is None
