"""The pieces of a pipeline config file that every cdcnorm process reads, worker and sink alike.

* references in values: ``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}`` and whole
  ``file:/path`` values (:func:`resolve_reference`, :func:`resolve_document`);
* secrets: which keys hold them (:func:`is_secret_key`), masking them in errors and reprs
  (:func:`mask_secrets`, :func:`mask_url`), and :class:`SecretRedactor` for log records;
* the ``broker:`` section (:class:`BrokerConfig`), which the worker and the sink both connect with;
* reading a YAML file (:func:`read_yaml`) and reporting every problem of a document at once,
  with key paths and masked values (:func:`validation_errors`, :func:`raise_problems`,
  :class:`ConfigErrors`).

Both ``service.config`` (the worker's :class:`~service.config.PipelineConfig`) and the sink
(``sink.main.load_sink_config``) build on this module; it imports neither, so neither side's
imports cycle through the other.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import expandvars
import orjson
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from transforms.errors import CdcnormError, ConfigError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "CLASSIC_GROUP_PROPERTIES",
    "MASK",
    "REFERENCES_RESOLVED",
    "BrokerConfig",
    "ConfigErrors",
    "Document",
    "ExistingFile",
    "GroupProtocol",
    "Resolved",
    "SaslMechanism",
    "Secret",
    "SecretRedactor",
    "Section",
    "SecurityProtocol",
    "document_order",
    "format_config_error",
    "group_member_conf",
    "is_secret_key",
    "key_path",
    "lookup",
    "mask_secrets",
    "mask_url",
    "raise_problems",
    "read_yaml",
    "resolve_document",
    "resolve_field",
    "resolve_reference",
    "resolve_secret",
    "under_key",
    "validation_errors",
]

# Key names whose values are secrets: masked in errors, resolved from ${ENV}/file: in the sink's
# passthrough maps. Matched anywhere in a key path (over-masking is harmless), typos included
# (`sasl_pasword` is an unknown key whose value is still a password).
_SECRET_KEY = re.compile(
    r"pass|pa?s+w|pwd|(^|[._-])pw($|[._-])|secret|token|credential|salt|jaas"
    r"|private[._-]?key|api[._-]?key|access[._-]?key",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*):(?P<pw>[^@/\s]+)@")
MASK = "***"
# `$${` in a value is a literal `${`
_ESCAPED_REFERENCE = "$${"
# one reference and nothing else (what an error may show, with the default masked)
_PLAIN_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-=+?])[^{}]*)?\}")
# validation context key: the document's references are resolved already
REFERENCES_RESOLVED = "cdcnorm.references_resolved"


def resolve_reference(text: str, *, files: bool = True, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with its references resolved; ValueError (naming the variable or file) otherwise.

    * ``${VAR}``, ``${VAR:-default}`` (the default when VAR is unset or empty) and
      ``${VAR:?message}`` anywhere in the string, with POSIX shell semantics (the
      `expandvars <https://pypi.org/project/expandvars/>`_ library); ``$`` not followed by ``{``
      stays as it is (``$1`` in a route replacement, ``$`` in a regex); ``$${`` is a literal ``${``;
    * with ``files``, a whole value ``file:/path`` is the file's content without its trailing
      newline (the path may hold ``${VAR}``); a path that resolves to nothing
      (``file:${PASSWORD_FILE:-}`` with the variable unset or empty) is the empty string, which
      :func:`resolve_document` reads as a setting not given.

    A ``${VAR}`` without a default whose variable is not set is an error.

    >>> resolve_reference("jdbc://${CDCNORM_DOCTEST_HOST:-db}:5432/x$${literal}", environ={})
    'jdbc://db:5432/x${literal}'
    >>> resolve_reference("${CDCNORM_DOCTEST_HOST}", environ={})
    Traceback (most recent call last):
    ...
    ValueError: environment variable CDCNORM_DOCTEST_HOST is not set (and the reference gives no default)
    >>> resolve_reference("file:${CDCNORM_DOCTEST_PW_FILE:-}", environ={})
    ''
    """
    env = _environ() if environ is None else dict(environ)
    if files and text.startswith("file:"):
        named = _expand(text[5:], env)
        if not named:
            return ""
        path = Path(named).expanduser()
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"cannot read file {path}: {exc.strerror}") from exc
    return _expand(text, env)


