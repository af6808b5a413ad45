"""Prompt token counting: tiktoken for OpenAI-family models from packaged files, an estimate else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from switchyard.core.canonical import CanonicalRequest
from switchyard.core.deployments import ModelConfig
from switchyard.policies.tokens import CountMemo, count_prompt_tokens, encoding, encoding_name_for, estimate


def model(name: str, upstream: str | None = None, tokenizer: str | None = None) -> ModelConfig:
    return ModelConfig(name=name, tokenizer=tokenizer,
                       deployments=[{"name": "d", "base_url": "http://127.0.0.1:9", "model": upstream}])


def test_openai_family_names_pick_their_encoding():
    assert encoding_name_for("openai/gpt-4o-mini") == "o200k_base"
    assert encoding_name_for("o3-mini") == "o200k_base"
    assert encoding_name_for("gpt-4.1") == "o200k_base"
    assert encoding_name_for("gpt-4-turbo") == "cl100k_base"
    assert encoding_name_for("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_name_for("text-embedding-3-small") == "cl100k_base"
    assert encoding_name_for("mistral/mistral-large") is None
    assert encoding_name_for("local/smol") is None


def test_the_packaged_encodings_are_tiktoken_s():
    # Known token ids (from OpenAI's tokenizer) for a fixed string.
    assert encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_chat_counts_content_and_openai_framing():
    req = CanonicalRequest(kind="chat", model="openai/gpt-4o", dialect="openai",
                           messages=[{"role": "system", "content": "hello world"},
                                     {"role": "user", "content": [{"type": "text", "text": "hello world"}]}])
    # 2 messages * (3 framing + 2 content) + 3 for the reply
    assert count_prompt_tokens(req, model("openai/gpt-4o", "gpt-4o")) == 13


def test_completion_prompts_text_and_token_ids():
    req = CanonicalRequest(kind="completion", model="openai/gpt-3.5-turbo-instruct", dialect="openai",
                           prompt=["hello world", [1, 2, 3], [4, "hello world"]])
    instruct = model("openai/gpt-3.5-turbo-instruct", "gpt-3.5-turbo-instruct")
    assert count_prompt_tokens(req, instruct) == 2 + 3 + 3


def test_other_models_get_the_byte_estimate():
    text = "héllo wörld, 12345"  # 20 utf-8 bytes -> 5
    assert estimate(text) == 5
    req = CanonicalRequest(kind="completion", model="local/smol", dialect="openai", prompt=[text])
    assert count_prompt_tokens(req, model("local/smol")) == 5
    # an explicit tokenizer in the config wins over the name
    assert count_prompt_tokens(req, model("local/smol", tokenizer="cl100k_base")) == len(
        encoding("cl100k_base").encode(text))


def test_counting_touches_no_network(tmp_path):
    """A fresh process, a fresh cache dir, and sockets that refuse to connect: still counts."""
    code = textwrap.dedent("""
        import socket
        def refuse(*a, **k):
            raise RuntimeError("network touched")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from switchyard.core.canonical import CanonicalRequest
        from switchyard.policies.tokens import count_prompt_tokens
        req = CanonicalRequest(kind="completion", model="gpt-4o", dialect="openai", prompt=["hello world"])
        req2 = CanonicalRequest(kind="completion", model="gpt-4", dialect="openai", prompt=["hello world"])
        print(count_prompt_tokens(req), count_prompt_tokens(req2))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env.update(SWITCHYARD_TIKTOKEN_DIR=str(tmp_path / "tiktoken"), PYTHONPATH=os.getcwd(),
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]
    assert len(list((tmp_path / "tiktoken").iterdir())) == 2  # both files installed from the wheel


class _Counting:
    """An encoding that counts its calls (tiktoken's real one does the counting)."""

    def __init__(self, name: str) -> None:
        self.real = encoding(name)
        self.name = name
        self.calls = 0

    def encode(self, text: str, **kw: object) -> list[int]:
        self.calls += 1
        return self.real.encode(text, **kw)  # type: ignore[arg-type]


def test_long_texts_are_counted_once_per_team_and_the_memo_is_bounded():
    """An agent resends its system prompt every turn: tiktoken counts it once for the team, never
    for another team (whose request must not find it faster), and short texts are not kept."""
    enc = _Counting("o200k_base")
    memo = CountMemo(max_chars=10_000)  # room for two of the long text
    long, short = "the system prompt, " * 250, "hello world"  # 4,750 and 11 characters
    want = len(enc.real.encode(long))
    assert [memo.count(long, enc, "a") for _ in range(3)] == [want] * 3  # type: ignore[arg-type]
    assert enc.calls == 1
    assert memo.count(long, enc, "b") == want and enc.calls == 2  # type: ignore[arg-type]
    assert memo.count(long, enc, None) == want and enc.calls == 3  # type: ignore[arg-type]  # no scope: never kept
    for _ in range(2):
        memo.count(short, enc, "a")  # type: ignore[arg-type]
    assert enc.calls == 5
    # Past max_chars it starts over: a third long text (another team's) drops the first two.
    memo.count(long + "!", enc, "c")  # type: ignore[arg-type]
    assert memo.held <= memo.max_chars
    memo.count(long, enc, "a")  # type: ignore[arg-type]
    assert enc.calls == 7
    huge = "x y " * 2600  # past max_chars by itself: counted, never kept
    for _ in range(2):
        memo.count(huge, enc, "a")  # type: ignore[arg-type]
    assert enc.calls == 9 and memo.held <= memo.max_chars


def test_a_request_counts_alike_remembered_or_not():
    system = "You are a careful assistant. " * 100
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "dé " * 200,
                                               "parameters": {"type": "object"}}} for i in range(3)]
    req = CanonicalRequest(kind="chat", model="openai/gpt-4o", dialect="openai", tools=tools,
                           messages=[{"role": "system", "content": system},
                                     {"role": "user", "content": "hi"}])
    m = model("openai/gpt-4o", "gpt-4o")
    fresh = count_prompt_tokens(req, m)
    assert count_prompt_tokens(req, m, scope="a") == fresh  # counted, kept
    assert count_prompt_tokens(req, m, scope="a") == fresh  # found
    enc = encoding("o200k_base")
    # Tools count as their compact JSON (UTF-8, no spaces), beside the messages and framing.
    compact = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    assert fresh == 2 * 3 + len(enc.encode(system)) + 1 + 3 + len(enc.encode(compact))
