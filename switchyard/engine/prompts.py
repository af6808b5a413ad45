"""From a canonical request to token ids: chat template, prompt forms, fill-in-the-middle,
max_tokens defaults and context overflow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard.core.canonical import UNLIMITED, CanonicalRequest
from switchyard.core.errors import InvalidRequest
from switchyard.dialects.defaults import sampling_defaults
from switchyard.engine.tools import plan, render_messages

# (prefix, suffix, middle) special tokens of the FIM conventions we recognise.
FIM_STYLES = [
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, SmolLM code models
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
    ("<PRE>", "<SUF>", "<MID>"),  # CodeLlama
]


@dataclass
class Prompt:
    ids: list[int]
    text: str  # for echo


def fim_tokens(tokenizer: Any) -> tuple[int, int, int] | None:
    vocab = tokenizer.get_vocab()
    for style in FIM_STYLES:
        if all(t in vocab for t in style):
            return vocab[style[0]], vocab[style[1]], vocab[style[2]]
    return None


def encode(tokenizer: Any, text: str, special: bool) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=special)


def build_prompts(tokenizer: Any, req: CanonicalRequest, vocab_size: int) -> list[Prompt]:
    if req.kind == "chat":
        if not req.messages:
            raise InvalidRequest("messages must be a non-empty list", param="messages")
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidRequest("this model has no chat template; use completions", param="messages")
        messages = render_messages(template_messages(req.messages), plan(req))
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as e:
            raise InvalidRequest(f"messages do not fit the chat template: {e}", param="messages") from None
        return [Prompt(encode(tokenizer, text, special=False), text)]
    if not req.prompt:
        raise InvalidRequest("prompt must not be empty", param="prompt")
    out = []
    for p in req.prompt:
        if isinstance(p, str):
            ids, text = encode(tokenizer, p, special=True), p
        elif isinstance(p, list):
            ids = []
            for part in p:
                if isinstance(part, str):
                    ids += encode(tokenizer, part, special=False)
                elif isinstance(part, int) and not isinstance(part, bool):
                    if not 0 <= part < vocab_size:
                        raise InvalidRequest(f"token id {part} is not in the vocabulary", param="prompt")
                    ids.append(part)
                else:
                    raise InvalidRequest("prompt lists hold token ids and strings", param="prompt")
            text = tokenizer.decode(ids)
        else:
            raise InvalidRequest("each prompt is a string or a list of token ids", param="prompt")
        if req.suffix is not None:
            fim = fim_tokens(tokenizer)
            if fim is None:
                raise InvalidRequest("suffix needs fill-in-the-middle tokens, which this model's tokenizer "
                                     "does not have", param="suffix")
            pre, suf, mid = fim
            ids = [pre, *ids, suf, *encode(tokenizer, req.suffix, special=False), mid]
        if not ids:
            raise InvalidRequest("prompt must not be empty", param="prompt")
        out.append(Prompt(ids, text))
    return out


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with string contents, as plain chat templates expect: a list of text parts
    (what the OpenAI SDK and agent frameworks send) is joined; other parts are refused."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if content is None or isinstance(content, str):
            text = content or ""
        elif isinstance(content, list):
            text = "\n".join(_text_part(i, j, part) for j, part in enumerate(content))
        else:
            raise InvalidRequest(f"messages[{i}].content must be a string or a list of content parts",
                                 param=f"messages[{i}].content")
        out.append({**m, "content": text})
    return out


def _text_part(i: int, j: int, part: Any) -> str:
    where = f"messages[{i}].content"
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return part["text"]
    if kind == "text" or not isinstance(kind, str):
        raise InvalidRequest(f'{where}[{j}] must be a {{"type": "text", "text": string}} part', param=where)
    raise InvalidRequest(f"{where}[{j}] is a {kind!r} part; this model reads only text parts", param=where)


def fit(req: CanonicalRequest, prompt: Prompt, context: int) -> int:
    """Apply the overflow policy; returns max_tokens (may shorten ``prompt.ids`` in place)."""
    d = sampling_defaults(req.dialect)
    mt = req.max_tokens
    if mt is None:
        mt = None if req.kind == "chat" else d.get("max_tokens")
    if mt is not None and mt != UNLIMITED and mt < 0:
        raise InvalidRequest(f"max_tokens must be >= 0 (or -1 for unlimited), got {mt}", param="max_tokens")
    policy = req.overflow or d.get("overflow") or "error"
    p = len(prompt.ids)
    open_ended = mt is None or mt == UNLIMITED
    if open_ended:
        if p >= context and policy == "truncate_prompt":
            del prompt.ids[: p - (context - 1)]
            p = len(prompt.ids)
        if p >= context:
            where = "messages" if req.kind == "chat" else "prompt"
            raise InvalidRequest(_too_long(context, p, 0), param=where)
        return context - p
    assert mt is not None  # not open-ended
    if p + mt <= context:
        return mt
    if policy == "truncate_max_tokens" and p < context:
        return context - p
    if policy == "truncate_prompt" and mt < context:
        del prompt.ids[: p + mt - context]
        return mt
    raise InvalidRequest(_too_long(context, p, mt), param="max_tokens" if p < context else "prompt")


def _too_long(context: int, p: int, c: int) -> str:
    return (f"This model's maximum context length is {context} tokens. However, you requested "
            f"{p + c} tokens ({p} in the messages, {c} in the completion). Please reduce the length "
            f"of the messages or completion.")
