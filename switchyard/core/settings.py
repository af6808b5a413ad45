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
from urllib.parse import urlsplit

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
# What example files and tutorials put where a secret goes (deploy/kubernetes once shipped
# `change-me-master-key`): a master key, metrics token or store password holding one is known to
# everyone who read them. Compared lower-cased, with `_` and spaces read as `-`.
PLACEHOLDERS = ("change-me", "changeme", "replace-me", "replaceme", "placeholder", "example",
                "your-key", "your-secret", "your-password", "secret-here")


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


def placeholder_in(value: str) -> str | None:
    """The placeholder ``value`` holds (``PLACEHOLDERS``), or None."""
    low = value.lower().replace("_", "-").replace(" ", "-")
    return next((p for p in PLACEHOLDERS if p in low), None)


def refuse_placeholder(value: str | None, what: str) -> str | None:
    """``value``, or a ValueError when it holds a placeholder; the message names the placeholder
    (public, from an example file), never the rest of the secret."""
    found = placeholder_in(value) if value else None
    if found is not None:
        raise ValueError(f"{what} holds the placeholder {found!r} (from an example file): set a secret of "
                         "your own, e.g. `openssl rand -hex 32`")
    return value


def url_password_placeholder(url: str, what: str) -> str:
    """``url``, or a ValueError when its password holds a placeholder."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url  # the URL's own checks say what is wrong with it
    refuse_placeholder(password, what)
    return url


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
    tokens_per_session: int | None = Field(None, ge=1, le=10**15, description="each session id "
                                           "(x-switchyard-session) seen on the key or team, for its lifetime")
    spend_per_session: float | None = Field(None, gt=0, le=10**6, description="USD, each session id seen "
                                            "on the key or team, for its lifetime")
    soft: bool | None = Field(None, description="a soft budget: these token and spend quotas (day, month, "
                       "session) only send alerts (alerts:), never refuse or shrink")
    shrink_max_tokens: bool | None = Field(
        None, description="when a token or spend quota cannot hold a request's max_tokens, lower it "
        "to what is left (header x-switchyard-max-tokens-lowered) instead of a 429; the key's "
        "setting wins over its team's; default on")


class PriceRates(ConfigModel):
    """USD per million tokens. Cached prompt tokens are priced apart where the vendor does
    (Anthropic: reads 0.1x, 5-minute writes 1.25x of the prompt price); unset, they cost as prompt."""

    prompt_per_1m: float = Field(0.0, ge=0)
    completion_per_1m: float = Field(0.0, ge=0)
    cache_read_per_1m: float | None = Field(None, ge=0, description="prompt tokens read from a cache")
    cache_write_per_1m: float | None = Field(None, ge=0, description="prompt tokens written to a cache")


class PriceTier(PriceRates):
    """The rates for a request whose prompt (cached tokens included) is longer than
    ``above_input_tokens``: all of its tokens, as Anthropic and Google bill long contexts."""

    above_input_tokens: int = Field(..., ge=0)


class Price(PriceRates):
    """A model's price: base rates, and context-length tiers (the catalog's, or typed)."""

    tiers: list[PriceTier] = Field(default_factory=list, description="ascending above_input_tokens")

    @field_validator("tiers")
    @classmethod
    def _ascending(cls, v: list[PriceTier]) -> list[PriceTier]:
        starts = [t.above_input_tokens for t in v]
        if starts != sorted(set(starts)):
            raise ValueError("tiers must have strictly ascending above_input_tokens")
        return v

    def rates(self, prompt_tokens: int) -> PriceRates:
        """The rates a request with this many prompt tokens pays."""
        for tier in reversed(self.tiers):
            if prompt_tokens > tier.above_input_tokens:
                return tier
        return self


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
    url: str = Field("memory://", description="sqlite:// (a file; bare: under the switchyard home), "
                     "memory:// (nothing kept across restarts) or redis://host:port/db")
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
        if not v.startswith(("sqlite://", "memory://", "redis://", "rediss://", "redis+cluster://")):
            raise ValueError("must start with sqlite://, memory://, redis://, rediss:// or redis+cluster://")
        return url_password_placeholder(v, "the Redis password")


class UsageConfig(ConfigModel):
    """The durable usage ledger (docs/policies.md, "Usage ledger"); needs the ``ledger`` extra."""

    ledger: str | None = Field(None, description="postgresql://... (or env:NAME); unset: no ledger")
    batch: int = Field(500, ge=1, le=10_000, description="records per insert")
    interval: float = Field(0.2, gt=0, description="seconds between polls for new records when idle")
    backlog_max: int = Field(1_000_000, ge=100, description="records that may wait per team stream "
                             "(Redis) or in the process (memory://) while PostgreSQL is down")
    claim_idle: float = Field(30.0, gt=0, description="seconds before another consumer's unwritten "
                              "records are taken over (a replica that died)")
    tags: list[str] | None = Field(None, description="the tags a request may carry (x-switchyard-tags, "
                                   "metadata.tags); another is a 400. Unset: any, at most 8 a request")

    @field_validator("ledger")
    @classmethod
    def _scheme(cls, v: str | None) -> str | None:
        v = _url_of_extra(v, ("postgresql://", "postgres://"),
                          "must start with postgresql:// or postgres://", "the usage ledger", "ledger",
                          ("asyncpg",))
        return None if v is None else url_password_placeholder(v, "the PostgreSQL password")


class AlertsConfig(ConfigModel):
    """Webhooks as a day's or month's spend or token quota fills (docs/policies.md, "Alerts")."""

    webhook: str = Field(..., description="http(s) URL the alerts are POSTed to")
    secret: Secret = Field(None, description="signs each body: x-switchyard-signature: sha256=<hex "
                           "HMAC-SHA256 of the body>; env:NAME reads $NAME")
    thresholds: list[float] = Field(default_factory=lambda: [0.5, 0.8, 1.0], min_length=1,
                                    description="fractions of each quota; one alert each per period")
    format: Literal["json", "slack"] = "json"
    interval: float = Field(10.0, gt=0, le=3600, description="seconds between checks of the quotas")

    @field_validator("webhook")
    @classmethod
    def _url(cls, v: str) -> str:
        v = resolve_secret(v) or v
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("thresholds")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0 < t <= 10 for t in v):
            raise ValueError("each threshold is a fraction of the quota above 0 (1.0: reached)")
        return sorted(set(v))


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

    @field_validator("token")
    @classmethod
    def _not_a_placeholder(cls, v: str | None) -> str | None:
        return refuse_placeholder(v, "the metrics token")


class LoggingConfig(ConfigModel):
    """What the gateway writes to stderr; ``--log-level``/``--log-format`` and SWITCHYARD_LOG_LEVEL/
    SWITCHYARD_LOG_FORMAT override these."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"
    access: bool = Field(True, description="one line per request, at its end")


