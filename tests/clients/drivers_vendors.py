"""The products' own SDKs: ``fireworks-ai`` and both Scale GenAI Platform generations
(``scale-gp``: ``/v4/beta/...``; ``scale-gp-beta``: ``/v5/...``)."""

from __future__ import annotations

from typing import Any

import fireworks
import pytest
import scale_gp
import scale_gp_beta

from tests.clients.checks import echoed, joined, names, same_text
from tests.clients.conftest import GREEDY, PROMPT, Gateway
from tests.clients.drivers_openai import MESSAGES, PART_MESSAGES, WRONG, parts_reached
from tests.gateway.conftest import KEY


class Fireworks:
    name = "fireworks-ai"

    @staticmethod
    def client(gw: Gateway, key: str = KEY) -> fireworks.Fireworks:
        return fireworks.Fireworks(base_url=gw.url + "/inference", api_key=key, max_retries=0, timeout=60)

    def completion(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY)
        same_text(gw, route, "completion", c.choices[0].text)

    def completion_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY, stream=True)
        same_text(gw, route, "completion", joined(ch.choices[0].text for ch in s))

    def chat(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).chat.completions.create(model=route, messages=MESSAGES,  # type: ignore[arg-type]
                                                    **GREEDY)
        same_text(gw, route, "chat", c.choices[0].message.content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).chat.completions.create(model=route, messages=MESSAGES,  # type: ignore[arg-type]
                                                    **GREEDY, stream=True)
        same_text(gw, route, "chat", joined(ch.choices[0].delta.content for ch in s))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).chat.completions.create(model=route, messages=PART_MESSAGES,  # type: ignore[arg-type]
                                                    **GREEDY)
        same_text(gw, route, "parts", c.choices[0].message.content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        with pytest.raises(fireworks.AuthenticationError):
            self.client(gw, WRONG).completions.create(model=route, prompt=PROMPT, max_tokens=1)

    def bad_param(self, gw: Gateway, route: str) -> None:
        with pytest.raises(fireworks.BadRequestError) as e:
            self.client(gw).completions.create(model=route, prompt=PROMPT, max_tokens=1, temperature=5)
        assert e.value.body["error"]["param"] == "temperature"  # type: ignore[index]

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY,
                                               echo=True, logprobs=1)
        lp: Any = c.choices[0].logprobs
        echoed(c.choices[0].text, lp.tokens, lp.token_logprobs, lp.text_offset)


class ScaleGP:
    """``scale-gp`` (0.1.0a62): ``/v4/beta/completions`` with an OpenAI-shaped body and
    ``/v4/beta/chat/completions``; validation errors are SGP's FastAPI 422."""

    name = "scale-gp"

    @staticmethod
    def client(gw: Gateway, key: str = KEY) -> Any:
        return scale_gp.SGPClient(base_url=gw.url, api_key=key, max_retries=0, timeout=60)

    def completion(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).beta.completions.create(model=route, prompt=PROMPT, **GREEDY)
        same_text(gw, route, "completion", c.choices[0].text)

    def completion_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).beta.completions.create(model=route, prompt=PROMPT, **GREEDY, stream=True)
        same_text(gw, route, "completion", joined(ch.choices[0].text for ch in s))

    def chat(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).beta.chat.completions.create(model=route, messages=MESSAGES,
                                                         **GREEDY)
        same_text(gw, route, "chat", c.choices[0].message.content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).beta.chat.completions.create(model=route, messages=MESSAGES,
                                                         **GREEDY, stream=True)
        same_text(gw, route, "chat", joined(ch.choices[0].delta.content for ch in s))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).beta.chat.completions.create(model=route, messages=PART_MESSAGES,
                                                         **GREEDY)
        same_text(gw, route, "parts", c.choices[0].message.content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        with pytest.raises(scale_gp.AuthenticationError):
            self.client(gw, WRONG).beta.completions.create(model=route, prompt=PROMPT, max_tokens=1)

    def bad_param(self, gw: Gateway, route: str) -> None:
        with pytest.raises(scale_gp.UnprocessableEntityError) as e:
            self.client(gw).beta.completions.create(model=route, prompt=PROMPT, max_tokens=1, temperature=5)
        names(e.value.body, "temperature")

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).beta.completions.create(model=route, prompt=PROMPT, **GREEDY, echo=True,
                                                    logprobs=1)
        lp = c.choices[0].logprobs
        echoed(c.choices[0].text, lp.tokens, lp.token_logprobs, lp.text_offset)


class ScaleGPBeta:
    """``scale-gp-beta`` (0.7): ``/v5/completions`` and ``/v5/chat/completions``."""

    name = "scale-gp-beta"

    @staticmethod
    def client(gw: Gateway, key: str = KEY) -> Any:
        return scale_gp_beta.SGPClient(base_url=gw.url, api_key=key, account_id="acct", max_retries=0,
                                       timeout=60)

    def completion(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY)
        same_text(gw, route, "completion", c.choices[0].text)

    def completion_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY, stream=True)
        same_text(gw, route, "completion", joined(ch.choices[0].text for ch in s))

    def chat(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).chat.completions.create(model=route, messages=MESSAGES, **GREEDY)
        same_text(gw, route, "chat", c.choices[0].message.content)

    def chat_stream(self, gw: Gateway, route: str) -> None:
        s = self.client(gw).chat.completions.create(model=route, messages=MESSAGES, **GREEDY, stream=True)
        same_text(gw, route, "chat", joined(ch.choices[0].delta.content for ch in s))

    def chat_parts(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).chat.completions.create(model=route, messages=PART_MESSAGES,
                                                    **GREEDY)
        same_text(gw, route, "parts", c.choices[0].message.content)
        parts_reached(gw, route)

    def bad_key(self, gw: Gateway, route: str) -> None:
        with pytest.raises(scale_gp_beta.AuthenticationError):
            self.client(gw, WRONG).completions.create(model=route, prompt=PROMPT, max_tokens=1)

    def bad_param(self, gw: Gateway, route: str) -> None:
        with pytest.raises(scale_gp_beta.UnprocessableEntityError) as e:
            self.client(gw).completions.create(model=route, prompt=PROMPT, max_tokens=1, temperature=5)
        names(e.value.body, "temperature")

    def logprobs_echo(self, gw: Gateway, route: str) -> None:
        c = self.client(gw).completions.create(model=route, prompt=PROMPT, **GREEDY,
                                               echo=True, logprobs=1)
        lp = c.choices[0].logprobs
        echoed(c.choices[0].text, lp.tokens, lp.token_logprobs, lp.text_offset)
