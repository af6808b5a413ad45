"""Calibrates tests/fakes/gemini.py with google-genai's own Client: what it sends (Gemini API key,
Vertex with a service account whose token google-auth fetches from the fake token endpoint), the
fakes accept; what they answer, the client parses (text, function calls, streams, a blocked
prompt, errors)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from tests.fakes.gemini import API_KEY, FakeGemini, FakeTokenServer, Reply, service_account


def _client(url: str) -> genai.Client:
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=url, api_version="v1beta"))


def _vertex_client(g: FakeGemini, tokens: FakeTokenServer,
                   scope: str = "https://www.googleapis.com/auth/cloud-platform") -> genai.Client:
    """A Vertex client on the fake, its service account's tokens from ``tokens`` (google-auth's flow)."""
    from google.oauth2 import service_account as sa

    info, tokens.public_pem = service_account(tokens.url)
    creds = sa.Credentials.from_service_account_info(info, scopes=[scope])
    return genai.Client(vertexai=True, project="proj", location="us-central1", credentials=creds,
                        http_options=types.HttpOptions(base_url=g.url, api_version="v1"))


CONFIG = types.GenerateContentConfig(
    system_instruction="be brief",
    temperature=0.3,
    top_k=4,
    candidate_count=2,
    max_output_tokens=20,
    stop_sequences=["END"],
    response_logprobs=True,
    logprobs=2,
    tools=[
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name="get",
                    parameters_json_schema={"type": "object", "properties": {"x": {"type": "string"}}},
                )
            ]
        )
    ],
    tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get"]
        )
    ),
)


async def test_gemini_api_calls_parse_in_google_genai() -> None:
    async with FakeGemini() as g:
        client = _client(g.url)  # held: a dropped Client closes its connection pool
        g.script.append(
            Reply(
                text="a b",
                calls=[("get", {"x": "1"})],
                logprobs=True,
                usage={
                    "promptTokenCount": 9,
                    "candidatesTokenCount": 3,
                    "cachedContentTokenCount": 4,
                    "thoughtsTokenCount": 2,
                },
            )
        )
        out = await asyncio.to_thread(
            client.models.generate_content, model="gemini-2.5-flash", contents="hi", config=CONFIG
        )
        assert g.requests[-1].path == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert len(out.candidates or []) == 2 and out.function_calls[0].args == {"x": "1"}  # type: ignore[index]
        assert out.usage_metadata.cached_content_token_count == 4  # type: ignore[union-attr]

        def stream() -> list[types.GenerateContentResponse]:
            return list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="hi"))

        g.script.append(Reply(text="x y z"))
        chunks = await asyncio.to_thread(stream)
        assert "".join(c.text or "" for c in chunks) == "x y z"
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
        assert g.requests[-1].path.endswith(":streamGenerateContent")


async def test_blocked_prompt_and_errors_in_google_genai() -> None:
    async with FakeGemini() as g:
        client = _client(g.url)
        g.script.append(Reply(block="PROHIBITED_CONTENT"))
        out = await asyncio.to_thread(client.models.generate_content, model="m", contents="bad")
        assert out.candidates is None and out.prompt_feedback is not None
        assert out.prompt_feedback.block_reason == types.BlockedReason.PROHIBITED_CONTENT
        g.script.append(Reply(status=429))
        with pytest.raises(errors.ClientError) as e:
            await asyncio.to_thread(client.models.generate_content, model="m", contents="hi")
        assert e.value.code == 429 and e.value.status == "RESOURCE_EXHAUSTED"
        wrong = genai.Client(
            api_key="wrong", http_options=types.HttpOptions(base_url=g.url, api_version="v1beta")
        )
        with pytest.raises(errors.ClientError) as e:
            await asyncio.to_thread(wrong.models.generate_content, model="m", contents="hi")
        assert e.value.code == 400 and e.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
        g.script.append(Reply(text="a b c", error_after=1))

        def stream() -> list[Any]:
            return list(client.models.generate_content_stream(model="m", contents="hi"))

        with pytest.raises(errors.APIError) as e2:
            await asyncio.to_thread(stream)
        assert e2.value.code == 503


async def test_vertex_with_a_service_account_through_google_auth(tmp_path: Any) -> None:
    async with FakeGemini() as g:
        with FakeTokenServer(b"", g.tokens) as tokens:
            client = _vertex_client(g, tokens)
            out = await asyncio.to_thread(
                client.models.generate_content, model="gemini-2.5-pro", contents="hi"
            )
            assert out.text == "Hello from Gemini"
            where = "/v1/projects/proj/locations/us-central1/publishers/google/models/gemini-2.5-pro"
            assert g.requests[-1].path == where + ":generateContent"
            assert tokens.issued[0]["iss"] == "gw@proj.iam.gserviceaccount.com"
            bad = _vertex_client(g, tokens, scope="https://www.googleapis.com/auth/other")
            with pytest.raises(Exception, match="invalid_scope"):
                await asyncio.to_thread(bad.models.generate_content, model="m", contents="hi")


async def test_claude_on_vertex_fake_with_the_anthropic_vertex_client() -> None:
    """The rawPredict envelope as anthropic's own AnthropicVertex client sends it."""
    from anthropic import AnthropicVertex

    from tests.fakes.vertex_claude import FakeVertexClaude

    accepted = {"ya29.given"}
    async with FakeVertexClaude(accepted) as v:
        client = AnthropicVertex(
            region="us-east5", project_id="proj", access_token="ya29.given", base_url=v.url + "/v1"
        )
        msg = await asyncio.to_thread(
            client.messages.create,
            model="claude-test@20260101",
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
        )
        assert msg.content[0].text == "Hello from Claude"  # type: ignore[union-attr]
        assert v.requests[-1].path.endswith(":rawPredict") and "model" not in v.requests[-1].body

        def stream() -> str:
            with client.messages.stream(
                model="claude-test@20260101", max_tokens=20, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                return "".join(s.text_stream)

        assert await asyncio.to_thread(stream) == "Hello from Claude"
        assert v.requests[-1].path.endswith(":streamRawPredict")
        bad = AnthropicVertex(
            region="us-east5", project_id="proj", access_token="wrong", base_url=v.url + "/v1", max_retries=0
        )
        with pytest.raises(Exception, match="401"):
            await asyncio.to_thread(
                bad.messages.create,
                model="claude-x",
                max_tokens=5,
                messages=[{"role": "user", "content": "hi"}],
            )


EMBED = types.EmbedContentConfig(output_dimensionality=4, task_type="RETRIEVAL_DOCUMENT")


async def test_gemini_api_embeddings_parse_in_google_genai() -> None:
    from tests.fakes.upstream import fake_vector

    async with FakeGemini(embed_usage=True) as g:
        client = _client(g.url)
        out = await asyncio.to_thread(
            client.models.embed_content,
            model="gemini-embedding-001",
            contents=["one two", "three"],
            config=EMBED,
        )
        want = [fake_vector("one two", 4), fake_vector("three", 4)]
        assert [e.values for e in out.embeddings or []] == want
        assert out.usage_metadata is not None and out.usage_metadata.prompt_token_count == 3
        seen = g.requests[-1]
        assert seen.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
        assert seen.body["requests"][0]["outputDimensionality"] == 4
        g.script.append(Reply(status=503))
        with pytest.raises(errors.ServerError) as e:
            await asyncio.to_thread(client.models.embed_content, model="gemini-embedding-001", contents="x")
        assert e.value.code == 503


async def test_vertex_embeddings_parse_in_google_genai() -> None:
    """Both of Vertex's embedding APIs as the SDK picks them: predict for text-embedding models,
    batchEmbedContents for Gemini embedding models (one input goes to embedContent, which the
    fake does not play: the gateway always batches)."""
    async with FakeGemini() as g:
        with FakeTokenServer(b"", g.tokens) as tokens:
            client = _vertex_client(g, tokens)
            where = "/v1/projects/proj/locations/us-central1/publishers/google/models/"
            apis = (("text-embedding-005", "predict"), ("gemini-embedding-001", "batchEmbedContents"))
            for model, method in apis:
                out = await asyncio.to_thread(
                    client.models.embed_content, model=model, contents=["a b c", "d"], config=EMBED
                )
                got = out.embeddings or []
                assert [len(e.values or []) for e in got] == [4, 4]
                assert [e.statistics.token_count for e in got if e.statistics] == [3, 1]
                assert g.requests[-1].path == where + f"{model}:{method}"


async def test_thinking_as_google_gates_it_in_google_genai() -> None:
    """What google-genai sends for thoughts (thinking_config), the fake takes from a thinking
    model, answering thought parts the SDK reads (``part.thought``); from a model that does not
    think it is Google's 400, on both APIs; a budget out of range and thoughts asked of a model
    whose thinking is off are refused too."""
    think = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    async with FakeGemini() as g:
        client = _client(g.url)
        g.script.append(Reply(text="hi there", thought="they said hi"))
        out = await asyncio.to_thread(client.models.generate_content, model="gemini-2.5-flash",
                                      contents="hi", config=think)
        parts = out.candidates[0].content.parts  # type: ignore[index, union-attr]
        assert [(p.thought, p.text) for p in parts] == [(True, "they said hi"), (None, "hi there")]  # type: ignore[union-attr]
        assert out.text == "hi there"  # the SDK leaves thoughts out of .text
        sent = g.requests[-1].body["generationConfig"]["thinkingConfig"]
        assert sent == {"include_thoughts": True}  # the proto's name, which Google takes too

        def stream() -> list[types.GenerateContentResponse]:
            return list(client.models.generate_content_stream(model="gemini-3-pro-preview",
                                                              contents="hi", config=think))

        chunks = await asyncio.to_thread(stream)
        seen = [(p.thought, p.text) for c in chunks for p in c.candidates[0].content.parts]  # type: ignore[index, union-attr]
        assert seen[0] == (True, "I should greet back")
        assert "".join(t or "" for th, t in seen[1:] if not th) == "Hello from Gemini"
        plain = await asyncio.to_thread(client.models.generate_content, model="gemini-2.5-flash",
                                        contents="hi")
        assert [p.thought for p in plain.candidates[0].content.parts] == [None]  # type: ignore[index, union-attr]
        refused = [
            ("gemini-2.0-flash", think, "thinking_config is not supported"),
            ("gemini-2.5-flash-image", think, "thinking_config is not supported"),
            ("gemini-2.5-flash-lite", think, "include_thoughts is only enabled when thinking is enabled"),
            ("gemini-2.5-flash", types.GenerateContentConfig(
                thinking_config=types.ThinkingConfig(thinking_budget=30000)), r"thinking budget \(30000\)"),
        ]
        for model, config, said in refused:
            with pytest.raises(errors.ClientError, match=said) as e:
                await asyncio.to_thread(client.models.generate_content, model=model, contents="hi",
                                        config=config)
            assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT"
        lite = types.GenerateContentConfig(
            thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=-1))
        out = await asyncio.to_thread(client.models.generate_content, model="gemini-2.5-flash-lite",
                                      contents="hi", config=lite)
        assert out.candidates[0].content.parts[0].thought is True  # type: ignore[index, union-attr]
        with FakeTokenServer(b"", g.tokens) as tokens:
            vertex = _vertex_client(g, tokens)
            with pytest.raises(errors.ClientError, match="thinking is not supported by this model"):
                await asyncio.to_thread(vertex.models.generate_content, model="gemini-2.0-flash",
                                        contents="hi", config=think)