def _environ() -> dict[str, str]:
    env = dict(os.environ)
    # expandvars would otherwise turn every unset variable into this value instead of an error
    env.pop("EXPANDVARS_RECOVER_NULL", None)
    return env


def _expand(text: str, env: dict[str, str]) -> str:
    if "${" not in text:
        return text
    # `$${` is a literal `${`; expandvars's own escape (a backslash) would eat the backslashes of
    # regular expressions, so it is switched off
    parts = text.split(_ESCAPED_REFERENCE)
    out = []
    for part in parts:
        try:
            out.append(expandvars.expand(part, nounset=True, environ=env, surrounded_vars_only=True, escape_char=""))
        except expandvars.UnboundVariable as exc:
            name = str(exc.args[0] if exc.args else "").rsplit(": ", 1)[0]
            raise ValueError(f"environment variable {name} is not set (and the reference gives no default)") from None
        except expandvars.ParameterNullOrNotSet as exc:
            name, _, message = str(exc.args[0] if exc.args else "").partition(": ")
            raise ValueError(f"environment variable {name} is not set or empty: {message}") from None
        except expandvars.ExpandvarsException:
            raise ValueError("not a valid ${...} reference (a literal ${ is written $${)") from None
    return "${".join(out)


def resolve_secret(value: Any) -> Any:
    """``value`` with its ``${ENV_VAR}`` / ``file:/path`` references resolved (non-strings pass).

    :func:`resolve_document` (under ``service.config.parse_config`` and the sink's loader) resolves
    every string of a document this way before validating it; this is for models validated
    directly (``PipelineConfig.model_validate``).

    >>> os.environ["CDCNORM_DOCTEST_PW"] = "s3cret"
    >>> resolve_secret("${CDCNORM_DOCTEST_PW}")
    's3cret'
    """
    return resolve_reference(value) if isinstance(value, str) else value


def resolve_field(value: Any, info: ValidationInfo) -> Any:
    """A pydantic ``BeforeValidator`` for a field that may hold a reference (``Secret`` here, the
    secrets of other config models): resolves it when the model is validated on its own, passes
    it unchanged under :func:`resolve_document`, which resolved every reference already (resolving
    again would undo a ``$${`` escape, or read a secret that starts with ``file:`` as a path)."""
    if isinstance(info.context, dict) and info.context.get(REFERENCES_RESOLVED):
        return value
    return resolve_secret(value)


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("${", "file:"))


def _masked_reference(value: str) -> str:
    """A reference as an error may show it under a secret key: defaults masked, literals masked.

    >>> _masked_reference("${KAFKA_PW:-hunter2}"), _masked_reference("file:/run/pw"), _masked_reference("x${A}")
    ('${KAFKA_PW:-***}', 'file:/run/pw', '***')
    """
    if value.startswith("file:"):
        return value
    match = _PLAIN_REFERENCE.fullmatch(value)
    if match is None:
        return MASK
    return f"${{{match.group('name')}{match.group('op') or ''}{MASK if match.group('op') else ''}}}"


def is_secret_key(path: str) -> bool:
    """True when a key path looks like it holds a secret (password, token, salt, ...).

    >>> is_secret_key("broker.sasl_password"), is_secret_key("sink.spark_conf.spark.hadoop.fs.s3a.secret.key")
    (True, True)
    >>> is_secret_key("topics[0].options.key.columns")
    False
    """
    return _SECRET_KEY.search(path) is not None


