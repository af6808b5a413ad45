"""Incremental detokenization. (Stop sequences: ``switchyard.core.stops.StopScanner``, shared with the
upstream backend's emulation.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

# Prompt tokens a detokenizer starts from: they give the first output token its proper leading
# space (SentencePiece decoders strip it at the start of a text).
CONTEXT = 4


class Detokenizer(Protocol):
    def add(self, token: int) -> str:
        """The text ``token`` completes (held back while it ends inside a UTF-8 character)."""
        ...


def detokenizer_for(tokenizer: Any) -> Callable[[list[int]], Detokenizer]:
    """The fastest exact detokenizer for ``tokenizer``, as a factory taking a prompt's tokens
    (chosen once per engine): the tokenizers library's own incremental decoder for a fast
    tokenizer whose ``decode`` does no clean-up pass (2.9 us a token against 23 for two decodes,
    SmolLM2's tokenizer, measured: per-row work that bounds a large batch's step on a GPU), else
    two decodes a token."""
    from transformers import PreTrainedTokenizerFast

    kind = (StreamDetokenizer if isinstance(tokenizer, PreTrainedTokenizerFast)
            and not tokenizer.clean_up_tokenization_spaces else PrefixDetokenizer)
    return lambda context: kind(tokenizer, context)


class StreamDetokenizer:
    """``tokenizers.decoders.DecodeStream``: decodes the tokens since the last text it gave."""

    def __init__(self, tokenizer: Any, context: list[int]) -> None:
        from tokenizers.decoders import DecodeStream

        self._backend = tokenizer.backend_tokenizer
        self._stream = DecodeStream(ids=list(context[-CONTEXT:]), skip_special_tokens=True)

    def add(self, token: int) -> str:
        return self._stream.step(self._backend, token) or ""


class PrefixDetokenizer:
    """Turns a growing token list into text deltas by decoding the tokens since the last text
    twice (with and without the new one), and never splits a multi-byte character (an
    incomplete one decodes to U+FFFD and is held back)."""

    def __init__(self, tokenizer: Any, context: list[int]) -> None:
        self._decode = tokenizer.decode
        self.ids: list[int] = list(context[-CONTEXT:])
        self.prefix = 0
        self.read = len(self.ids)

    def add(self, token: int) -> str:
        self.ids.append(token)
        prefix_text = self._decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        new_text = self._decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return new_text[len(prefix_text):]
        return ""
