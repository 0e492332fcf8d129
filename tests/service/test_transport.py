"""The worker's Faust transport: its aiokafka producer (the output with ``worker.output_client: aiokafka``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from service.app import Normalizer, create_app
from service.config import PipelineConfig
from service.transport import IdempotentProducer


def _producer_settings(output_client: str, tmp_path: Path) -> tuple[Any, Any, int]:
    """(Faust's producer, aiokafka's producer-id manager, acks) of the worker's app."""
    config = PipelineConfig.model_validate({
        "broker": {"bootstrap_servers": "127.0.0.1:1"},
        "web": {"enabled": False},
        "metadata_log": {"enabled": False},
        "worker": {"output_client": output_client},
        "topics": [{"name": "src", "format": "canal-json"}],
    })

    async def build() -> tuple[Any, Any, int]:
        app = create_app(config, normalizer=Normalizer(config), data_dir=tmp_path)
        producer = app.producer._new_producer()  # an AIOKafkaProducer, not started (no I/O)
        try:
            return app.producer, producer._txn_manager, producer._sender._acks
        finally:
            await producer.stop()

    return asyncio.run(build())


def test_aiokafka_output_producer_is_idempotent_with_acks_all(tmp_path: Path) -> None:
    """Faust asks aiokafka for idempotence only inside transactions; as the output it must be
    idempotent anyway, so a batch retried after a broker failure is not written twice."""
    faust_producer, txn_manager, acks = _producer_settings("aiokafka", tmp_path)
    assert isinstance(faust_producer, IdempotentProducer)
    assert txn_manager is not None  # aiokafka keeps a producer id and sequences only when idempotent
    assert acks == -1  # acks=all


def test_idle_faust_producer_asks_for_no_producer_id(tmp_path: Path) -> None:
    """With the librdkafka output Faust's producer sends nothing (Faust starts it all the same):
    it does not ask for a producer id, which some brokers (Tansu) refuse to aiokafka."""
    _, txn_manager, acks = _producer_settings("librdkafka", tmp_path)
    assert txn_manager is None
    assert acks == -1


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_aiokafka_output_writes_idempotent_batches_on_kafka(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    """The worker with ``output_client: aiokafka`` on a real Apache Kafka: its output and its
    dead letter are written in record batches that carry a producer id and sequence numbers
    (read from the broker's log segments), and every change arrives once, in order."""
    from service.local import create_topics
    from service.local_kafka import start_kafka
    from tests.faults.procs import disk_batches, worker_config
    from tests.faults.workload import DB, TABLES, check_order, generate, produce, read_all
    from tests.service.harness import WorkerProcess

    kafka = start_kafka(1, directory=tmp_path / "kafka", jvm_options=("-XX:TieredStopAtLevel=1",))
    try:
        prefix = "aio"
        source, outputs, dlq = f"{prefix}-src", [f"{prefix}.{DB}.{t}" for t in TABLES], f"{prefix}.dlq"
        create_topics(kafka.address, [source, *outputs, dlq], partitions=2)
        stream = generate(600, 40, seed=7)
        ends = produce(kafka.address, source, [*stream.messages, (b"poison", b"not canal")])
        config = worker_config(kafka.address, redis_url, redis_prefix, prefix, [{"name": source, "format": "canal-json"}],
                               output_client="aiokafka")
        worker = WorkerProcess(config, tmp_path)
        try:
            worker.wait_processed(source, sum(ends.values()), 120)
        finally:
            worker.stop()
        report = check_order(read_all(kafka.address, outputs, idle_s=2.0), prefix, stream)
        assert report.missing == 0 and not report.out_of_order and not report.wrong, report.line()
        assert [r.key for r in read_all(kafka.address, [dlq], idle_s=1.0)] == [b"poison"]
        disk = disk_batches(kafka, {**dict.fromkeys(outputs, 2), dlq: 2})
        assert disk.batches and not disk.not_idempotent, disk.not_idempotent[:5]
    finally:
        kafka.stop()
