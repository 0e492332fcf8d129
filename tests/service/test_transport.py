"""The worker's Faust transport: its aiokafka producer (``worker.output_client: aiokafka``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from service.app import _faust_settings
from service.config import PipelineConfig
from service.transport import BatchApp, IdempotentProducer


def test_aiokafka_output_producer_is_idempotent_with_acks_all(tmp_path: Path) -> None:
    """Faust asks aiokafka for idempotence only inside transactions; the worker's producer must
    be idempotent anyway, so a batch retried after a broker failure is not written twice."""
    config = PipelineConfig.model_validate({
        "broker": {"bootstrap_servers": "127.0.0.1:1"},
        "worker": {"output_client": "aiokafka"},
        "topics": [{"name": "src", "format": "canal-json"}],
    })

    async def build() -> tuple[object, object, int]:
        app = BatchApp(config.worker.app_id, **_faust_settings(config, tmp_path))
        producer = app.producer._new_producer()  # an AIOKafkaProducer, not started (no I/O)
        try:
            return app.producer, producer._txn_manager, producer._sender._acks
        finally:
            await producer.stop()

    faust_producer, txn_manager, acks = asyncio.run(build())
    assert isinstance(faust_producer, IdempotentProducer)
    assert txn_manager is not None  # aiokafka keeps producer id and sequences only when idempotent
    assert acks == -1  # acks=all
