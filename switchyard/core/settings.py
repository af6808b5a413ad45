"""The configuration's building blocks and its service-wide sections: the strict model every
section is, ``env:NAME`` secrets, limits and prices, and the server, store, usage, router,
metrics, logging and tracing sections; the master key made on first start.
"""

from __future__ import annotations

import importlib
import importlib.util
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from switchyard.core.errors import install_hint

MIN_MASTER_KEY = 16  # characters: shorter is a password, not a secret


class ConfigError(Exception):
    """The config file cannot be used. ``str()`` names the file, field path and reason."""


def resolve_secret(value: str | None, where: str = "") -> str | None:
    """``env:NAME`` -> the value of $NAME (must be set); anything else as written."""
    if value is None or not value.startswith("env:"):
        return value
    name = value[4:]
    if name not in os.environ:
        raise ValueError(f"environment variable {name} is not set{where}")
    return os.environ[name]


def _secret(value: str | None) -> str | None:
    return resolve_secret(value)  # one argument: pydantic would pass a second as validation info


# A setting that may be written ``env:NAME`` (keys, tokens): resolved when the config is read.
Secret = Annotated[str | None, AfterValidator(_secret)]


class ConfigModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(ConfigModel):
    """Limits and quotas; a missing value means no limit."""

    # Upper bounds keep every counter exact in the store (Lua numbers are doubles: integers are
    # exact below 2**53; spend is counted in nano-USD).
    rpm: int | None = Field(None, ge=1, le=10**9, description="requests per minute")
    tpm: int | None = Field(None, ge=1, le=10**12, description="tokens (prompt + completion) per minute")
    max_concurrency: int | None = Field(None, ge=1, le=10**6, description="requests in flight at once")
    tokens_per_day: int | None = Field(None, ge=1, le=10**15)
    tokens_per_month: int | None = Field(None, ge=1, le=10**15)
    spend_per_day: float | None = Field(None, gt=0, le=10**6, description="USD (at most 1,000,000)")
    spend_per_month: float | None = Field(None, gt=0, le=10**6, description="USD (at most 1,000,000)")
    shrink_max_tokens: bool | None = Field(
        None, description="when a token or spend quota cannot hold a request's max_tokens, lower it "
        "to what is left (header x-switchyard-max-tokens-lowered) instead of a 429; the key's "
        "setting wins over its team's; default on")


class Price(ConfigModel):
    """USD per million tokens. Cached prompt tokens are priced apart where the vendor does
    (Anthropic: reads 0.1x, 5-minute writes 1.25x of the prompt price); unset, they cost as prompt."""

    prompt_per_1m: float = Field(0.0, ge=0)
    completion_per_1m: float = Field(0.0, ge=0)
    cache_read_per_1m: float | None = Field(None, ge=0, description="prompt tokens read from a cache")
    cache_write_per_1m: float | None = Field(None, ge=0, description="prompt tokens written to a cache")


class CacheConfig(ConfigModel):
    """The response cache's rule on a model, a team or a key (docs/cache.md); the most specific
    one that is set wins: key, then team, then model."""

    mode: Literal["off", "exact", "semantic"] = "exact"
    ttl: float = Field(3600.0, gt=0, le=30 * 86400, description="seconds an answer is kept")
    scope: Literal["key", "team", "global"] = Field("team", description="who shares the answers")
    threshold: float | None = Field(None, gt=0, le=1, description="semantic only: the least cosine "
                                    "similarity a near-identical prompt needs")
    repeatable_only: bool = Field(True, description="cache only requests that can repeat: temperature "
                                  "0 or a seed, with n=1 (embeddings always)")

    @model_validator(mode="after")
    def _threshold(self) -> CacheConfig:
        if self.threshold is not None and self.mode != "semantic":
            raise ValueError("threshold applies to mode: semantic only")
        if self.mode == "semantic" and self.threshold is None:
            raise ValueError("mode: semantic needs a threshold (0..1], e.g. 0.95")
        return self


