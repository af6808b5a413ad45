"""OpenAI's ``/v1/embeddings``: the request's rows, and the answer (``list`` of ``embedding``).

Inputs are read as completion prompts are (a string, strings, token ids, token-id arrays) into
``CanonicalRequest.prompt``; usage counts only prompt tokens. Vectors go out as JSON floats or,
with ``encoding_format: base64``, as little-endian float32 bytes in base64 (what the openai SDK
asks for by default and decodes with numpy).
"""

from __future__ import annotations

import base64
import sys
from array import array
from typing import Any

from switchyard.core.canonical import Completion
from switchyard.core.errors import InvalidRequest
from switchyard.dialects import common as c
from switchyard.dialects.render import Renderer
from switchyard.dialects.spec import INT, STR, Dialect, ErrorShape, Param

MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
_read_prompts = c.prompt_parser("input")


def _inputs(v: Any) -> list[Any]:
    prompts = _read_prompts(v)
    if len(prompts) > MAX_INPUTS:
        raise InvalidRequest(f"input allows at most {MAX_INPUTS} items (got {len(prompts)})", param="input")
    for i, p in enumerate(prompts):
        if not p:
            where = "input" if isinstance(v, str) else f"input[{i}]"
            raise InvalidRequest(f"{where} must not be empty", param=where)
    return prompts


EMBEDDINGS = Dialect(
    name="embeddings",
    params=(c.MODEL, c.USER,
            Param("input", "prompt", parse=_inputs),
            Param("dimensions", "dimensions", INT, ge=1),
            Param("encoding_format", "encoding_format", STR, choices=("float", "base64"))),
    errors=ErrorShape(validation_status=400),
    required={"prompt": "input"},
)


def b64_floats(vec: list[float]) -> str:
    a = array("f", vec)
    if sys.byteorder != "little":
        a.byteswap()
    return base64.b64encode(a.tobytes()).decode()


def floats_b64(data: str) -> list[float]:
    a = array("f")
    a.frombytes(base64.b64decode(data))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


class EmbeddingsRenderer(Renderer):
    object_name = "list"

    def completion(self, comp: Completion) -> dict[str, Any]:
        vectors = comp.choices[0].embeddings or [] if comp.choices else []
        b64 = self.req.encoding_format == "base64"
        u = comp.usage
        return {"object": "list", "model": self.req.model,
                "data": [{"object": "embedding", "index": i, "embedding": b64_floats(v) if b64 else v}
                         for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": u.prompt_tokens, "total_tokens": u.prompt_tokens}}
