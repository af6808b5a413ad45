"""A canonical chunk with every field set to something other than its default: what encodes a
chunk by position (the engine's pickles, the response cache's entries) must keep all of it."""

from __future__ import annotations

import msgspec

from switchyard.core.canonical import Chunk, TokenLogprob, Usage


def every_field_chunk() -> Chunk:
    lp = [TokenLogprob(token="a", logprob=-0.5, bytes=[97], top=[])]
    values = {"index": 3, "text": "hi", "finish_reason": "stop", "logprobs": lp,
              "usage": Usage(prompt_tokens=4, completion_tokens=2, cached_tokens=1), "tokens": 2,
              "role": "assistant", "tool_calls": [{"id": "c1"}], "prompt_logprobs": lp, "stop_word": "###",
              "more": True, "thinking": [{"type": "thinking_delta", "thinking": "t"}],
              "embeddings": [[0.5, -0.25]], "reasoning": "so"}
    defaults = {f.name: f.default for f in msgspec.structs.fields(Chunk)}
    assert set(values) == set(defaults) and all(values[k] != defaults[k] for k in defaults), \
        "a Chunk field this helper does not set"
    return Chunk(**values)
