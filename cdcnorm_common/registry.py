"""The Confluent Schema Registry: where it is, how to authenticate, its client, and whether a
failed call is the registry's outage (retried, never dead-lettered) or the schema's fault.

The worker's Avro converter (:mod:`service.converters`) registers schemas with it; the sink
(:mod:`sink.changes`) reads Avro-encoded normalized records through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from transforms.configfile import ExistingFile, Resolved, Secret
from transforms.errors import StateStoreError

__all__ = ["SchemaRegistrySettings", "SchemaRegistryUnavailable", "is_registry_outage", "registry_client"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@")


class SchemaRegistrySettings(_Model):
    """Where the Confluent Schema Registry is and how to authenticate to it.

    ``url`` may list several URLs (comma-separated, tried in order); ``mock://<scope>`` is
    confluent-kafka's in-memory registry (tests). Authentication is one of: basic auth
    (``username``/``password``: Connect's ``basic.auth.user.info``), a static ``bearer_token``, or
    OAuth client credentials (``oauth_*``); bearer and OAuth need ``bearer_logical_cluster``
    (confluent-kafka sends it as ``target-sr-cluster``). TLS: ``ssl_cafile`` (else the system CAs),
    ``ssl_certfile``/``ssl_keyfile`` (+ ``ssl_key_password``) for a client certificate. Secrets may
    be literal, ``${ENV_VAR}`` or ``file:/path``.
    """

    url: str = Field(validation_alias=AliasChoices("url", "schema.registry.url"))
    username: Resolved | None = None
    password: Secret | None = None
    bearer_token: Secret | None = None
    bearer_logical_cluster: str | None = None
    bearer_identity_pool_id: str | None = None
    oauth_client_id: Resolved | None = None
    oauth_client_secret: Secret | None = None
    oauth_scope: str | None = None
    oauth_token_endpoint_url: str | None = None
    ssl_cafile: ExistingFile | None = None
    ssl_certfile: ExistingFile | None = None
    ssl_keyfile: ExistingFile | None = None
    ssl_key_password: Secret | None = None
    timeout_s: float = Field(5.0, gt=0, description="Per request; the worker's loop waits this long at most.")
    max_retries: int = Field(1, ge=0, description="confluent-kafka's own retries of a failed request.")
    cache_capacity: int = Field(1000, gt=0, description="Schemas the client keeps.")

    @field_validator("url")
    @classmethod
    def _urls(cls, value: str) -> str:
        urls = [u.strip() for u in value.split(",") if u.strip()]
        if not urls:
            raise ValueError("expected a URL")
        for url in urls:
            if not url.startswith(("http://", "https://", "mock://")):
                raise ValueError(f"expected http://, https:// or mock:// URLs, found {url.split('://')[0]}://...")
            if _URL_USERINFO.match(url):
                raise ValueError("no credentials in the URL: use username and password")
        return ",".join(urls)

    @model_validator(mode="after")
    def _consistent(self) -> SchemaRegistrySettings:
        basic = self.username is not None or self.password is not None
        oauth_keys = ("oauth_client_id", "oauth_client_secret", "oauth_scope", "oauth_token_endpoint_url")
        oauth = [k for k in oauth_keys if getattr(self, k) is not None]
        if basic and (self.username is None or self.password is None):
            raise ValueError("basic auth needs both username and password")
        kinds = [k for k, on in (("basic auth", basic), ("bearer_token", self.bearer_token is not None), ("oauth", bool(oauth))) if on]
        if len(kinds) > 1:
            raise ValueError(f"choose one authentication, found {' and '.join(kinds)}")
        if oauth and len(oauth) != len(oauth_keys):
            missing = [k for k in oauth_keys if k not in oauth]
            raise ValueError(f"OAuth needs {', '.join(missing)} too")
        if (self.bearer_token is not None or oauth) and not self.bearer_logical_cluster:
            raise ValueError("bearer and OAuth authentication need bearer_logical_cluster")
        if (self.ssl_keyfile is not None or self.ssl_key_password is not None) and self.ssl_certfile is None:
            raise ValueError("ssl_keyfile and ssl_key_password need ssl_certfile (the client certificate)")
        return self

    def client_config(self) -> dict[str, Any]:
        """The ``SchemaRegistryClient`` configuration (secrets resolved: do not log it)."""
        conf: dict[str, Any] = {
            "url": self.url,
            "timeout": self.timeout_s,
            "max.retries": self.max_retries,
            "retries.wait.ms": 200,
            "retries.max.wait.ms": 1000,
            "cache.capacity": self.cache_capacity,
        }
        if self.username is not None and self.password is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password.get_secret_value()}"
        if self.bearer_token is not None:
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = self.bearer_token.get_secret_value()
        if self.oauth_client_secret is not None:
            conf["bearer.auth.credentials.source"] = "OAUTHBEARER"
            conf["bearer.auth.client.id"] = self.oauth_client_id
            conf["bearer.auth.client.secret"] = self.oauth_client_secret.get_secret_value()
            conf["bearer.auth.scope"] = self.oauth_scope
            conf["bearer.auth.issuer.endpoint.url"] = self.oauth_token_endpoint_url
        if self.bearer_logical_cluster is not None:
            conf["bearer.auth.logical.cluster"] = self.bearer_logical_cluster
        if self.bearer_identity_pool_id is not None:
            conf["bearer.auth.identity.pool.id"] = self.bearer_identity_pool_id
        if self.ssl_cafile is not None:
            conf["ssl.ca.location"] = str(self.ssl_cafile)
        if self.ssl_certfile is not None:
            conf["ssl.certificate.location"] = str(self.ssl_certfile)
        if self.ssl_keyfile is not None:
            conf["ssl.key.location"] = str(self.ssl_keyfile)
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return conf

    def secret_values(self) -> Iterator[str]:
        """The resolved secrets (for ``service.config.SecretRedactor``)."""
        for secret in (self.password, self.bearer_token, self.oauth_client_secret, self.ssl_key_password):
            if secret is not None:
                yield secret.get_secret_value()



class SchemaRegistryUnavailable(StateStoreError):
    """The schema registry cannot be reached (or refuses the credentials): retry, never dead-letter."""


_OUTAGE_STATUS = frozenset({401, 403, 408, 429})


def is_registry_outage(exc: BaseException) -> bool:
    """Whether a registry call failed for the registry's sake (unreachable, overloaded, 5xx,
    credentials refused) rather than for the schema's (incompatible, invalid: 409, 422)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        return status is None or status < 0 or status >= 500 or status in _OUTAGE_STATUS
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    module = type(exc).__module__.split(".")[0]
    return module in ("httpx", "httpx2", "httpcore", "httpcore2", "authlib", "ssl")


def registry_client(settings: SchemaRegistrySettings) -> Any:
    """A confluent-kafka ``SchemaRegistryClient`` (the in-memory mock for ``mock://`` URLs)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient.new_client(settings.client_config())
