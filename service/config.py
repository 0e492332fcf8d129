"""The pipeline configuration: a YAML file validated into typed models at start-up.

Every string value may hold ``${VAR}``, ``${VAR:-default}`` or ``${VAR:?message}`` references
(POSIX shell semantics, through the ``expandvars`` library; ``$${`` is a literal ``${``) or be a
whole ``file:/path`` reference (outside the ``sink:`` section, where only secret-looking keys
read files); :func:`parse_config` resolves them all before validating (:func:`resolve_reference`).

Every section forbids unknown keys (the ``sink:`` section too, through
:class:`sink.config.SinkConfig`). A bad config stops start-up with a
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
sink, ``tail``), :meth:`BrokerConfig.faust_credentials` / :meth:`BrokerConfig.aiokafka_auth`
(the Faust worker's aiokafka clients) and :meth:`RedisConfig.client_kwargs`
(``service.state.connect_redis``).

>>> cfg = PipelineConfig.model_validate({"topics": [{"name": "src", "format": "canal-json"}]})
>>> cfg.topics[0].output_dlq_topic(cfg.topic_prefix)
'cdcnorm.dlq'
"""

from __future__ import annotations

import copy
import logging
import os
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import expandvars
import orjson
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from service.converters import OutputConfig
from transforms.errors import CdcnormError, ConfigError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "CONNECT_ERROR_KEYS",
    "BrokerConfig",
    "ConfigErrors",
    "ErrorPolicy",
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

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TEMPLATE_FIELDS = frozenset({"prefix", "db", "schema", "table"})
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
_RESOLVED = "cdcnorm.references_resolved"