class ServerConfig(ConfigModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # Slow clients may not hold connections forever (nginx's defaults).
    header_timeout: float = Field(60.0, gt=0, description="seconds for a request's headers to arrive")
    body_timeout: float = Field(60.0, gt=0, description="seconds for a request's body to arrive")
    write_timeout: float = Field(30.0, gt=0, description="seconds a client may leave its answer "
                                 "unread (a full send buffer) before the connection is cut")
    idle_timeout: float = Field(75.0, gt=0, description="seconds a keep-alive connection may idle")
    shutdown_grace: float = Field(30.0, ge=0,
                                  description="seconds in-flight requests may finish after SIGTERM")
    trusted_proxies: list[str] = Field(
        default_factory=list, description="addresses or CIDRs of reverse proxies whose X-Forwarded-For "
        "and X-Forwarded-Proto are believed (client address for the master-key guard; Secure cookies)")
    auth_max_failures: int = Field(10, ge=1, description="wrong master keys per client address (across "
                                   "/admin and /ui/login) within auth_failure_window before a 429")
    auth_failure_window: float = Field(60.0, gt=0, le=86_400, description="seconds")

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for i, net in enumerate(v):
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies.{i}: {net!r} is not an IP address or CIDR") from None
        return v


class StoreConfig(ConfigModel):
    url: str = Field("memory://", description="memory:// or redis://host:port/db")
    timeout: float = Field(0.25, gt=0, description="seconds before a store call counts as down")
    lease_ttl: float = Field(60.0, ge=1, le=3600, description="seconds a concurrency slot or quota "
                             "reservation outlives its replica (renewed every third of it while alive)")
    admin_timeout: float = Field(5.0, gt=0, le=300, description="seconds an admin read (usage, records, "
                                 "the console's overview) may take: not the hot path's deadline")
    cache_max_bytes: int = Field(256 << 20, ge=0, description="the response cache's byte budget "
                                 "(docs/cache.md): the oldest entries are evicted past it")
    cache_max_entry_bytes: int = Field(1 << 20, ge=0, description="an answer larger than this is not cached")

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        v = resolve_secret(v) or v
        if not v.startswith(("memory://", "redis://", "rediss://", "redis+cluster://")):
            raise ValueError("must start with memory://, redis://, rediss:// or redis+cluster://")
        return v


class UsageConfig(ConfigModel):
    """The durable usage ledger (docs/policies.md, "Usage ledger"); needs the ``ledger`` extra."""

    ledger: str | None = Field(None, description="postgresql://... (or env:NAME); unset: no ledger")
    batch: int = Field(500, ge=1, le=10_000, description="records per insert")
    interval: float = Field(0.2, gt=0, description="seconds between polls for new records when idle")
    backlog_max: int = Field(1_000_000, ge=100, description="records that may wait per team stream "
                             "(Redis) or in the process (memory://) while PostgreSQL is down")
    claim_idle: float = Field(30.0, gt=0, description="seconds before another consumer's unwritten "
                              "records are taken over (a replica that died)")

    @field_validator("ledger")
    @classmethod
    def _scheme(cls, v: str | None) -> str | None:
        return _url_of_extra(v, ("postgresql://", "postgres://"),
                             "must start with postgresql:// or postgres://", "the usage ledger", "ledger",
                             ("asyncpg",))


class RouterConfig(ConfigModel):
    retries: int = Field(2, ge=0, description="extra attempts after the first, before any byte is sent")
    backoff_base: float = Field(0.05, ge=0, description="seconds; doubled per attempt, jittered")
    backoff_max: float = Field(2.0, ge=0)
    cooldown_failures: int = Field(3, ge=1, description="consecutive failures that cool a deployment")
    cooldown_seconds: float = Field(30.0, ge=0)
    retry_after_max: float = Field(300.0, ge=0, description="seconds; the longest an upstream's "
                                   "Retry-After holds a deployment (and is passed on to callers)")


class MetricsConfig(ConfigModel):
    """``GET /metrics`` (docs/observability.md). Labels come from configured names only."""

    enabled: bool = True
    per_key: bool = Field(False, description="label requests, tokens and spend by key id too")
    token: Secret = Field(None, description="when set, /metrics needs Bearer <token> (or the "
                              "master key); env:NAME reads $NAME")


class LoggingConfig(ConfigModel):
    """What the gateway writes to stderr; ``--log-level``/``--log-format`` and SWITCHYARD_LOG_LEVEL/
    SWITCHYARD_LOG_FORMAT override these."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"
    access: bool = Field(True, description="one line per request, at its end")


class TracingConfig(ConfigModel):
    """OpenTelemetry traces over OTLP/HTTP (the ``otel`` extra); off while otlp_endpoint is unset."""

    otlp_endpoint: str | None = Field(None, description="e.g. http://collector:4318/v1/traces")
    service_name: str = "switchyard"
    sample_ratio: float = Field(1.0, ge=0, le=1, description="share of traces started here that are kept")

    @field_validator("otlp_endpoint")
    @classmethod
    def _otel(cls, v: str | None) -> str | None:
        return _url_of_extra(v, ("http://", "https://"),
                             "must be an http:// or https:// URL (OTLP over HTTP)", "tracing", "otel",
                             ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))


def _url_of_extra(v: str | None, schemes: tuple[str, ...], bad_scheme: str, what: str, extra: str,
                  modules: tuple[str, ...]) -> str | None:
    """A setting that is a URL served by an optional extra: its scheme, then the extra's modules."""
    v = resolve_secret(v)
    if v is None:
        return v
    if not v.startswith(schemes):
        raise ValueError(bad_scheme)
    try:
        for m in modules:
            importlib.import_module(m)
    except ImportError:
        raise ValueError(f"{what} needs the {extra} extra: {install_hint(extra)}") from None
    return v

AUTO_KEY = "auto"  # master_key: a random key made on first start, kept in master_key_file()


def master_key_file() -> Path:
    """Where ``master_key: auto`` keeps its key: $SWITCHYARD_HOME, else ~/.cache/switchyard."""
    home = os.environ.get("SWITCHYARD_HOME") or os.path.expanduser("~/.cache/switchyard")
    return Path(home) / "master_key"


def generated_master_key() -> str:
    """The key in ``master_key_file()``, made (random, mode 0600) when there is none yet. Several
    processes starting at once agree: the file appears whole (a hard link) or not at all."""
    path = master_key_file()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".master_key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("sk-admin-" + secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the key
        finally:
            tmp.unlink()
    key = path.read_text().strip()
    if len(key) < 16:
        raise ValueError(f"{path} holds no usable key (delete it to have a new one made)")
    return key
