"""The pipeline configuration: a YAML file validated into typed models at start-up.

Every string value may hold ``${VAR}``, ``${VAR:-default}`` or ``${VAR:?message}`` references
(POSIX shell semantics, through the ``expandvars`` library; ``$${`` is a literal ``${``) or be a
whole ``file:/path`` reference (outside the ``sink:`` section, where only secret-looking keys
read files); :func:`parse_config` resolves them all before validating (:func:`resolve_reference`).

Every section forbids unknown keys (the ``sink:`` section too: the ``cdcnorm`` command line hands
:class:`sink.config.SinkConfig` to :func:`parse_config`, which this package does not import). A bad config stops start-up with a
:class:`~transforms.errors.ConfigError` that names the YAML key path (``topics[1].format``),
the value and the reason; a config with several problems raises :class:`ConfigErrors`, which
lists every one of them. Kafka Connect's error-handling keys (:data:`CONNECT_ERROR_KEYS`) are
accepted next to cdcnorm's own. Secrets (``broker.sasl_password``, ``broker.ssl_password``,
``redis.password``, ``redis.ssl_password``) are held as :class:`pydantic.SecretStr` and never
printed: the value of an error on a secret-looking key is masked (``***``, or the reference it
came from with its default masked), passwords inside URLs are masked, and
:class:`SecretRedactor` replaces resolved secret values (those of references under
secret-looking keys anywhere in the config included) in every log record.

The settings reach the clients through :meth:`BrokerConfig.librdkafka` (confluent-kafka: the
sink, ``tail``), :func:`service.transport.faust_credentials` / :meth:`BrokerConfig.aiokafka_auth`
(the Faust worker's aiokafka clients) and :meth:`RedisConfig.client_kwargs`
(``service.state.connect_redis``).

``broker.group_protocol`` is the consumer group protocol of the group members that can speak
both (the sink's driver). The worker's member cannot: with ``consumer`` the worker and
``cdcnorm validate-config`` stop with a config error (:data:`WORKER_GROUP_PROTOCOLS`), while
``dlq replay`` and ``tail``, which never join a group, load the same file
(``load_config(..., for_worker=False)``).

>>> cfg = PipelineConfig.model_validate({"topics": [{"name": "src", "format": "canal-json"}]})
>>> cfg.topics[0].output_dlq_topic(cfg.topic_prefix)
'cdcnorm.dlq'
"""

from __future__ import annotations

import copy
import re
import string
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from service.converters import OutputConfig
from transforms.configfile import REFERENCES_RESOLVED as _RESOLVED
from transforms.configfile import (
    BrokerConfig,
    ConfigErrors,
    ExistingFile,
    GroupProtocol,
    Resolved,
    SaslMechanism,
    Secret,
    SecretRedactor,
    SecurityProtocol,
    format_config_error,
    is_secret_key,
    mask_secrets,
    mask_url,
    raise_problems,
    read_yaml,
    resolve_field,
    resolve_reference,
    resolve_secret,
    validation_errors,
)
from transforms.configfile import Document as _Document
from transforms.configfile import Section as _Section
from transforms.configfile import lookup as _lookup
from transforms.configfile import resolve_document as _resolve_document
from transforms.errors import ConfigError
from transforms.table_budget import DEFAULT_TABLE_BUDGET

__all__ = [
    "CONNECT_ERROR_KEYS",
    "BrokerConfig",
    "ConfigErrors",
    "ErrorPolicy",
    "GroupProtocol",
    "MetadataLogConfig",
    "OutputClient",
    "PipelineConfig",
    "RedisConfig",
    "RowStateConfig",
    "SaslMechanism",
    "SecretRedactor",
    "SecurityProtocol",
    "TopicEntry",
    "WebConfig",
    "WorkerConfig",
    "build_chain_checked",
    "check_worker_client",
    "format_config_error",
    "is_secret_key",
    "load_config",
    "mask_secrets",
    "mask_url",
    "parse_config",
    "resolve_field",
    "resolve_reference",
    "resolve_secret",
]

