"""The pipeline configuration: a YAML file validated into typed models at start-up.

Every section forbids unknown keys. A bad setting stops start-up with a
:class:`~transforms.errors.ConfigError` that names the YAML key path (``topics[1].format``),
the value and the reason. Secrets (``broker.sasl_password``, ``broker.ssl_password``,
``redis.password``) may be given literally, as ``${ENV_VAR}`` or as ``file:/path``; they are
held as :class:`pydantic.SecretStr` and never printed.

>>> cfg = PipelineConfig.model_validate({"topics": [{"name": "src", "format": "canal-json"}]})
>>> cfg.topics[0].output_dlq_topic(cfg.topic_prefix)
'cdcnorm.dlq'
"""

from __future__ import annotations

import os
import re
import string
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from transforms.errors import ConfigError

__all__ = [
    "BrokerConfig",
    "ErrorPolicy",
    "PipelineConfig",
    "RedisConfig",
    "RowStateConfig",
    "SaslMechanism",
    "SecurityProtocol",
    "TopicEntry",
    "WebConfig",
    "WorkerConfig",
    "load_config",
    "parse_config",
    "resolve_secret",
]

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TEMPLATE_FIELDS = frozenset({"prefix", "db", "schema", "table"})
_SECRET_KEYS = ("password", "secret")


def resolve_secret(value: Any) -> Any:
    """Resolve ``${ENV_VAR}`` and ``file:/path`` references; other values pass unchanged.

    >>> os.environ["CDCNORM_DOCTEST_PW"] = "s3cret"
    >>> resolve_secret("${CDCNORM_DOCTEST_PW}")
    's3cret'
    """
    if not isinstance(value, str):
        return value
    if value.startswith("${") and value.endswith("}"):
        name = value[2:-1]
        if name not in os.environ:
            raise ValueError(f"environment variable {name} is not set")
        return os.environ[name]
    if value.startswith("file:"):
        path = Path(value[5:]).expanduser()
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"cannot read secret file {path}: {exc.strerror}") from exc
    return value


Secret = Annotated[SecretStr, BeforeValidator(resolve_secret)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecurityProtocol(StrEnum):
    """Kafka ``security.protocol``."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    """The SASL mechanisms the worker supports."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class ErrorPolicy(StrEnum):
    """What happens to a message that cannot be decoded or transformed."""

    DLQ = "dlq"
    FAIL = "fail"


class BrokerConfig(_Section):
    """Where the Kafka cluster is and how to authenticate to it."""

    bootstrap_servers: list[str] = Field(default_factory=lambda: ["127.0.0.1:9092"], min_length=1)
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_password: Secret | None = None
    client_id: str = "cdcnorm"
    session_timeout_s: float = Field(
        10.0, gt=0, description="Consumer-group session timeout; joins take about half of it on Tansu."
    )
    heartbeat_interval_s: float = Field(1.0, gt=0)

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [s.strip() for s in value.split(",") if s.strip()]
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port(cls, value: list[str]) -> list[str]:
        for server in value:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port, found {server!r}")
        return value

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"file {value} does not exist")
        return value

    @model_validator(mode="after")
    def _sasl_complete(self) -> BrokerConfig:
        if self.security_protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL):
            if self.sasl_mechanism is None:
                raise ValueError(f"sasl_mechanism is required with security_protocol {self.security_protocol}")
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError("sasl_username and sasl_password are required with SASL")
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstrap_servers)

    def librdkafka(self) -> dict[str, Any]:
        """The same settings for a confluent-kafka client (admin, tail, `up`)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol.value,
            "client.id": self.client_id,
        }
        if self.sasl_mechanism is not None:
            conf["sasl.mechanism"] = self.sasl_mechanism.value
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
        if self.ssl_cafile:
            conf["ssl.ca.location"] = str(self.ssl_cafile)
        if self.ssl_certfile:
            conf["ssl.certificate.location"] = str(self.ssl_certfile)
        if self.ssl_keyfile:
            conf["ssl.key.location"] = str(self.ssl_keyfile)
        if self.ssl_password:
            conf["ssl.key.password"] = self.ssl_password.get_secret_value()
        return conf


class RedisConfig(_Section):
    """The Redis instance holding shared decoder metadata and row state."""

    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "cdcnorm:"
    password: Secret | None = None
    socket_timeout_s: float = Field(2.0, gt=0)
    metadata_cache_ttl_s: float = Field(
        30.0, ge=0, description="How long a metadata document read from Redis is reused in-process."
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected a redis://, rediss:// or unix:// URL")
        return value


class WebConfig(_Section):
    """The HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics``."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(6066, ge=0, le=65535)


