"""``broker.group_protocol``: classic (the default) or KIP-848's consumer protocol.

The worker's consumer group member is Faust's aiokafka consumer, which has only the classic
protocol, so a config asking for consumer stops the worker and ``cdcnorm validate-config`` with
one ``broker.group_protocol=consumer: reason`` line among the config's other problems. Commands
that never join a group (``dlq replay``, ``tail``) take the same file. The last test runs the
worker on a real Kafka: it stops before joining, the group stays empty.
"""

from __future__ import annotations

import functools
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cdcnorm.cli import app, config_sections
from service.config import (
    GroupProtocol,
    PipelineConfig,
    check_worker_client,
    format_config_error,
    parse_config,
)
from transforms.errors import ConfigError

_parse_config = functools.partial(parse_config, sections=config_sections())  # as the cdcnorm command checks a file

REASON = "the worker's consumer is Faust's aiokafka consumer, which implements only the classic group protocol"


def raw(**broker: Any) -> dict[str, Any]:
    return {"broker": {"bootstrap_servers": "127.0.0.1:9092", **broker}, "topics": [{"name": "src", "format": "canal-json"}]}


def errors_of(document: dict[str, Any], **kwargs: Any) -> list[ConfigError]:
    with pytest.raises(ConfigError) as info:
        _parse_config(document, **kwargs)
    return list(getattr(info.value, "errors", [info.value]))


def write(tmp_path: Path, document: dict[str, Any]) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_classic_is_the_default_and_can_be_given() -> None:
    assert _parse_config(raw()).broker.group_protocol is GroupProtocol.CLASSIC
    assert _parse_config(raw(group_protocol="classic")).broker.group_protocol is GroupProtocol.CLASSIC


def test_the_worker_refuses_the_consumer_protocol_naming_key_value_and_why() -> None:
    (error,) = errors_of(raw(group_protocol="consumer"))
    assert (error.key, error.value) == ("broker.group_protocol", "consumer")
    assert REASON in error.reason and "KIP-848" in error.reason and "use classic for the worker" in error.reason
    assert format_config_error(error).startswith("broker.group_protocol=consumer: the worker cannot join its consumer "
                                                 "group (worker.app_id) with it")


def test_an_unknown_protocol_is_a_plain_value_error() -> None:
    (error,) = errors_of(raw(group_protocol="cooperative"))
    assert (error.key, error.value) == ("broker.group_protocol", "cooperative")
    assert "'classic' or 'consumer'" in error.reason


def test_it_is_reported_with_every_other_problem_in_document_order() -> None:
    document = {
        "broker": {"bootstrap_servers": "no-port", "group_protocol": "consumer"},
        "topics": [{"name": "a", "format": "canal-json"}, {"name": "b", "format": "shareplex-jsn"}],
        "sink": {"topics": ["t"], "trigger_interval_seconds": -1},
    }
    errors = errors_of(document)
    assert [e.key for e in errors] == ["broker.bootstrap_servers", "broker.group_protocol", "topics[1].format",
                                       "sink.trigger_interval_seconds"]


def test_a_reference_names_where_the_value_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """One config for worker and sink: the sink's environment sets the variable, the worker's not."""
    document = raw(group_protocol="${KAFKA_GROUP_PROTOCOL:-classic}")
    monkeypatch.delenv("KAFKA_GROUP_PROTOCOL", raising=False)
    assert _parse_config(document).broker.group_protocol is GroupProtocol.CLASSIC
    monkeypatch.setenv("KAFKA_GROUP_PROTOCOL", "consumer")
    (error,) = errors_of(document)
    assert error.value == "consumer" and error.reason.endswith("(from ${KAFKA_GROUP_PROTOCOL:-classic})")
    assert _parse_config(document, for_worker=False).broker.group_protocol is GroupProtocol.CONSUMER


def test_commands_that_join_no_group_take_the_consumer_protocol() -> None:
    cfg = _parse_config(raw(group_protocol="consumer"), for_worker=False)
    assert cfg.broker.group_protocol is GroupProtocol.CONSUMER
    assert "group.protocol" not in cfg.broker.librdkafka()  # producers, admin and assign-only consumers
    assert cfg.broker.librdkafka_group_member()["group.protocol"] == "consumer"


def test_a_config_built_in_code_is_checked_before_the_worker_starts() -> None:
    cfg = PipelineConfig.model_validate(raw(group_protocol="consumer"))
    with pytest.raises(ConfigError) as info:
        check_worker_client(cfg)
    assert (info.value.key, info.value.value) == ("broker.group_protocol", "consumer") and REASON in info.value.reason
    check_worker_client(PipelineConfig.model_validate(raw()))
    from service.app import create_app

    with pytest.raises(ConfigError, match="implements only the classic group protocol"):
        create_app(cfg)  # before it builds anything


def test_aiokafka_has_no_kip848_consumer_protocol() -> None:
    """What the refusal rests on: aiokafka (the worker's client, through Faust) knows no
    ConsumerGroupHeartbeat request (API key 68) and has no group protocol option. Should an
    upgrade bring them, this fails and the refusal is to be revisited."""
    import aiokafka.protocol
    from aiokafka import AIOKafkaConsumer

    keys = set()
    for info in pkgutil.iter_modules(aiokafka.protocol.__path__, "aiokafka.protocol."):
        module = __import__(info.name, fromlist=["_"])
        keys |= {getattr(c, "API_KEY", None) for _, c in inspect.getmembers(module, inspect.isclass)}
    assert {11, 12, 13, 14} <= keys  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup: the classic protocol
    assert 68 not in keys and 69 not in keys  # ConsumerGroupHeartbeat, ConsumerGroupDescribe
    assert not any("protocol" in p and "group" in p for p in inspect.signature(AIOKafkaConsumer).parameters)


def test_validate_config_and_the_worker_print_it(tmp_path: Path) -> None:
    path = write(tmp_path, raw(group_protocol="consumer"))
    for command in (["validate-config", str(path)], ["worker", "--config", str(path)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 1, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("broker.group_protocol=consumer: the worker cannot join") and REASON in line


@pytest.mark.timeout(60)
def test_dlq_replay_and_tail_take_the_consumer_protocol(tmp_path: Path) -> None:
    """They never join a group: the config loads, and what stops them is the missing broker."""
    from service.local import free_port

    path = write(tmp_path, {**raw(group_protocol="consumer"), "broker": {"bootstrap_servers": f"127.0.0.1:{free_port()}",
                                                                          "group_protocol": "consumer"}})
    for command in (["dlq", "replay", "--config", str(path), "--connect-timeout", "1"],
                    ["tail", "t", "--config", str(path), "--connect-timeout", "1"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("error: cannot reach the Kafka broker at 127.0.0.1:"), result.stderr


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_worker_stops_before_joining_its_group_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    """On a real broker the worker asked for the consumer protocol stops at start-up with the
    config error: its group never gets a member and no offset is committed."""
    import uuid

    from confluent_kafka.admin import AdminClient

    app_id = f"gp-worker-{uuid.uuid4().hex[:8]}"
    document = raw(group_protocol="consumer")
    document["broker"]["bootstrap_servers"] = kafka_bootstrap
    document["worker"] = {"app_id": app_id}
    document["web"] = {"enabled": False}
    result = CliRunner().invoke(app, ["worker", "--config", str(write(tmp_path, document))])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().startswith("broker.group_protocol=consumer: the worker cannot join")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    groups = admin.list_consumer_groups(request_timeout=30).result(30)
    assert app_id not in {g.group_id for g in groups.valid}