MAX_MESSAGE_BYTES_LIMIT = 900_000_000
"""Upper bound of ``worker.max_message_bytes``: a dead letter carries up to that many bytes plus
its headers, and librdkafka refuses a ``message.max.bytes`` above 1000000000."""
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TEMPLATE_FIELDS = frozenset({"prefix", "db", "schema", "table"})
class ErrorPolicy(StrEnum):
    """What happens to a message that cannot be decoded or transformed."""

    DLQ = "dlq"
    FAIL = "fail"


# Kafka Connect's error-handling keys, accepted where a topic entry (or the top level) takes
# cdcnorm's own: Connect key -> cdcnorm key. Giving both spellings of one setting is an error.
CONNECT_ERROR_KEYS: dict[str, str] = {
    "errors.tolerance": "errors",
    "errors.deadletterqueue.topic.name": "dlq_topic",
    "errors.deadletterqueue.context.headers.enable": "dlq_context_headers",
    "errors.log.enable": "log_errors",
}
# errors.tolerance values (case-insensitive, as Connect reads them) -> ErrorPolicy
_TOLERANCE = {"none": ErrorPolicy.FAIL, "all": ErrorPolicy.DLQ}
# error types whose ctx names the key (below the model's loc) that the error is about
_KEY_ERRORS = ("connect_key_conflict", "connect_key_value", "prefix_not_below_limit", "min_insync_above_replicas",
               "retry_not_below_stall")


def _connect_error_keys(data: Any) -> Any:
    """``data`` with Kafka Connect's error-handling keys under cdcnorm's names.

    >>> _connect_error_keys({"errors.tolerance": "ALL", "errors.log.enable": "false"})
    {'errors': <ErrorPolicy.DLQ: 'dlq'>, 'log_errors': 'false'}
    """
    if not isinstance(data, dict) or not any(key in data for key in CONNECT_ERROR_KEYS):
        return data
    out = dict(data)
    for connect, own in CONNECT_ERROR_KEYS.items():
        if connect not in out:
            continue
        if own in out:
            raise PydanticCustomError(
                "connect_key_conflict",
                "{own} and {key} are the same setting: give one of them",
                {"key": connect, "own": own},
            )
        value = out.pop(connect)
        if connect == "errors.tolerance":
            policy = _TOLERANCE.get(value.strip().lower()) if isinstance(value, str) else None
            if policy is None:
                raise PydanticCustomError(
                    "connect_key_value", "expected none (errors: fail) or all (errors: dlq)", {"key": connect}
                )
            value = policy
        out[own] = value
    return out


def _check_topic_name(value: str | None) -> str | None:
    if value is not None and not _TOPIC_NAME.match(value):
        raise ValueError("not a valid Kafka topic name (letters, digits, '.', '_', '-')")
    return value


