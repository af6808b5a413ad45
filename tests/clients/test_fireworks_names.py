"""Fireworks' own model names, as its SDK and LiteLLM's fireworks_ai provider send them
(``accounts/fireworks/models/<name>``), reach a fireworks-dialect route through its alias pattern."""

from __future__ import annotations

import fireworks

from tests.clients.conftest import Gateway
from tests.clients.drivers_sdks import MESSAGES
from tests.gateway.conftest import KEY

NAME = "accounts/fireworks/models/llama-v3p1-8b-instruct"


def test_fireworks_sdk_sends_its_own_names(gateway: Gateway) -> None:
    fw = fireworks.Fireworks(base_url=gateway.url + "/inference", api_key=KEY, max_retries=0, timeout=60)
    chat = fw.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=3)  # type: ignore[arg-type]
    assert chat.model == NAME and chat.choices[0].message.content == "w0 w1 w2"
    assert gateway.upstream.requests[-1].body["model"] == NAME  # the upstream knows it by that name
    text = fw.completions.create(model=NAME, prompt="hi", max_tokens=2)
    assert text.choices[0].text == "w0 w1" and gateway.upstream.requests[-1].body["model"] == NAME


def test_litellm_fireworks_provider(gateway: Gateway) -> None:
    import litellm

    r = litellm.completion(model="fireworks_ai/" + NAME, api_base=gateway.url + "/inference/v1", api_key=KEY,
                           messages=MESSAGES, max_tokens=3, num_retries=0, timeout=60)
    assert r.choices[0].message.content == "w0 w1 w2"
    assert gateway.upstream.requests[-1].body["model"] == NAME
