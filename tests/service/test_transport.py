"""The worker's Faust transport: its aiokafka producer (the output with ``worker.output_client: aiokafka``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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