class RedisConfig(_Section):
    """The Redis instance holding shared decoder metadata and row state.

    AUTH: ``password`` alone (``requirepass``) or ``username`` + ``password`` (Redis 6 ACL).
    TLS: a ``rediss://`` URL, verified against ``ssl_cafile`` (else the system CA bundle), with
    an optional client certificate (``ssl_certfile`` + ``ssl_keyfile``). The password belongs
    in ``password`` (``${ENV}`` or ``file:``), never in the URL.
    """

    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "cdcnorm:"
    username: Resolved | None = Field(None, description="ACL user (Redis 6+); default: the `default` user.")
    password: Secret | None = None
    ssl_cafile: ExistingFile | None = None
    ssl_certfile: ExistingFile | None = None
    ssl_keyfile: ExistingFile | None = None
    ssl_password: Secret | None = Field(None, description="Password of an encrypted ssl_keyfile.")
    ssl_check_hostname: bool = Field(True, description="Check that the server certificate names the host.")
    socket_timeout_s: float = Field(2.0, gt=0)
    metadata_cache_ttl_s: float = Field(
        30.0, ge=0, description="How long a metadata document read from Redis is reused in-process."
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("expected a redis://, rediss:// or unix:// URL")
        try:
            password = urlsplit(value).password
        except ValueError as exc:
            raise ValueError(f"not a valid URL: {exc}") from None
        if password:
            raise ValueError("the URL holds a password: put it in redis.password (${ENV_VAR} or file:/path)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RedisConfig:
        if not self.uses_tls:
            given = [k for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} set but the url is not rediss://")
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together (the client certificate and its key)")
        if self.username is not None:
            if self.password is None:
                raise ValueError("username needs a password")
            if urlsplit(self.url).username:
                raise ValueError("the user is given twice: in the url and in username")
        return self

    @property
    def uses_tls(self) -> bool:
        return self.url.startswith("rediss://")

    @property
    def display_url(self) -> str:
        """The URL, safe to print."""
        return mask_url(self.url)

    def describe_security(self) -> str:
        """A printable summary without secrets, e.g. ``auth=acl user=app tls ca=/etc/ca.pem``."""
        user = self.username or urlsplit(self.url).username
        if self.password is None:
            parts = ["auth=none"]
        else:
            parts = ["auth=acl", f"user={user}"] if user else ["auth=password"]
        if self.uses_tls:
            parts += ["tls", f"ca={self.ssl_cafile or 'system'}"]
            if self.ssl_certfile:
                parts.append("client-cert")
            if not self.ssl_check_hostname:
                parts.append("no-hostname-check")
        return " ".join(parts)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``redis.Redis.from_url(self.url, **kwargs)``: AUTH, TLS, timeouts."""
        kwargs: dict[str, Any] = {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.socket_timeout_s,
        }
        if self.password is not None:
            kwargs["password"] = self.password.get_secret_value()
        if self.username is not None:
            kwargs["username"] = self.username
        if self.uses_tls:
            kwargs["ssl_cert_reqs"] = "required"
            kwargs["ssl_check_hostname"] = self.ssl_check_hostname
            if self.ssl_cafile:
                kwargs["ssl_ca_certs"] = str(self.ssl_cafile)
            if self.ssl_certfile:
                kwargs["ssl_certfile"] = str(self.ssl_certfile)
            if self.ssl_keyfile:
                kwargs["ssl_keyfile"] = str(self.ssl_keyfile)
            if self.ssl_password:
                kwargs["ssl_password"] = self.ssl_password.get_secret_value()
        return kwargs

    def secret_values(self) -> Iterator[str]:
        for secret in (self.password, self.ssl_password):
            if secret is not None:
                yield secret.get_secret_value()


class WebConfig(_Section):
    """The HTTP endpoints: ``/healthz``, ``/startupz``, ``/readyz`` and ``/metrics``."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(6066, ge=0, le=65535)


class OutputClient(StrEnum):
    """The Kafka client that produces the worker's output (Faust's aiokafka consumer reads)."""

    LIBRDKAFKA = "librdkafka"
    AIOKAFKA = "aiokafka"


class WorkerConfig(_Section):
    """Faust worker settings."""

    app_id: str = Field("cdcnorm-normalizer", description="Faust app id = Kafka consumer group id.")
    max_inflight: int = Field(
        2000, gt=0, description="Messages whose output is sent but not yet acknowledged by the broker."
    )
    max_inflight_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        le=1024**4,
        description="Bytes (keys, values, headers) of output and dead-letter records sent but not yet acknowledged; "
        "at the bound processing waits (the producer's buffer is sized from it).",
    )
    table_cache_columns: int = Field(
        DEFAULT_TABLE_BUDGET,
        ge=1000,
        le=1_000_000_000,
        description="Memory budget of what decoders, transforms and the emitter keep per table (schemas, row plans, "
        "Connect schemas and their JSON), in columns: a table of c columns counts c + 1 in each cache. Past it "
        "the least recently used tables are forgotten (rebuilt when met again). About 700 bytes of memory per "
        "column held (docs/performance.md): the default holds about 110,000 tables of 8 columns.",
    )
    commit_interval_s: float = Field(1.0, gt=0)
    output_client: OutputClient = Field(
        OutputClient.LIBRDKAFKA,
        description="Producer of the output: librdkafka (confluent-kafka, C, the default) or aiokafka (Faust's).",
    )
    retry_initial_s: float = Field(0.5, gt=0)
    retry_max_s: float = Field(30.0, gt=0)
    liveness_stall_seconds: float = Field(
        600.0,
        gt=0,
        description="/healthz fails when the worker has had records to fetch on a partition it owns, or fetched "
        "messages whose output is not acknowledged, for this long without processing or acknowledging any. A "
        "worker idle because nothing arrives stays alive, and so does one retrying through a Redis outage.",
    )
    log_level: str = "INFO"
    shutdown_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds a stop (SIGTERM/SIGINT) may take: past them the worker logs what is still running "
        "and exits with code 4 (nothing is lost: offsets are committed only for delivered output). Keep it below "
        "the pod's terminationGracePeriodSeconds.",
    )
    data_dir: Path | None = Field(None, description="Faust data directory (default: a temp dir).")
    max_message_bytes: int = Field(
        1_048_576,
        ge=1024,
        le=MAX_MESSAGE_BYTES_LIMIT,
        description="Largest source message (key + value + headers) the worker normalizes; a larger one is "
        "dead-lettered with a prefix, its sizes and sha256 (service.dlq.oversized_dead_letter).",
    )
    oversized_prefix_bytes: int = Field(
        1024, ge=0, description="How many first bytes of an oversized message's key and value its dead letter carries."
    )
    max_record_bytes: int | None = Field(
        None,
        ge=64 * 1024,
        le=MAX_MESSAGE_BYTES_LIMIT,
        description="Largest output or dead-letter record (key + value + headers and their framing) the worker "
        "produces, checked before producing (optional: the worker reads the topics' max.message.bytes from the "
        "broker and the broker refuses a record above its topic's; set it to at most the smallest limit minus 61 "
        "to refuse such records before any of their message is produced). A normalized record above it "
        "dead-letters its source message (service.dlq.RecordTooLargeError); a dead letter above it carries a "
        "prefix of the message. Default: the output producer's message.max.bytes.",
    )

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        upper = value.upper()
        if upper not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("expected DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return upper

    @model_validator(mode="after")
    def _prefix_below_limit(self) -> WorkerConfig:
        if self.oversized_prefix_bytes >= self.max_message_bytes:
            raise PydanticCustomError(
                "prefix_not_below_limit",
                "must be below max_message_bytes ({limit}): the dead letter of an oversized message carries a prefix",
                {"key": "oversized_prefix_bytes", "limit": self.max_message_bytes},
            )
        return self

    @model_validator(mode="after")
    def _retry_below_stall(self) -> WorkerConfig:
        # a worker retrying through a Redis outage is alive as long as its attempts come back
        # (service.health): the longest wait between two attempts must leave room for one
        if self.retry_max_s >= self.liveness_stall_seconds:
            retry, stall = f"{self.retry_max_s:g}", f"{self.liveness_stall_seconds:g}"
            if "liveness_stall_seconds" in self.model_fields_set:  # name the key the file sets
                raise PydanticCustomError(
                    "retry_not_below_stall",
                    "must be above retry_max_s ({retry}): a worker waiting that long between attempts to reach "
                    "Redis would be restarted by its liveness probe",
                    {"key": "liveness_stall_seconds", "retry": retry},
                )
            raise PydanticCustomError(
                "retry_not_below_stall",
                "must be below liveness_stall_seconds ({stall}): a worker waiting that long between attempts to "
                "reach Redis would be restarted by its liveness probe",
                {"key": "retry_max_s", "stall": stall},
            )
        return self


class MetadataLogConfig(_Section):
    """The metadata log: a compacted Kafka topic, the source of truth of decoder metadata (the
    Qlik schema registry, Arcion column lists ...); Redis is its shared cache (service.metadata_log)."""

    enabled: bool = Field(True, description="Keep decoder metadata in the log (false: in Redis only, lost on a flush).")
    topic: str | None = Field(None, description="The topic; default <worker.app_id>.metadata.")
    replication_factor: int = Field(
        -1, ge=-1, description="Of the topic when the worker creates it (1 partition, compacted); -1: the broker's default."
    )
    min_insync_replicas: int | None = Field(
        None,
        ge=1,
        description="The topic's min.insync.replicas when the worker creates it: how many copies a write (acks=all) "
        "needs before it is acknowledged; at most replication_factor. None: the broker's default.",
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        description="Longest wait for a write's acknowledgement or a read to the log's end (then the message is retried).",
    )

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return _check_topic_name(value)

    @field_validator("replication_factor")
    @classmethod
    def _replication(cls, value: int) -> int:
        if value == 0:
            raise ValueError("expected -1 (the broker's default) or at least 1")
        return value

    @model_validator(mode="after")
    def _min_insync_within_replicas(self) -> MetadataLogConfig:
        if self.min_insync_replicas is not None and 0 < self.replication_factor < self.min_insync_replicas:
            raise PydanticCustomError(
                "min_insync_above_replicas",
                "above replication_factor ({replicas}): the broker would refuse every write (NOT_ENOUGH_REPLICAS)",
                {"key": "min_insync_replicas", "replicas": self.replication_factor},
            )
        return self


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
    dlq_topic: str | None = Field(
        None, description="Dead-letter topic (default <prefix>.dlq); errors.deadletterqueue.topic.name."
    )
    errors: ErrorPolicy = Field(
        ErrorPolicy.DLQ, description="dlq: dead-letter and go on; fail: stop. errors.tolerance all | none."
    )
    dlq_context_headers: bool = Field(
        True,
        description="Add the __connect.errors.* context headers to dead letters "
        "(errors.deadletterqueue.context.headers.enable; Connect's default is false).",
    )
    log_errors: bool = Field(
        True,
        description="Log a warning per failed message: topic, partition, offset, error class "
        "(errors.log.enable; Connect's default is false).",
    )
    tombstones: bool = True
    complete_partial_images: bool = False
    row_state: RowStateConfig = Field(default_factory=RowStateConfig)
    transaction_metadata: bool = False
    output: OutputConfig | None = Field(None, description="Key/value converters (service.converters): json, json without schemas, avro.")

    @model_validator(mode="before")
    @classmethod
    def _connect_keys(cls, data: Any) -> Any:
        return _connect_error_keys(data)

    @field_validator("name", "dlq_topic")
    @classmethod
    def _topic_name(cls, value: str | None) -> str | None:
        return _check_topic_name(value)

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
    metadata_log: MetadataLogConfig = Field(default_factory=MetadataLogConfig)
    topics: list[TopicEntry] = Field(min_length=1)
    sink: dict[str, Any] | None = Field(
        None, description="The Iceberg sink (sink.config.SinkConfig); checked by parse_config, not used by the worker."
    )
    # defaults of the topic entries' error handling (Kafka Connect's keys accepted too)
    errors: ErrorPolicy | None = Field(None, description="Default of topics[].errors.")
    dlq_topic: str | None = Field(None, description="Default of topics[].dlq_topic (else <prefix>.dlq).")
    dlq_context_headers: bool | None = Field(None, description="Default of topics[].dlq_context_headers.")
    log_errors: bool | None = Field(None, description="Default of topics[].log_errors.")
    # values that came from ${VAR}/file: references under secret-looking keys (set by parse_config)
    _reference_secrets: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _connect_keys(cls, data: Any) -> Any:
        return _connect_error_keys(data)

    @field_validator("dlq_topic")
    @classmethod
    def _dlq_topic(cls, value: str | None) -> str | None:
        return _check_topic_name(value)

    @model_validator(mode="after")
    def _entry_defaults(self) -> PipelineConfig:
        defaults = {
            key: getattr(self, key)
            for key in ("errors", "dlq_topic", "dlq_context_headers", "log_errors")
            if getattr(self, key) is not None
        }
        if defaults:
            topics = [
                entry.model_copy(update={k: v for k, v in defaults.items() if k not in entry.model_fields_set})
                for entry in self.topics
            ]
            object.__setattr__(self, "topics", topics)  # frozen: set once, while validating
        return self

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

    @property
    def metadata_topic(self) -> str:
        """The metadata log's topic: ``metadata_log.topic``, default ``<worker.app_id>.metadata``
        (a character of the app id that a topic name cannot hold becomes ``_``)."""
        if self.metadata_log.topic is not None:
            return self.metadata_log.topic
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.worker.app_id)[:240] + ".metadata"

    def is_output_topic(self, topic: str) -> bool:
        """True for topics this worker writes (never consumed through a pattern)."""
        prefix = self.topic_prefix
        if topic == prefix or topic.startswith(prefix + "."):
            return True
        if self.metadata_log.enabled and topic == self.metadata_topic:
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

    def secret_values(self) -> list[str]:
        """Every resolved secret of this config (for :class:`SecretRedactor`): the broker's and
        Redis's, the values under secret-looking keys of the sink's passthrough maps, and every
        value that a ``${VAR}``/``file:`` reference under a secret-looking key resolved to
        (``hash.salt: ${MASK_SALT}`` of a transform, a decoder option ...)."""
        values = [*self.broker.secret_values(), *self.redis.secret_values()]
        if self.sink:
            values += [v for _, v in _sink_secret_items(self.sink) if isinstance(v, str)]
        values += self._reference_secrets
        return values

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