class WorkerConfig(_Section):
    """Faust worker settings."""

    app_id: str = Field("cdcnorm-normalizer", description="Faust app id = Kafka consumer group id.")
    max_inflight: int = Field(
        2000, gt=0, description="Messages whose output is sent but not yet acknowledged by the broker."
    )
    commit_interval_s: float = Field(1.0, gt=0)
    retry_initial_s: float = Field(0.5, gt=0)
    retry_max_s: float = Field(30.0, gt=0)
    log_level: str = "INFO"
    data_dir: Path | None = Field(None, description="Faust data directory (default: a temp dir).")

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return upper


class RowStateConfig(_Section):
    """Bounds of the per-table row-state store used to complete partial images."""

    ttl_seconds: int = Field(7 * 24 * 3600, gt=0)
    max_rows_per_table: int = Field(1_000_000, gt=0)


class TopicEntry(_Section):
    """One source topic (or pattern) and how its messages are normalized."""

    name: str | None = None
    pattern: str | None = None
    format: str = "auto"
    options: dict[str, Any] = Field(default_factory=dict)
    transforms: list[dict[str, Any]] = Field(default_factory=list)
    topic_template: str = "{prefix}.{db}.{table}"
    key_columns: dict[str, list[str]] = Field(default_factory=dict)
    dlq_topic: str | None = None
    errors: ErrorPolicy = ErrorPolicy.DLQ
    tombstones: bool = True
    complete_partial_images: bool = False
    row_state: RowStateConfig = Field(default_factory=RowStateConfig)
    transaction_metadata: bool = False

    @field_validator("name", "dlq_topic")
    @classmethod
    def _topic_name(cls, value: str | None) -> str | None:
        if value is not None and not _TOPIC_NAME.match(value):
            raise ValueError("not a valid Kafka topic name (letters, digits, '.', '_', '-')")
        return value

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    @field_validator("topic_template")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as exc:
            raise ValueError(f"not a valid template: {exc}") from exc
        unknown = names - _TEMPLATE_FIELDS
        if unknown:
            raise ValueError(f"unknown placeholder(s) {sorted(unknown)}; allowed: {sorted(_TEMPLATE_FIELDS)}")
        return value

    @field_validator("key_columns")
    @classmethod
    def _keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for table, cols in value.items():
            if not cols or not all(isinstance(c, str) and c for c in cols):
                raise ValueError(f"{table}: expected a non-empty list of column names")
        return value

    @model_validator(mode="after")
    def _name_or_pattern(self) -> TopicEntry:
        if (self.name is None) == (self.pattern is None):
            raise ValueError("give exactly one of name or pattern")
        return self

    @property
    def label(self) -> str:
        return self.name if self.name is not None else f"/{self.pattern}/"

    def output_dlq_topic(self, prefix: str) -> str:
        return self.dlq_topic or f"{prefix}.dlq"

    def matches(self, topic: str) -> bool:
        if self.name is not None:
            return topic == self.name
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None


