"""``cdcnorm tail --config``: the broker and its security settings come from pipeline.yaml
(``BrokerConfig.librdkafka()``), as for the sink (``-m integration``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app
from service.local import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_tail_takes_the_broker_from_the_config(kafka_bootstrap: str, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = f"tail-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"k", value=b'{"n": 1}')
    assert producer.flush(10) == 0
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "broker": {"bootstrap_servers": kafka_bootstrap, "client_id": "tail-test"},
        "topics": [{"name": "src", "format": "canal-json"}],
    }))
    result = CliRunner().invoke(app, ["tail", topic, "--config", str(config), "--from-beginning", "--max", "1"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout.splitlines()[0])
    assert (record["topic"], record["offset"], record["value"]) == (topic, 0, {"n": 1})

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"broker": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                              "sasl_username": "u", "sasl_password": "tail-pw-Ex4"},
                                   "topics": [{"name": "src", "format": "canal-json"}], "colour": 1}))
    result = CliRunner().invoke(app, ["tail", topic, "--config", str(bad)])
    assert result.exit_code == 1 and result.output.startswith("colour=1: unknown key")
    assert "tail-pw-Ex4" not in result.output