# ----------------------------------------------------------------------------- the worker's client

WORKER_GROUP_PROTOCOLS = frozenset({GroupProtocol.CLASSIC})
"""The group protocols of the worker's consumer group member: Faust's aiokafka consumer. aiokafka
(0.14) implements the classic protocol only (JoinGroup, SyncGroup, Heartbeat, LeaveGroup); it has
no KIP-848 ConsumerGroupHeartbeat (API key 68) and no ``group_protocol`` option."""

_WORKER_PROTOCOL_REASON = (
    "the worker cannot join its consumer group (worker.app_id) with it: the worker's consumer is Faust's "
    "aiokafka consumer, which implements only the classic group protocol (no KIP-848 ConsumerGroupHeartbeat); "
    "use classic for the worker. The sink supports consumer: give it its own value, e.g. "
    "group_protocol: ${KAFKA_GROUP_PROTOCOL:-classic} with the variable set for the sink only"
)


def _worker_client_errors(document: _Document) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """What the worker's Kafka client cannot do of a document's valid settings: a
    ``broker.group_protocol`` other than classic (an invalid value is pydantic's to report)."""
    loc = ("broker", "group_protocol")
    value = _lookup(document.doc, loc)
    if value not in {p.value for p in GroupProtocol} or value in {p.value for p in WORKER_GROUP_PROTOCOLS}:
        return []
    reason = _WORKER_PROTOCOL_REASON
    if loc in document.originals:
        reason += f" (from {document.originals[loc]})"
    return [(loc, ConfigError("broker.group_protocol", value, reason))]