def mask_url(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by ``***``.

    >>> mask_url("rediss://app:hunter2@cache:6380/0")
    'rediss://app:***@cache:6380/0'
    """
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:{MASK}@", text)


def mask_secrets(path: str, value: Any) -> Any:
    """``value`` (found at key ``path``) safe to print: secrets become ``***``.

    Values under a secret-looking key are masked unless they are a ``${ENV}`` or ``file:``
    reference (those name where the secret is, which is what an error must show); mappings
    and lists are masked recursively; passwords inside URLs are masked everywhere.

    >>> mask_secrets("broker", {"sasl_username": "u", "sasl_password": "pw", "ssl_password": "${KEY_PW}"})
    {'sasl_username': 'u', 'sasl_password': '***', 'ssl_password': '${KEY_PW}'}
    """
    if value is None or (isinstance(value, bool | int | float) and not is_secret_key(path)):
        return value
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, dict):
        return {k: mask_secrets(f"{path}.{k}" if path else str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(f"{path}[{i}]", v) for i, v in enumerate(value)]
    if is_secret_key(path):
        return _masked_reference(value) if _is_reference(value) else MASK
    if isinstance(value, str):
        return mask_url(value)
    return value


Secret = Annotated[SecretStr, BeforeValidator(resolve_field)]


def _existing_file(value: Path) -> Path:
    if not value.is_file():
        raise ValueError(f"file {value} does not exist")
    return value


ExistingFile = Annotated[Path, AfterValidator(_existing_file)]
"""A path that must name an existing file (TLS CA, certificate and key files)."""
# Not secret, but usually delivered with the secret (e.g. a Kubernetes Secret's `username`).
Resolved = Annotated[str, BeforeValidator(resolve_field)]


class SecretRedactor:
    """Replaces known secret values with ``***`` in every log record built in this process.

    A defence in depth: nothing in cdcnorm logs a secret on purpose, but a library might log
    a client configuration or echo a credential in an error. :meth:`install` wraps the
    logging record factory, so it covers every logger and every handler (also ones set up
    later, e.g. by Faust), at every level. Values shorter than 4 characters are not
    redacted (they would mangle ordinary text).

    >>> redactor = SecretRedactor(["hunter2"])
    >>> redactor.redact("login with hunter2 failed")
    'login with *** failed'
    """

    _installed: SecretRedactor | None = None

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def install(self) -> None:
        """Redact records of this process from now on (idempotent; adds to earlier secrets)."""
        current = SecretRedactor._installed
        if current is not None:
            current.secrets = sorted(set(current.secrets) | set(self.secrets), key=len, reverse=True)
            return
        SecretRedactor._installed = self
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            self._scrub(record)
            return record

        logging.setLogRecordFactory(factory)

    def _scrub(self, record: logging.LogRecord) -> None:
        if not self.secrets:
            return
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to the handler to report
            return
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            clean = self.redact(text)
            if clean != text:
                record.exc_text = clean


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def __repr_args__(self) -> Any:
        # repr()/str() mask secret-looking keys inside free-form maps (options, transforms,
        # sink) and passwords in URLs; SecretStr fields mask themselves.
        for name, value in super().__repr_args__():
            yield name, (mask_secrets(str(name), value) if isinstance(value, dict | list | str) else value)

    @model_serializer(mode="wrap", when_used="json")
    def _masked_json(self, handler: SerializerFunctionWrapHandler) -> Any:
        # JSON dumps are for printing: mask like repr (python-mode dumps stay data)
        return mask_secrets("", handler(self))


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


class GroupProtocol(StrEnum):
    """The consumer group protocol a group member joins with (Kafka's ``group.protocol``).

    ``classic``: JoinGroup/SyncGroup/Heartbeat, the assignment computed by a member; every
    broker. ``consumer``: KIP-848's ConsumerGroupHeartbeat, the assignment computed by the
    broker, incremental rebalances; Apache Kafka 4.0+ with ``consumer`` in the broker's
    ``group.coordinator.rebalance.protocols`` (its default).
    """

    CLASSIC = "classic"
    CONSUMER = "consumer"


CLASSIC_GROUP_PROPERTIES = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy",
                            "group.protocol.type")
"""librdkafka consumer properties of the classic protocol only: with ``group.protocol=consumer``
librdkafka refuses to create a consumer that sets any of them (``rd_kafka_conf_finalize``); the
broker owns them there (``group.consumer.session.timeout.ms``,
``group.consumer.heartbeat.interval.ms``, ``group.consumer.assignors``)."""


def group_member_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The librdkafka settings of a consumer that joins its group (``subscribe``): ``conf`` with
    ``group.protocol`` always set (``classic`` unless ``conf`` says otherwise: librdkafka's
    default is announced to change to ``consumer``), and under ``consumer`` without
    :data:`CLASSIC_GROUP_PROPERTIES`, so one set of defaults serves both protocols.

    >>> group_member_conf({"group.protocol": "consumer", "session.timeout.ms": 6000, "group.id": "g"})
    {'group.protocol': 'consumer', 'group.id': 'g'}
    >>> group_member_conf({"session.timeout.ms": 6000})["group.protocol"]
    'classic'
    """
    protocol = GroupProtocol(str(conf.get("group.protocol", GroupProtocol.CLASSIC.value)))
    out = {"group.protocol": protocol.value, **{k: v for k, v in conf.items() if k != "group.protocol"}}
    if protocol is GroupProtocol.CONSUMER:
        for key in CLASSIC_GROUP_PROPERTIES:
            out.pop(key, None)
    return out


class BrokerConfig(Section):
    """Where the Kafka cluster is and how to authenticate to it (SASL and/or TLS).

    ``security_protocol`` decides what is used: ``SSL`` and ``SASL_SSL`` verify the broker
    certificate (against ``ssl_cafile``, else the system CA bundle) and may present a client
    certificate; ``SASL_*`` needs ``sasl_mechanism``, ``sasl_username`` and ``sasl_password``.
    Settings that the protocol would ignore are rejected, so a config never looks more
    secure than it is.
    """

    bootstrap_servers: list[str] = Field(default_factory=lambda: ["127.0.0.1:9092"], min_length=1)
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: Resolved | None = None
    sasl_password: Secret | None = None
    ssl_cafile: ExistingFile | None = None
    ssl_certfile: ExistingFile | None = None
    ssl_keyfile: ExistingFile | None = None
    ssl_password: Secret | None = Field(None, description="Password of an encrypted ssl_keyfile.")
    ssl_check_hostname: bool = Field(True, description="Check that the broker certificate names the host.")
    client_id: str = "cdcnorm"
    session_timeout_s: float = Field(
        10.0,
        gt=0,
        description="The worker's consumer-group session timeout (classic protocol); joins take about half of it on "
        "Tansu. Under group_protocol consumer the broker's group.consumer.session.timeout.ms applies instead.",
    )
    heartbeat_interval_s: float = Field(1.0, gt=0, description="The worker's heartbeat interval (classic protocol).")
    group_protocol: GroupProtocol = Field(
        GroupProtocol.CLASSIC,
        description="The consumer group protocol of the group members that support both: classic, or consumer "
        "(KIP-848; Apache Kafka 4.0+ with consumer in group.coordinator.rebalance.protocols). The sink's driver "
        "joins sink.group_id with it (confluent-kafka). The worker's consumer (Faust on aiokafka) has only the "
        "classic protocol: the worker and validate-config refuse consumer. Clients that never join a group "
        "(dlq replay, tail, the metadata log, the sink's read tasks) are not affected.",
    )

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

    @model_validator(mode="after")
    def _consistent(self) -> BrokerConfig:
        protocol = self.security_protocol
        sasl = protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
        tls = protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)
        if sasl:
            if self.sasl_mechanism is None:
                raise ValueError(f"sasl_mechanism is required with security_protocol {protocol}")
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError("sasl_username and sasl_password are required with SASL")
        else:
            given = [k for k in ("sasl_mechanism", "sasl_username", "sasl_password") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} set but security_protocol is {protocol}: use SASL_SSL or SASL_PLAINTEXT"
                )
        if not tls:
            given = [k for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} set but security_protocol is {protocol}: use SSL or SASL_SSL")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile needs ssl_certfile (the client certificate)")
        if self.ssl_password is not None and self.ssl_certfile is None:
            raise ValueError("ssl_password needs ssl_certfile/ssl_keyfile (it unlocks the client key)")
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(self.bootstrap_servers)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    def describe_security(self) -> str:
        """A printable summary without secrets, e.g. ``SASL_SSL SCRAM-SHA-512 user=cdcnorm``."""
        parts = [self.security_protocol.value]
        if self.uses_sasl and self.sasl_mechanism is not None:
            parts += [self.sasl_mechanism.value, f"user={self.sasl_username}"]
        if self.uses_tls:
            parts.append(f"ca={self.ssl_cafile or 'system'}")
            if self.ssl_certfile:
                parts.append("client-cert")
            if not self.ssl_check_hostname:
                parts.append("no-hostname-check")
        return " ".join(parts)

    def librdkafka(self) -> dict[str, Any]:
        """The same settings for a confluent-kafka client (the sink, ``tail``, admin)."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol.value,
            "client.id": self.client_id,
        }
        if self.uses_sasl and self.sasl_mechanism is not None:
            conf["sasl.mechanism"] = self.sasl_mechanism.value
            conf["sasl.username"] = self.sasl_username
            conf["sasl.password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
        if self.uses_tls:
            if self.ssl_cafile:
                conf["ssl.ca.location"] = str(self.ssl_cafile)
            if self.ssl_certfile:
                conf["ssl.certificate.location"] = str(self.ssl_certfile)
            if self.ssl_keyfile:
                conf["ssl.key.location"] = str(self.ssl_keyfile)
            if self.ssl_password:
                conf["ssl.key.password"] = self.ssl_password.get_secret_value()
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_check_hostname else "none"
        return conf

    def librdkafka_group_member(self) -> dict[str, Any]:
        """:meth:`librdkafka` plus ``group.protocol``: the settings of a confluent-kafka consumer
        that joins a group with ``subscribe`` (the sink's driver). Its timeouts are the caller's;
        :func:`group_member_conf` leaves out those the consumer protocol refuses."""
        return {**self.librdkafka(), "group.protocol": self.group_protocol.value}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of the aiokafka clients (None without TLS).

        Raises ConfigError (key ``broker.ssl_certfile``) when the client certificate or key
        cannot be loaded, e.g. a wrong ``ssl_password``; the message never holds the password.
        """
        if not self.uses_tls:
            return None
        import ssl

        context = ssl.create_default_context(cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            try:
                context.load_cert_chain(
                    str(self.ssl_certfile),
                    str(self.ssl_keyfile) if self.ssl_keyfile else None,
                    self.ssl_password.get_secret_value() if self.ssl_password else None,
                )
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    "broker.ssl_certfile", str(self.ssl_certfile), f"cannot load the client certificate/key: {exc}"
                ) from None
        return context

    def aiokafka_auth(self) -> dict[str, Any]:
        """Keyword arguments of an aiokafka client (``AIOKafkaConsumer(**auth, ...)``)."""
        auth: dict[str, Any] = {"security_protocol": self.security_protocol.value}
        if self.uses_tls:
            auth["ssl_context"] = self.ssl_context()
        if self.uses_sasl and self.sasl_mechanism is not None:
            auth["sasl_mechanism"] = self.sasl_mechanism.value
            auth["sasl_plain_username"] = self.sasl_username
            auth["sasl_plain_password"] = self.sasl_password.get_secret_value() if self.sasl_password else None
        return auth

    def secret_values(self) -> Iterator[str]:
        for secret in (self.sasl_password, self.ssl_password):
            if secret is not None:
                yield secret.get_secret_value()


# ----------------------------------------------------------------------------- documents


def key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def lookup(raw: Any, loc: tuple[Any, ...]) -> Any:
    node = raw
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


@dataclass
class Document:
    """A config document with every ``${VAR}``/``file:`` reference resolved.

    ``originals`` maps the key path (a loc tuple) of every value that resolution changed or
    dropped to the value as written; ``errors`` are the references that could not be resolved
    (those values stay as written).
    """

    raw: dict[str, Any]
    doc: dict[str, Any]
    originals: dict[tuple[Any, ...], str] = field(default_factory=dict)
    errors: list[tuple[tuple[Any, ...], ConfigError]] = field(default_factory=list)

    def shown(self, loc: tuple[Any, ...], value: Any) -> Any:
        """``value`` (found at ``loc`` in ``doc``) safe to print: a secret that came from a
        reference shows as that reference, every other secret as ``***``."""
        return mask_secrets(key_path(loc) if loc else "", self._as_written(loc, value))

    def _as_written(self, loc: tuple[Any, ...], value: Any) -> Any:
        if loc in self.originals and is_secret_key(key_path(loc)):
            return self.originals[loc]
        if isinstance(value, dict):
            return {k: self._as_written((*loc, k), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._as_written((*loc, i), v) for i, v in enumerate(value)]
        return value

    def secrets(self) -> tuple[str, ...]:
        """What references under secret-looking keys resolved to (for :class:`SecretRedactor`)."""
        found = (lookup(self.doc, loc) for loc in self.originals if is_secret_key(key_path(loc)))
        return tuple(v for v in found if isinstance(v, str) and v)


def resolve_document(raw: dict[str, Any]) -> Document:
    """Resolve the references of every string value of ``raw`` (mapping values and list items;
    keys are never resolved).

    ``file:`` references resolve everywhere except in the ``sink:`` section, where only values
    under secret-looking keys are file references: Spark and Iceberg take ``file:`` URIs (a
    ``file:/`` warehouse). A mapping value that is one reference and resolves to the empty string
    (``sasl_mechanism: ${KAFKA_SASL_MECHANISM:-}``) counts as not given: the key's default applies;
    so does a file reference whose path resolves to nothing (``sasl_password:
    file:${KAFKA_SASL_PASSWORD_FILE:-}`` where the variable is unset), which lets one config read a
    secret from a mounted file where the pod sets the variable and go without it elsewhere.
    """
    env = _environ()
    out = Document(raw, {})

    def reads_files(loc: tuple[Any, ...]) -> bool:
        return loc[:1] != ("sink",) or is_secret_key(key_path(loc))

    def unset(value: str, resolved: str, loc: tuple[Any, ...]) -> bool:
        """``value`` is a reference that resolved to nothing: a setting not given."""
        if resolved != "":
            return False
        if value.startswith("${") and value.endswith("}"):
            return True
        return value.startswith("file:") and reads_files(loc) and resolve_reference(value[5:], files=False, environ=env) == ""

    def one(value: str, loc: tuple[Any, ...]) -> str:
        path = key_path(loc)
        files = reads_files(loc)
        try:
            resolved = resolve_reference(value, files=files, environ=env)
        except ValueError as exc:
            out.errors.append((loc, ConfigError(path, mask_secrets(path, value), str(exc))))
            return value
        if resolved != value:
            out.originals[loc] = value
        return resolved

    def walk(node: Any, loc: tuple[Any, ...]) -> Any:
        if isinstance(node, dict):
            mapping: dict[Any, Any] = {}
            for key, value in node.items():
                here = (*loc, key)
                if not isinstance(value, str):
                    mapping[key] = walk(value, here)
                    continue
                resolved = one(value, here)
                if unset(value, resolved, here):
                    continue  # an unset optional setting
                mapping[key] = resolved
            return mapping
        if isinstance(node, list):
            return [one(v, (*loc, i)) if isinstance(v, str) else walk(v, (*loc, i)) for i, v in enumerate(node)]
        return node

    out.doc = walk(raw, ())
    return out


def validation_errors(
    exc: ValidationError,
    document: Document,
    prefix: tuple[Any, ...] = (),
    respell: Callable[[dict[str, Any], tuple[Any, ...], Any], tuple[Any, ...]] | None = None,
) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """Every error of a pydantic ValidationError, as (loc, ConfigError) with the key path.

    ``respell(doc, loc, error)`` may turn a model's key path into the one the document spells (an
    alias, a key named by the error itself).
    """
    out = []
    for err in exc.errors():
        loc = prefix + tuple(err.get("loc", ()))
        if respell is not None:
            loc = respell(document.doc, loc, err)
        path = key_path(loc)
        value = lookup(document.doc, loc)
        if value is None:
            value = err.get("input")
        reason = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            reason = "unknown key"
        elif err.get("type") == "missing":
            reason = "required key is missing"
            value = "(not set)"  # the error's input is the section that lacks it, not a value of the key
        reason = mask_url(reason.removeprefix("Value error, "))
        if loc in document.originals and not is_secret_key(path):
            reason += f" (from {document.originals[loc]})"
        out.append((loc, ConfigError(path, document.shown(loc, value), reason)))
    return out


def format_config_error(error: ConfigError) -> str:
    """One error as a line: ``key=value: reason`` (a value that is not a string as JSON).

    >>> format_config_error(ConfigError("topics[1].format", "foo", "unknown format"))
    'topics[1].format=foo: unknown format'
    """
    value = error.value if isinstance(error.value, str) else orjson.dumps(error.value, default=str).decode()
    return f"{error.key}={value}: {error.reason}"


class ConfigErrors(ConfigError):
    """Every problem of one config, found in one pass; ``errors`` lists them in document order.

    ``key`` and ``value`` are the first error's; ``reason`` is its reason followed by one
    ``key=value: reason`` line per further error, so code that prints a ConfigError as
    ``f"{key}={value}: {reason}"`` prints the whole list, one error per line.

    >>> errors = ConfigErrors([ConfigError("a", 1, "bad"), ConfigError("b", "x", "worse")])
    >>> print(f"{errors.key}={errors.value}: {errors.reason}")
    a=1: bad
    b=x: worse
    """

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        self.errors = list(errors)
        if not self.errors:
            raise ValueError("ConfigErrors needs at least one error")
        first = self.errors[0]
        self.key, self.value = first.key, first.value
        self.reason = "\n".join([first.reason, *(format_config_error(e) for e in self.errors[1:])])
        lines = "\n".join(f"  {format_config_error(e)}" for e in self.errors)
        CdcnormError.__init__(self, f"invalid config: {len(self.errors)} errors\n{lines}")

    def __reduce__(self) -> Any:
        return (type(self), (self.errors,))


def document_order(raw: Any, loc: tuple[Any, ...]) -> tuple[int, ...]:
    """Where ``loc`` is in the document: the position of each of its keys (or list indexes)
    as far as the document has them; a root-level problem comes last."""
    if not loc:
        return (len(raw) if isinstance(raw, dict) else 0,)
    order = []
    node = raw
    for part in loc:
        if isinstance(node, dict):
            keys = list(node)
            order.append(keys.index(part) if part in keys else len(keys))
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int):
            order.append(part)
            node = node[part] if 0 <= part < len(node) else None
        else:
            break
    return tuple(order)


def under_key(path: str, parent: str) -> bool:
    return path == parent or path.startswith((parent + ".", parent + "["))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The YAML error without the excerpt of the document (which may hold a secret)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f"{exc.context}, " if exc.context else ""
        return f"{context}{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return type(exc).__name__


def raise_problems(raw: Any, document: Document, problems: list[tuple[tuple[Any, ...], ConfigError]]) -> None:
    """Raise the problems of a document, if any, in document order: one ConfigError, or
    :class:`ConfigErrors` listing each. A value whose reference failed is still as written, so
    what fails on it is that failure: other problems under that key are dropped."""
    failed = [e.key for _, e in document.errors]
    problems = document.errors + [(loc, e) for loc, e in problems if not any(under_key(e.key, f) for f in failed)]
    if problems:
        ranked = sorted(enumerate(problems), key=lambda item: (document_order(raw, item[1][0]), item[0]))
        errors = [e for _, (_, e) in ranked]
        raise errors[0] if len(errors) == 1 else ConfigErrors(errors)


def read_yaml(path: str | Path) -> Any:
    """The parsed YAML document of a config file (``{}`` for an empty file); ConfigError
    (key ``<file>``) when it cannot be read or is not YAML, without an excerpt of the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("<file>", str(p), f"cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:  # a binary file, or another encoding
        raise ConfigError("<file>", str(p), f"not UTF-8 text (byte {exc.start}): a config is a YAML file") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", str(p), f"not valid YAML: {_yaml_problem(exc)}") from None
    return raw if raw is not None else {}