Role = Literal["admin", "team_admin", "member", "viewer"]  # switchyard.policies.roles.ROLES


class OidcRoleRule(ConfigModel):
    """A claim value that gives a role: ``groups`` containing ``value`` (or equal to it)."""

    claim: str = "groups"
    value: str
    role: Role
    teams: list[str] | None = Field(None, description="the teams it covers; absent: every team "
                                    "(only for admin and viewer)")

    @model_validator(mode="after")
    def _teams(self) -> OidcRoleRule:
        if self.teams is None and self.role not in ("admin", "viewer"):
            raise ValueError(f"a {self.role} rule needs teams")
        return self


class OidcConfig(ConfigModel):
    """Single sign-on for the console over OpenID Connect (docs/console.md)."""

    issuer: str = Field(description="the provider's issuer URL; discovery reads "
                        "<issuer>/.well-known/openid-configuration")
    client_id: str
    client_secret: Secret = Field(None, description="a confidential client's secret (env:NAME); "
                                  "unset: a public client (PKCE only)")
    redirect_uri: str | None = Field(None, description="<gateway>/ui/oidc/callback as registered at "
                                     "the provider; unset: built from the request")
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"])
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "PS256", "EdDSA"],
                                  description="signature algorithms accepted (asymmetric only)")
    audience: str | None = Field(None, description="the aud of access tokens accepted as Bearer on "
                                 "/admin; unset: client_id")
    roles: list[OidcRoleRule] = Field(default_factory=list, description="the first rule a user "
                                      "matches gives its role; rules of that role add their teams")
    name_claim: str = "name"
    email_claim: str = "email"
    jwks_cache_s: float = Field(300.0, ge=1, description="seconds the provider's keys are cached "
                                "(an unknown key id fetches them again sooner)")

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if a.lower() == "none" or a.startswith("HS")]
        if bad or not v:
            raise ValueError(f"algorithms must be asymmetric signature algorithms; not {bad or 'empty'}")
        return v


class ConsoleConfig(ConfigModel):
    master_key_login: bool = Field(True, description="the break-glass sign-in with the master key; "
                                   "false turns it off (the admin API still takes the key)")
    oidc: OidcConfig | None = None


class AuditConfig(ConfigModel):
    """The audit trail of admin changes (docs/policies.md, "Audit trail")."""

    retention_days: int = Field(365, ge=1, le=36_500, description="days an audit entry is kept (read "
                                "back); older ones are deleted from the ledger and no longer shown")


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


def switchyard_home() -> Path:
    """Where the gateway keeps its own files (the generated master key, ``sqlite://``'s state):
    $SWITCHYARD_HOME, else $XDG_CACHE_HOME/switchyard, else ~/.cache/switchyard."""
    home = os.environ.get("SWITCHYARD_HOME")
    if home:
        return Path(home)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "switchyard"


def master_key_file() -> Path:
    """Where ``master_key: auto`` keeps its key."""
    return switchyard_home() / "master_key"


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