def check_worker_client(config: PipelineConfig) -> None:
    """Raise the ConfigError :func:`parse_config` reports for a setting the worker's Kafka client
    cannot honour (for configs built without it: ``PipelineConfig.model_validate``)."""
    protocol = config.broker.group_protocol
    if protocol not in WORKER_GROUP_PROTOCOLS:
        raise ConfigError("broker.group_protocol", protocol.value, _WORKER_PROTOCOL_REASON)


# ----------------------------------------------------------------------------- loading


def _validation_errors(
    exc: ValidationError, document: _Document, prefix: tuple[Any, ...] = ()
) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """Every error of a pydantic ValidationError, as (loc, ConfigError) with the key path (a
    Kafka Connect key as the document spells it)."""
    return validation_errors(exc, document, prefix, _respell)


def _respell(doc: dict[str, Any], loc: tuple[Any, ...], err: Any) -> tuple[Any, ...]:
    if err.get("type") in _KEY_ERRORS:
        loc += (err.get("ctx", {})["key"],)
    return _as_typed(doc, loc)


_OWN_TO_CONNECT = {own: connect for connect, own in CONNECT_ERROR_KEYS.items()}


def _as_typed(doc: dict[str, Any], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` with its last key spelled as the document spells it (a Kafka Connect key)."""
    if loc and loc[-1] in _OWN_TO_CONNECT:
        parent = _lookup(doc, loc[:-1])
        if isinstance(parent, dict) and loc[-1] not in parent and _OWN_TO_CONNECT[loc[-1]] in parent:
            return (*loc[:-1], _OWN_TO_CONNECT[loc[-1]])
    return loc


# The sink's passthrough maps: values under secret-looking keys may be ${ENV} or file: references.
_SINK_SECRET_MAPS = (("catalog", "properties"), ("spark_conf",))


def _sink_secret_items(section: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    for where in _SINK_SECRET_MAPS:
        node: Any = section
        for part in where:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            for key, value in node.items():
                if is_secret_key(str(key)):
                    yield (*where, str(key)), value


def resolve_sink_secrets(section: dict[str, Any]) -> dict[str, Any]:
    """A copy of a ``sink:`` section taken from a parsed config.

    :func:`parse_config` resolves the references of every value, the sink's included, so there is
    nothing left to resolve (resolving again would undo a ``$${`` escape); kept for callers.
    """
    return copy.deepcopy(section)


def _section_errors(name: str, model: type[BaseModel], section: dict[str, Any],
                    document: _Document) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """The problems of a section another part checks (unknown keys, bad values), with
    ``<name>.`` paths."""
    try:
        model.model_validate(section)
    except ValidationError as exc:
        return _validation_errors(exc, document, (name,))
    return []


def _entry_errors(index: int, entry: TopicEntry, prefix: str) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """What pydantic cannot check in a topic entry: the format options (through the decoder)
    and every step of the chain; (loc, ConfigError) pairs."""
    from transforms.decoders import create_decoder

    where = f"topics[{index}]"
    errors: list[tuple[tuple[Any, ...], ConfigError]] = []
    try:
        create_decoder(entry.format, entry.options)
    except ConfigError as exc:
        if exc.key == "format" and exc.value == entry.format:
            errors.append((("topics", index, "format"), ConfigError(f"{where}.format", entry.format, exc.reason)))
        else:
            key = f"{where}.options.{exc.key}"
            errors.append((("topics", index, "options"), ConfigError(key, mask_secrets(key, exc.value), exc.reason)))
    if entry.transforms:
        from transforms.envelope import EmitOptions

        emit_options = EmitOptions(prefix=prefix, topic_template=entry.topic_template)
        for error in _chain_errors(entry.transforms, where, emit_options):
            step = re.match(rf"{re.escape(where)}\.transforms\[(\d+)\]", error.key)
            errors.append((("topics", index, "transforms", int(step.group(1)) if step else 0), error))
    return errors


def _chain_errors(specs: list[dict[str, Any]], where: str, emit_options: Any) -> list[ConfigError]:
    """Every failing step of a chain (the steps are independent: each is built on its own)."""
    from transforms.smt.registry import build_chain

    def at(exc: ConfigError, index: int | None = None) -> ConfigError:
        key = exc.key if exc.key.startswith("transforms") else f"transforms.{exc.key}"
        if index is not None:
            key = re.sub(r"^transforms\[0\]", f"transforms[{index}]", key)
        path = f"{where}.{key}"
        return ConfigError(path, mask_secrets(path, exc.value), exc.reason)

    try:
        build_chain(specs, emit_options=emit_options)
    except ConfigError as first:
        if not isinstance(specs, list):
            return [at(first)]
        errors = []
        for index, spec in enumerate(specs):
            try:
                build_chain([spec], emit_options=emit_options)
            except ConfigError as exc:
                errors.append(at(exc, index))
        return errors or [at(first)]
    return []


def build_chain_checked(specs: list[dict[str, Any]], where: str, emit_options: Any = None) -> Any:
    """``transforms.smt.registry.build_chain(specs)``; ConfigError under the ``where`` key path
    (:class:`ConfigErrors` when several steps fail).

    ``where`` is the topic entry's path (``topics[2]``); the registry's own key
    (``transforms[0].type``) is appended to it.
    """
    errors = _chain_errors(specs, where, emit_options)
    if errors:
        raise errors[0] if len(errors) == 1 else ConfigErrors(errors)
    from transforms.smt.registry import build_chain

    return build_chain(specs, emit_options=emit_options)


def parse_config(raw: Any, *, check_formats: bool = True, for_worker: bool = True,
                 sections: Mapping[str, type[BaseModel]] | None = None) -> PipelineConfig:
    """Validate a parsed YAML document.

    Every problem is reported at once: unresolved references, every pydantic error, those of
    the ``sections`` other parts own (``{"sink": SinkConfig}``, given by the ``cdcnorm``
    command line: the worker's package does not import the sink's), (with ``check_formats``) each topic entry's format options and transform
    steps, and (with ``for_worker``) the settings the worker's Kafka client cannot honour
    (``broker.group_protocol: consumer``; commands that never join a group, ``dlq replay`` and
    ``tail``, pass False). One problem raises a ConfigError naming the key path, the value
    (masked when secret) and the reason; several raise :class:`ConfigErrors` listing each, in
    document order.
    """
    if not isinstance(raw, dict):
        raise ConfigError("<root>", type(raw).__name__, "expected a mapping at the top level")
    document = _resolve_document(raw)
    doc = document.doc
    problems: list[tuple[tuple[Any, ...], ConfigError]] = []
    config: PipelineConfig | None = None
    try:
        config = PipelineConfig.model_validate(doc, context={_RESOLVED: True})
    except ValidationError as exc:
        problems += _validation_errors(exc, document)
    for name, model in (sections or {}).items():
        if isinstance(doc.get(name), dict):
            problems += _section_errors(name, model, doc[name], document)
    if for_worker:
        problems += _worker_client_errors(document)
    if check_formats:
        prefix = config.topic_prefix if config is not None else str(doc.get("topic_prefix", "cdcnorm"))
        for index, entry in _valid_entries(config, doc):
            problems += _entry_errors(index, entry, prefix)
    raise_problems(raw, document, problems)
    assert config is not None
    config._reference_secrets = document.secrets()
    return config


def _valid_entries(config: PipelineConfig | None, doc: dict[str, Any]) -> Iterator[tuple[int, TopicEntry]]:
    """The topic entries whose format options and transforms can be checked: those that pass
    the model, and those that pass it without their failing keys (reported already), so that
    ``errors: explode`` beside an unknown format option reports both in one run."""
    if config is not None:
        yield from enumerate(config.topics)
        return
    entries = doc.get("topics")
    if not isinstance(entries, list):
        return
    for index, raw in enumerate(entries):
        try:
            yield index, TopicEntry.model_validate(raw, context={_RESOLVED: True})
        except ValidationError as exc:
            failing = {err["loc"][0] for err in exc.errors() if err.get("loc")}
            if not isinstance(raw, dict) or not failing:
                continue
            try:  # the failing keys at their defaults: what the rest of the entry says
                yield index, TopicEntry.model_validate({k: v for k, v in raw.items() if k not in failing},
                                                       context={_RESOLVED: True})
            except ValidationError:
                continue


def load_config(path: str | Path, *, check_formats: bool = True, for_worker: bool = True,
                sections: Mapping[str, type[BaseModel]] | None = None) -> PipelineConfig:
    """Read and validate a pipeline YAML file (:func:`parse_config`)."""
    return parse_config(read_yaml(path), check_formats=check_formats, for_worker=for_worker, sections=sections)