def resolve_reference(text: str, *, files: bool = True, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with its references resolved; ValueError (naming the variable or file) otherwise.

    * ``${VAR}``, ``${VAR:-default}`` (the default when VAR is unset or empty) and
      ``${VAR:?message}`` anywhere in the string, with POSIX shell semantics (the
      `expandvars <https://pypi.org/project/expandvars/>`_ library); ``$`` not followed by ``{``
      stays as it is (``$1`` in a route replacement, ``$`` in a regex); ``$${`` is a literal ``${``;
    * with ``files``, a whole value ``file:/path`` is the file's content without its trailing
      newline (the path may hold ``${VAR}``).

    A ``${VAR}`` without a default whose variable is not set is an error.

    >>> resolve_reference("jdbc://${CDCNORM_DOCTEST_HOST:-db}:5432/x$${literal}", environ={})
    'jdbc://db:5432/x${literal}'
    >>> resolve_reference("${CDCNORM_DOCTEST_HOST}", environ={})
    Traceback (most recent call last):
    ...
    ValueError: environment variable CDCNORM_DOCTEST_HOST is not set (and the reference gives no default)
    """
    env = _environ() if environ is None else dict(environ)
    if files and text.startswith("file:"):
        path = Path(_expand(text[5:], env)).expanduser()
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

    :func:`parse_config` resolves every string of the document this way before validating it;
    this is for models validated directly (``PipelineConfig.model_validate``).

    >>> os.environ["CDCNORM_DOCTEST_PW"] = "s3cret"
    >>> resolve_secret("${CDCNORM_DOCTEST_PW}")
    's3cret'
    """
    return resolve_reference(value) if isinstance(value, str) else value


def resolve_field(value: Any, info: ValidationInfo) -> Any:
    """A pydantic ``BeforeValidator`` for a field that may hold a reference (``Secret`` here, the
    secrets of other config models): resolves it when the model is validated on its own, passes
    it unchanged under :func:`parse_config`, which resolved every reference already (resolving
    again would undo a ``$${`` escape, or read a secret that starts with ``file:`` as a path)."""
    if isinstance(info.context, dict) and info.context.get(_RESOLVED):
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


class _Section(BaseModel):
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
_KEY_ERRORS = ("connect_key_conflict", "connect_key_value")


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


class BrokerConfig(_Section):
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

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` for this config, or None for PLAINTEXT.

        Faust turns them into the same aiokafka arguments as :meth:`aiokafka_auth`
        (``faust.transport.drivers.aiokafka.credentials_to_aiokafka_auth``).
        """
        if self.security_protocol is SecurityProtocol.PLAINTEXT:
            return None
        import faust

        context = self.ssl_context()
        if not self.uses_sasl:
            return faust.SSLCredentials(context)
        return faust.SASLCredentials(
            username=self.sasl_username,
            password=self.sasl_password.get_secret_value() if self.sasl_password else None,
            ssl_context=context,
            mechanism=self.sasl_mechanism.value if self.sasl_mechanism else None,
        )

    def secret_values(self) -> Iterator[str]:
        for secret in (self.sasl_password, self.ssl_password):
            if secret is not None:
                yield secret.get_secret_value()


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
    """The HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics``."""

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
    commit_interval_s: float = Field(1.0, gt=0)
    output_client: OutputClient = Field(
        OutputClient.LIBRDKAFKA,
        description="Producer of the output: librdkafka (confluent-kafka, C, the default) or aiokafka (Faust's).",
    )
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


@dataclass
class _Document:
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
        return mask_secrets(_path(loc) if loc else "", self._as_written(loc, value))

    def _as_written(self, loc: tuple[Any, ...], value: Any) -> Any:
        if loc in self.originals and is_secret_key(_path(loc)):
            return self.originals[loc]
        if isinstance(value, dict):
            return {k: self._as_written((*loc, k), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._as_written((*loc, i), v) for i, v in enumerate(value)]
        return value

    def secrets(self) -> tuple[str, ...]:
        """What references under secret-looking keys resolved to (for :class:`SecretRedactor`)."""
        found = (_lookup(self.doc, loc) for loc in self.originals if is_secret_key(_path(loc)))
        return tuple(v for v in found if isinstance(v, str) and v)


def _resolve_document(raw: dict[str, Any]) -> _Document:
    """Resolve the references of every string value of ``raw`` (mapping values and list items;
    keys are never resolved).

    ``file:`` references resolve everywhere except in the ``sink:`` section, where only values
    under secret-looking keys are file references: Spark and Iceberg take ``file:`` URIs (a
    ``file:/`` warehouse). A mapping value that is one reference and resolves to the empty string
    (``sasl_mechanism: ${KAFKA_SASL_MECHANISM:-}``) counts as not given: the key's default applies.
    """
    env = _environ()
    out = _Document(raw, {})

    def one(value: str, loc: tuple[Any, ...]) -> str:
        path = _path(loc)
        files = loc[:1] != ("sink",) or is_secret_key(path)
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
                if resolved == "" and value.startswith("${") and value.endswith("}"):
                    continue  # an unset optional setting
                mapping[key] = resolved
            return mapping
        if isinstance(node, list):
            return [one(v, (*loc, i)) if isinstance(v, str) else walk(v, (*loc, i)) for i, v in enumerate(node)]
        return node

    out.doc = walk(raw, ())
    return out


def _validation_errors(
    exc: ValidationError, document: _Document, prefix: tuple[Any, ...] = ()
) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """Every error of a pydantic ValidationError, as (loc, ConfigError) with the key path."""
    out = []
    for err in exc.errors():
        loc = prefix + tuple(err.get("loc", ()))
        if err.get("type") in _KEY_ERRORS:
            loc += (err.get("ctx", {})["key"],)
        loc = _as_typed(document.doc, loc)
        path = _path(loc)
        value = _lookup(document.doc, loc)
        if value is None:
            value = err.get("input")
        reason = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            reason = "unknown key"
        elif err.get("type") == "missing":
            reason = "required key is missing"
        reason = mask_url(reason.removeprefix("Value error, "))
        if loc in document.originals and not is_secret_key(path):
            reason += f" (from {document.originals[loc]})"
        out.append((loc, ConfigError(path, document.shown(loc, value), reason)))
    return out


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


def _sink_errors(section: dict[str, Any], document: _Document) -> list[tuple[tuple[Any, ...], ConfigError]]:
    """The problems of the ``sink:`` section (unknown keys, bad values), with ``sink.`` paths."""
    from sink.config import SinkConfig

    try:
        SinkConfig.model_validate(section)
    except ValidationError as exc:
        return _validation_errors(exc, document, ("sink",))
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


def parse_config(raw: Any, *, check_formats: bool = True) -> PipelineConfig:
    """Validate a parsed YAML document.

    Every problem is reported at once: unresolved references, every pydantic error, the sink
    section's, and (with ``check_formats``) each topic entry's format options and transform
    steps. One problem raises a ConfigError naming the key path, the value (masked when
    secret) and the reason; several raise :class:`ConfigErrors` listing each, in document order.
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
    if isinstance(doc.get("sink"), dict):
        problems += _sink_errors(doc["sink"], document)
    if check_formats:
        prefix = config.topic_prefix if config is not None else str(doc.get("topic_prefix", "cdcnorm"))
        for index, entry in _valid_entries(config, doc):
            problems += _entry_errors(index, entry, prefix)
    # a value whose reference failed is still as written: what fails on it is that failure
    failed = [e.key for _, e in document.errors]
    problems = document.errors + [(loc, e) for loc, e in problems if not any(_under(e.key, f) for f in failed)]
    if problems:
        ranked = sorted(enumerate(problems), key=lambda item: (_document_order(raw, item[1][0]), item[0]))
        errors = [e for _, (_, e) in ranked]
        raise errors[0] if len(errors) == 1 else ConfigErrors(errors)
    assert config is not None
    config._reference_secrets = document.secrets()
    return config


def _valid_entries(config: PipelineConfig | None, doc: dict[str, Any]) -> Iterator[tuple[int, TopicEntry]]:
    """The topic entries that pass the model (those that do not are reported already)."""
    if config is not None:
        yield from enumerate(config.topics)
        return
    entries = doc.get("topics")
    if not isinstance(entries, list):
        return
    for index, raw in enumerate(entries):
        try:
            yield index, TopicEntry.model_validate(raw, context={_RESOLVED: True})
        except ValidationError:
            continue


def _document_order(raw: Any, loc: tuple[Any, ...]) -> tuple[int, ...]:
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


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith((parent + ".", parent + "["))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The YAML error without the excerpt of the document (which may hold a secret)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f"{exc.context}, " if exc.context else ""
        return f"{context}{exc.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return type(exc).__name__


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
        raise ConfigError("<file>", str(p), f"not valid YAML: {_yaml_problem(exc)}") from None
    return parse_config(raw if raw is not None else {}, check_formats=check_formats)
