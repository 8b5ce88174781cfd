"""Settings shared by every service; each service subclasses with its own env prefix."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engram_core.profiles import PROFILES

# Most items (memories, ids, updates) one store RPC takes: vector's fixed limit and the
# default `max_batch` of lexical and graph. Workers that batch writes stay under it.
STORE_MAX_ITEMS = 1000
# Vector SearchMany: most filters one call takes, and most hits it may return over all of
# them (limit x filters), so a reply stays a few MB. The gateway's context step keeps under.
SEARCH_MANY_MAX_FILTERS = 32
SEARCH_MANY_MAX_HITS = 4000

C = TypeVar("C")


def as_config(model: BaseModel, cls: type[C], /, **given: Any) -> C:
    """The config dataclass ``cls`` of a nested settings model: each of its fields takes the
    model's value of the same name, or the one ``given`` (a value the model holds in another
    form). A field neither has is an error, so a model and its config cannot drift apart
    unnoticed; model fields the dataclass lacks (a step's budget) are left out."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    fields = type(model).model_fields
    missing = sorted(n for n in names if n not in fields and n not in given)
    if missing:
        raise TypeError(f"{type(model).__name__} has no {', '.join(missing)} for {cls.__name__}")
    values = {n: getattr(model, n) for n in names if n not in given}
    return cls(**values, **given)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    args = typing.get_args(annotation)
    if args:
        return [m for a in args for m in _models_in(a)]
    return (
        [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    )


def is_setting(model: type[BaseModel], path: str) -> bool:
    """Whether ``CACHE__REDIS__URL`` (a variable without its prefix) names a field of
    ``model``, through its nested models."""
    head, _, rest = path.lower().partition("__")
    field = model.model_fields.get(head)
    if field is None:
        return False
    return not rest or any(is_setting(m, rest) for m in _models_in(field.annotation))


def unknown_variables(settings: type[BaseSettings], names: Iterable[str]) -> list[str]:
    """The ``names`` that carry the settings' env prefix but name none of its fields."""
    prefix = str(settings.model_config.get("env_prefix", "")).upper()
    return sorted(
        n
        for n in names
        if n.upper().startswith(prefix) and not is_setting(settings, n[len(prefix) :])
    )


def _known_profile(name: str) -> str:
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}")
    return name


ProfileName = Annotated[str, AfterValidator(_known_profile)]
"""A setting that names a profile (engram_core.profiles); an unknown one fails the start."""


def engram_home() -> Path:
    """Where local state lives: $ENGRAM_HOME, else ./.engram."""
    return Path(os.environ.get("ENGRAM_HOME", ".engram")).resolve()


def default_data_dir() -> Path:
    return engram_home() / "data"


class ServerTlsSettings(BaseModel):
    """TLS of a gRPC server (``ENGRAM_<SERVICE>_TLS__CERT_FILE`` …); off while cert_file is
    unset. The files are read again when they change: a new connection gets the new ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cert_file: Path | None = Field(
        None, description="PEM certificate chain the server presents; set, the server speaks TLS."
    )
    key_file: Path | None = Field(None, description="PEM private key of cert_file.")
    ca_file: Path | None = Field(
        None, description="PEM CA bundle that client certificates must chain to (mTLS)."
    )
    # grpcio offers no "request but do not require" mode, so there is no "optional".
    client_auth: Literal["none", "require"] = Field(
        "none",
        description="require: a client without a certificate signed by ca_file is refused "
        "(mTLS); none: no client certificate is asked for.",
    )

    @model_validator(mode="after")
    def _complete(self) -> ServerTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "key_file" if self.key_file is None else "cert_file"
            raise ValueError(f"tls.{missing} is required: TLS needs cert_file and key_file")
        if self.cert_file is None and (self.ca_file is not None or self.client_auth != "none"):
            raise ValueError("tls.ca_file and tls.client_auth need tls.cert_file and key_file")
        if self.client_auth == "require" and self.ca_file is None:
            raise ValueError("tls.ca_file is required with tls.client_auth = require")
        return self

    @property
    def on(self) -> bool:
        return self.cert_file is not None


class ClientTlsSettings(BaseModel):
    """TLS of the channels a service opens to the others (``ENGRAM_<SERVICE>_CLIENT_TLS__…``).
    Changed files are read again at most every reload_s and used by a new channel."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        False,
        description="Speak TLS (implied by ca_file or cert_file); without ca_file the "
        "server is checked against the system's CAs.",
    )
    ca_file: Path | None = Field(
        None, description="PEM CA bundle the servers' certificates chain to."
    )
    cert_file: Path | None = Field(
        None, description="PEM certificate chain presented to servers that require one (mTLS)."
    )
    key_file: Path | None = Field(None, description="PEM private key of cert_file.")
    server_name: str = Field(
        "",
        description="Name the server certificates are checked against instead of the "
        "target's host (one certificate for every internal service).",
    )
    reload_s: float = Field(
        5.0,
        ge=0,
        description="Seconds between two looks at the files, on the call path; 0: every call.",
    )

    @model_validator(mode="after")
    def _complete(self) -> ClientTlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            missing = "key_file" if self.key_file is None else "cert_file"
            raise ValueError(f"client_tls.{missing} is required: mTLS needs cert_file and key_file")
        return self

    @property
    def on(self) -> bool:
        return self.enabled or self.ca_file is not None or self.cert_file is not None


