"""Frameworks over the ``openai`` SDK: LangChain's ``langchain-openai`` and LiteLLM used as a client
library. Each method is one cell of the matrix: (gateway, model) -> asserts."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.clients.checks import NAMED, TOOL_TOKENS, WEATHER, called, echoed, joined, same_text
from tests.clients.conftest import GREEDY, PARTS, PROMPT, Gateway
from tests.clients.drivers_sdks import MESSAGES, PART_MESSAGES, TOOL_MESSAGES, WRONG, parts_reached
from tests.gateway.conftest import KEY


class LangChain:
    name = "langchain-openai"

    @staticmethod
    def chat_model(gw: Gateway, route: str, key: str = KEY, **kw: Any) -> Any:
        from langchain_openai import ChatOpenAI

        kw = {**GREEDY, **kw}
        return ChatOpenAI(model=route, base_url=gw.url + "/v1", api_key=key,  # type: ignore[arg-type]
                          max_retries=0, timeout=60, **kw)

    @staticmethod
    def llm(gw: Gateway, route: str, **kw: Any) -> Any:
        from langchain_openai import OpenAI

        return OpenAI(model=route, base_url=gw.url + "/v1", api_key=KEY,  # type: ignore[arg-type]
                      **GREEDY, max_retries=0, timeout=60, **kw)

    def completion(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "completion", self.llm(gw, route).invoke(PROMPT))

    def completion_stream(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "completion", joined(self.llm(gw, route).stream(PROMPT)))

    def chat(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "chat", self.chat_model(gw, route).invoke(PROMPT).content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        chunks = self.chat_model(gw, route).stream(PROMPT)
        same_text(gw, route, "chat", joined(str(c.content) for c in chunks))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        from langchain_core.messages import HumanMessage

        msg = HumanMessage(content=[{"type": "text", "text": p} for p in PARTS])
        same_text(gw, route, "parts", self.chat_model(gw, route).invoke([msg]).content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        with pytest.raises(openai.AuthenticationError):
            self.chat_model(gw, route, key=WRONG).invoke(PROMPT)

    def bad_param(self, gw: Gateway, route: str) -> None:
        with pytest.raises(openai.BadRequestError) as e:
            self.chat_model(gw, route, temperature=5).invoke(PROMPT)
        assert e.value.param == "temperature"

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        out = self.llm(gw, route, logprobs=1, model_kwargs={"echo": True}).generate([PROMPT])
        g = out.generations[0][0]
        lp = (g.generation_info or {})["logprobs"]
        echoed(g.text, lp["tokens"], lp["token_logprobs"], lp["text_offset"])

    def tools(self, gw: Gateway, route: str) -> None:
        model = self.chat_model(gw, route, max_tokens=TOOL_TOKENS)
        msg = model.bind_tools([WEATHER], tool_choice="weather").invoke(TOOL_MESSAGES[0]["content"])
        assert len(msg.tool_calls) == 1, msg
        called(msg.tool_calls[0]["name"], msg.tool_calls[0]["args"])


class LiteLLM:
    name = "litellm"

    @staticmethod
    def kw(gw: Gateway, key: str = KEY) -> dict[str, Any]:
        return {"api_base": gw.url + "/v1", "api_key": key, "max_retries": 0, "num_retries": 0,
                "timeout": 60}

    def text(self, gw: Gateway, route: str, key: str = KEY, **kw: Any) -> Any:
        import litellm

        return litellm.text_completion(model="text-completion-openai/" + route, prompt=PROMPT,
                                       **self.kw(gw, key), **{**GREEDY, **kw})

    def chat_call(self, gw: Gateway, route: str, key: str = KEY, **kw: Any) -> Any:
        import litellm

        return litellm.completion(model="openai/" + route, **self.kw(gw, key),
                                  **{**GREEDY, "messages": MESSAGES, **kw})

    def completion(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "completion", self.text(gw, route).choices[0].text)

    def completion_stream(self, gw: Gateway, route: str) -> None:
        chunks = list(self.text(gw, route, stream=True))
        same_text(gw, route, "completion", joined(ch.choices[0].text for ch in chunks))

    def chat(self, gw: Gateway, route: str) -> None:
        same_text(gw, route, "chat", self.chat_call(gw, route).choices[0].message.content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        chunks = list(self.chat_call(gw, route, stream=True))
        same_text(gw, route, "chat", joined(ch.choices[0].delta.content for ch in chunks))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        c = self.chat_call(gw, route, messages=PART_MESSAGES)
        same_text(gw, route, "parts", c.choices[0].message.content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        import litellm

        with pytest.raises(litellm.AuthenticationError):
            self.chat_call(gw, route, key=WRONG)

    def bad_param(self, gw: Gateway, route: str) -> None:
        import litellm

        with pytest.raises(litellm.BadRequestError) as e:
            self.chat_call(gw, route, temperature=5)
        assert "temperature" in str(e.value)

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        c = self.text(gw, route, echo=True, logprobs=1)
        lp = c.choices[0].logprobs
        echoed(c.choices[0].text, lp.tokens, lp.token_logprobs, lp.text_offset)

    def tools(self, gw: Gateway, route: str) -> None:
        c = self.chat_call(gw, route, messages=TOOL_MESSAGES, tools=[WEATHER], tool_choice=NAMED,
                           max_tokens=TOOL_TOKENS)
        assert c.choices[0].finish_reason == "tool_calls"
        fn = c.choices[0].message.tool_calls[0].function
        called(fn.name, fn.arguments)
