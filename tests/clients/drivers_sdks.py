"""The SDKs shaped like OpenAI's (``completions.create``, ``chat.completions.create``): ``openai``,
``fireworks-ai`` and both Scale GenAI Platform generations (``scale-gp``: ``/v4/beta/...``;
``scale-gp-beta``: ``/v5/...``). One driver; each SDK is the data it differs in. Each method is
one cell of the matrix: (gateway, model) -> asserts."""

from __future__ import annotations

from typing import Any, ClassVar

import fireworks
import openai
import pytest
import scale_gp
import scale_gp_beta

from tests.clients.checks import NAMED, TOOL_TOKENS, WEATHER, called, echoed, joined, names, same_text
from tests.clients.conftest import GREEDY, PARTS, PROMPT, UPSTREAM, Gateway
from tests.gateway.conftest import KEY

WRONG = "sk-not-a-key"
MESSAGES = [{"role": "user", "content": PROMPT}]
PART_MESSAGES = [{"role": "user", "content": [{"type": "text", "text": p} for p in PARTS]}]
TOOL_MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def parts_reached(gw: Gateway, route: str) -> None:
    """An upstream gets the caller's content parts as they were (it reads them itself)."""
    if route == UPSTREAM:
        assert gw.upstream.requests[-1].body["messages"] == PART_MESSAGES


class OpenAIShaped:
    name: ClassVar[str]
    auth_error: ClassVar[type[Exception]]
    validation_error: ClassVar[type[Exception]]  # what a bad parameter raises in this SDK

    def client(self, gw: Gateway, key: str = KEY) -> Any:
        raise NotImplementedError

    def completions(self, client: Any) -> Any:
        return client.completions

    def chats(self, client: Any) -> Any:
        return client.chat.completions

    def blamed(self, err: Any) -> str:
        """The parameter a validation error names."""
        return err.param

    def _complete(self, gw: Gateway, route: str, **kw: Any) -> Any:
        return self.completions(self.client(gw)).create(model=route, prompt=PROMPT, **{**GREEDY, **kw})

    def _chat(self, gw: Gateway, route: str, messages: Any = MESSAGES, **kw: Any) -> Any:
        return self.chats(self.client(gw)).create(model=route, messages=messages, **GREEDY, **kw)

    def completion(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "completion", self._complete(gw, route).choices[0].text)

    def completion_stream(self, gw: Gateway, route: str) -> None:
        chunks = self._complete(gw, route, stream=True)
        same_text(gw, route, "completion", joined(ch.choices[0].text for ch in chunks))

    def chat(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "chat", self._chat(gw, route).choices[0].message.content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        chunks = self._chat(gw, route, stream=True)
        same_text(gw, route, "chat", joined(ch.choices[0].delta.content for ch in chunks))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "parts", self._chat(gw, route, PART_MESSAGES).choices[0].message.content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        with pytest.raises(self.auth_error):
            self.completions(self.client(gw, WRONG)).create(model=route, prompt=PROMPT, max_tokens=1)

    def bad_param(self, gw: Gateway, route: str) -> None:
        with pytest.raises(self.validation_error) as e:
            self._complete(gw, route, temperature=5)
        assert self.blamed(e.value) == "temperature"

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        c = self._complete(gw, route, echo=True, logprobs=1)
        lp = c.choices[0].logprobs
        echoed(c.choices[0].text, lp.tokens, lp.token_logprobs, lp.text_offset)

    def tools(self, gw: Gateway, route: str) -> None:
        c = self.chats(self.client(gw)).create(model=route, messages=TOOL_MESSAGES, tools=[WEATHER],
                                               tool_choice=NAMED, max_tokens=TOOL_TOKENS, temperature=0)
        assert c.choices[0].finish_reason == "tool_calls"
        fn = c.choices[0].message.tool_calls[0].function
        called(fn.name, fn.arguments)


class OpenAISDK(OpenAIShaped):
    name = "openai"
    auth_error = openai.AuthenticationError
    validation_error = openai.BadRequestError

    def client(self, gw: Gateway, key: str = KEY) -> Any:
        return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=60)


class Fireworks(OpenAIShaped):
    name = "fireworks-ai"
    auth_error = fireworks.AuthenticationError
    validation_error = fireworks.BadRequestError

    def client(self, gw: Gateway, key: str = KEY) -> Any:
        return fireworks.Fireworks(base_url=gw.url + "/inference", api_key=key, max_retries=0, timeout=60)

    def blamed(self, err: Any) -> str:
        return err.body["error"]["param"]  # the SDK keeps the body whole


class ScaleGP(OpenAIShaped):
    """``scale-gp`` (0.1.0a62): ``/v4/beta/completions`` with an OpenAI-shaped body and
    ``/v4/beta/chat/completions``; validation errors are SGP's FastAPI 422."""

    name = "scale-gp"
    auth_error = scale_gp.AuthenticationError
    validation_error = scale_gp.UnprocessableEntityError

    def client(self, gw: Gateway, key: str = KEY) -> Any:
        return scale_gp.SGPClient(base_url=gw.url, api_key=key, max_retries=0, timeout=60)

    def completions(self, client: Any) -> Any:
        return client.beta.completions

    def chats(self, client: Any) -> Any:
        return client.beta.chat.completions

    def blamed(self, err: Any) -> str:
        return names(err.body)


class ScaleGPBeta(ScaleGP):
    """``scale-gp-beta`` (0.7): ``/v5/completions`` and ``/v5/chat/completions``."""

    name = "scale-gp-beta"
    auth_error = scale_gp_beta.AuthenticationError
    validation_error = scale_gp_beta.UnprocessableEntityError

    def client(self, gw: Gateway, key: str = KEY) -> Any:
        return scale_gp_beta.SGPClient(base_url=gw.url, api_key=key, account_id="acct", max_retries=0,
                                       timeout=60)

    def completions(self, client: Any) -> Any:
        return client.completions

    def chats(self, client: Any) -> Any:
        return client.chat.completions