class MetricsSettings(BaseModel):
    """Where a service's metrics go (``ENGRAM_<SERVICE>_METRICS__PORT`` …); each service has
    its own default port, so the seven can run on one host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exporter: Literal["prometheus", "otlp", "none"] = Field(
        "prometheus",
        description="prometheus: served at http://host:port/metrics; otlp: pushed to an "
        "OTLP/gRPC collector (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_METRIC_EXPORT_INTERVAL); "
        "none: not recorded.",
    )
    host: str = Field(
        "", description="Interface /metrics binds to; empty: the gRPC server's (host)."
    )
    port: int = Field(9464, ge=0, le=65535, description="Port of /metrics; 0 picks a free one.")
    tenant_label: bool = Field(
        False,
        description="Label per-tenant metrics with the tenant; off, they are summed over "
        "tenants (one series each however many tenants there are).",
    )


def metrics_on(port: int) -> Any:
    """The ``metrics`` field of a service whose /metrics defaults to ``port``."""
    return Field(
        default_factory=lambda: MetricsSettings(port=port),
        description=f"Metrics export; Prometheus on port {port} by default.",
    )


def workers_field() -> Any:
    """The ``workers`` field of a service that may run several processes on its port
    (engram_platform.workers)."""
    return Field(
        1,
        ge=1,
        le=64,
        description="Processes serving the gRPC port (SO_REUSEPORT; each connection stays "
        "with one), so the service uses more than one core; >1 adds a parent that restarts a "
        "child that dies. Each keeps its own in-process state; child i serves /metrics on "
        "metrics port + i.",
    )


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface the gRPC server binds to.")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    data_dir: Path = Field(
        default_factory=default_data_dir, description="Where embedded backends keep their files."
    )
    log_level: str = Field("INFO", description="Python logging level.")
    log_format: Literal["json", "text"] = Field(
        "json",
        description="json: one JSON object a line (timestamp, level, service, logger, message, "
        "trace_id, span_id, tenant); text: one plain line, for people.",
    )
    max_message_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Largest gRPC message accepted or sent."
    )
    tracing: Literal["none", "console", "otlp"] = Field(
        "none",
        description="Where spans go: nowhere, the console, or an OTLP/gRPC collector "
        "(OTEL_EXPORTER_OTLP_ENDPOINT and the other standard OTEL_* variables).",
    )
    grace_s: float = Field(5.0, ge=0, description="Seconds in-flight RPCs get on shutdown.")
    max_connection_age_s: float = Field(
        0.0,
        ge=0,
        description="Close a client connection this long after it opened (after grace_s for "
        "its calls), so clients resolve the address again and reach new replicas; 0: never.",
    )
    tls: ServerTlsSettings = Field(
        default_factory=ServerTlsSettings, description="TLS and mTLS of the gRPC server; off."
    )
    metrics: MetricsSettings = Field(
        default_factory=MetricsSettings, description="Metrics export; Prometheus by default."
    )

    @model_validator(mode="after")
    def _every_variable_is_a_setting(self) -> ServiceSettings:
        # pydantic-settings drops a variable that names no field: a mistyped or renamed
        # setting would leave the service running on the default, unnoticed.
        if self.model_config.get("env_prefix") == ServiceSettings.model_config["env_prefix"]:
            return self  # the base class: its prefix is every service's
        unknown = unknown_variables(type(self), os.environ)
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: no such setting (renamed? see the service README's "
                "settings reference)"
            )
        return self


class NatsSettings(BaseModel):
    """Where the log is; nested in the settings of every service that publishes or consumes
    (e.g. ``ENGRAM_GATEWAY_NATS__URL``), so it reads no environment of its own."""

    url: str = Field("nats://127.0.0.1:4222", description="NATS server URL(s), comma-separated.")
    connect_timeout_s: float = Field(5.0, gt=0, description="Timeout for the first connect.")
    stream_replicas: int = Field(1, ge=1, le=5, description="JetStream replicas per stream.")
    ready_wait_s: float = Field(
        60.0,
        ge=0,
        description="How long a start waits for JetStream to answer (a server starting, a "
        "cluster electing its leader) before it fails.",
    )
    duplicate_window_s: float = Field(
        600.0, gt=0, description="Window in which a repeated Nats-Msg-Id is dropped."
    )


class WorkerSettings(ServiceSettings):
    """What every JetStream worker that writes through the stores' RPCs has; each worker
    subclasses with its own env prefix and overrides the defaults that differ."""

    nats: NatsSettings = Field(
        default_factory=NatsSettings, description="Where the log (NATS JetStream) is."
    )
    vector_addr: str = Field("127.0.0.1:50052", description="host:port of the vector service.")
    lexical_addr: str = Field("127.0.0.1:50053", description="host:port of the lexical service.")
    graph_addr: str = Field("127.0.0.1:50054", description="host:port of the graph service.")
    client_tls: ClientTlsSettings = Field(
        default_factory=ClientTlsSettings, description="TLS of the channels to the stores; off."
    )
    batch_size: int = Field(64, ge=1, le=4096, description="Most events handled at once.")
    fetch_timeout_s: float = Field(
        1.0,
        gt=0,
        description="How long an idle fetch waits for the first event; also bounds how long "
        "a stop request waits for an idle worker.",
    )
    batch_wait_s: float = Field(
        0.02,
        gt=0,
        description="After the first event, how long to wait for more to fill the batch.",
    )
    ack_wait_s: float = Field(
        60.0,
        gt=0,
        description="Seconds the log waits for an ack before redelivering an event; must "
        "exceed the time one batch may take.",
    )
    max_ack_pending: int = Field(
        1000,
        ge=1,
        description="Events delivered but not yet acked (retries included), over all replicas; "
        "the log stops delivering beyond it.",
    )
    retry_base_s: float = Field(
        0.5, gt=0, description="Backoff of the first retry; doubles with every redelivery."
    )
    retry_max_s: float = Field(30.0, gt=0, description="Cap of the retry backoff.")
    write_timeout_s: float = Field(10.0, gt=0, description="Deadline of one store RPC.")
    progress_interval_s: float = Field(
        30.0, gt=0, description="How often the worker logs what it has done."
    )


class RedisSettings(BaseModel):
    """Where Redis is, for the cache, leases and rate limits (``backend = "redis"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis://, rediss:// or unix:// URL, without a password (see password_file).",
    )
    password_file: Path | None = Field(
        None, description="File holding the Redis password (AUTH); none sends no password."
    )
    key_prefix: str = Field(
        "engram:", description="Prefix of every key, so deployments can share one Redis."
    )
    socket_timeout_s: float = Field(
        0.25,
        gt=0,
        description="Connect and read timeout of one command; a slower Redis counts as down.",
    )
    max_connections: int = Field(
        32, ge=1, description="Connection pool size (a call waits socket_timeout_s for one)."
    )
    down_retry_s: float = Field(
        1.0,
        ge=0,
        description="After a failure, calls skip Redis (miss, allow, no lease) this long.",
    )
    log_interval_s: float = Field(
        60.0, gt=0, description="Redis being down is logged at most once per interval."
    )


class CacheSettings(BaseModel):
    """Which backend holds caches, leases and rate-limit counters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["memory", "redis"] = Field(
        "memory",
        description="memory: in-process (one replica's own); redis: shared by every replica.",
    )
    redis: RedisSettings = Field(
        default_factory=RedisSettings, description="Redis, when backend is redis."
    )