class PipelineConfig(_Section):
    """The whole worker configuration (``pipeline.yaml``)."""

    topic_prefix: str = "cdcnorm"
    broker: BrokerConfig = Field(default_factory=BrokerConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    topics: list[TopicEntry] = Field(min_length=1)
    sink: dict[str, Any] | None = Field(None, description="Reserved for the lakehouse sink (not used by the worker).")

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _TOPIC_NAME.match(value):
            raise ValueError("not a valid Kafka topic name (letters, digits, '.', '_', '-')")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> PipelineConfig:
        seen: set[str] = set()
        for entry in self.topics:
            if entry.name is not None:
                if entry.name in seen:
                    raise ValueError(f"topic {entry.name!r} is listed twice")
                seen.add(entry.name)
        return self

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}.transaction"

    def is_output_topic(self, topic: str) -> bool:
        """True for topics this worker writes (never consumed through a pattern)."""
        prefix = self.topic_prefix
        if topic == prefix or topic.startswith(prefix + "."):
            return True
        return any(topic == e.output_dlq_topic(prefix) for e in self.topics)

    def entry_for(self, topic: str) -> TopicEntry | None:
        """The first entry that matches ``topic`` (explicit names win over patterns)."""
        for entry in self.topics:
            if entry.name == topic:
                return entry
        if self.is_output_topic(topic):
            return None
        for entry in self.topics:
            if entry.pattern is not None and entry.matches(topic):
                return entry
        return None

    def summary(self) -> list[dict[str, Any]]:
        """One row per topic entry, for ``cdcnorm validate-config``."""
        return [
            {
                "source": e.label,
                "format": e.format,
                "transforms": len(e.transforms),
                "errors": e.errors.value,
                "dlq": e.output_dlq_topic(self.topic_prefix),
                "template": e.topic_template,
                "completion": e.complete_partial_images,
                "transactions": e.transaction_metadata,
            }
            for e in self.topics
        ]


# ----------------------------------------------------------------------------- loading


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def _lookup(raw: Any, loc: tuple[Any, ...]) -> Any:
    node = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _masked(path: str, value: Any) -> Any:
    last = path.rsplit(".", 1)[-1].lower()
    if any(k in last for k in _SECRET_KEYS) and value is not None:
        return value if isinstance(value, str) and (value.startswith(("${", "file:"))) else "***"
    return value


def _from_validation(exc: ValidationError, raw: Any) -> ConfigError:
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    path = _path(loc)
    value = _lookup(raw, loc) if loc else raw
    if value is None:
        value = err.get("input")
    reason = str(err.get("msg", "invalid"))
    if err.get("type") == "extra_forbidden":
        reason = "unknown key"
    elif err.get("type") == "missing":
        reason = "required key is missing"
    reason = reason.removeprefix("Value error, ")
    return ConfigError(path, _masked(path, value), reason)


def _check_entry(index: int, entry: TopicEntry, prefix: str) -> None:
    """Validate what pydantic cannot: format options (through the decoder) and the chain."""
    from transforms.decoders import create_decoder

    where = f"topics[{index}]"
    try:
        create_decoder(entry.format, entry.options)
    except ConfigError as exc:
        if exc.key == "format" and exc.value == entry.format:
            raise ConfigError(f"{where}.format", entry.format, exc.reason) from exc
        raise ConfigError(f"{where}.options.{exc.key}", exc.value, exc.reason) from exc
    if entry.transforms:
        from transforms.envelope import EmitOptions

        build_chain_checked(entry.transforms, where, EmitOptions(prefix=prefix, topic_template=entry.topic_template))


def build_chain_checked(specs: list[dict[str, Any]], where: str, emit_options: Any = None) -> Any:
    """``transforms.smt.registry.build_chain(specs)``; ConfigError under the ``where`` key path.

    ``where`` is the topic entry's path (``topics[2]``); the registry's own key
    (``transforms[0].type``) is appended to it.
    """
    try:
        from transforms.smt.registry import build_chain
    except ImportError as exc:
        raise ConfigError(f"{where}.transforms", f"{len(specs)} step(s)", "transform chains are not available in this build") from exc
    try:
        return build_chain(specs, emit_options=emit_options)
    except ConfigError as exc:
        key = exc.key if exc.key.startswith("transforms") else f"transforms.{exc.key}"
        raise ConfigError(f"{where}.{key}", exc.value, exc.reason) from exc


def parse_config(raw: Any, *, check_formats: bool = True) -> PipelineConfig:
    """Validate a parsed YAML document; ConfigError names the key path, value and reason."""
    if not isinstance(raw, dict):
        raise ConfigError("<root>", type(raw).__name__, "expected a mapping at the top level")
    try:
        config = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise _from_validation(exc, raw) from None
    if check_formats:
        for index, entry in enumerate(config.topics):
            _check_entry(index, entry, config.topic_prefix)
    return config


def load_config(path: str | Path, *, check_formats: bool = True) -> PipelineConfig:
    """Read and validate a pipeline YAML file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("<file>", str(p), f"cannot read: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", str(p), f"not valid YAML: {exc}") from exc
    return parse_config(raw if raw is not None else {}, check_formats=check_formats)
