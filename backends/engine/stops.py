"""Incremental detokenization. (Stop sequences: ``gateway.stops.StopScanner``, shared with the
upstream backend's emulation.)"""

from __future__ import annotations

from typing import Any


class Detokenizer:
    """Turns a growing token list into text deltas without re-decoding everything, and never
    splits a multi-byte character (an incomplete one decodes to U+FFFD and is held back)."""

    def __init__(self, tokenizer: Any, context: list[int]) -> None:
        self._decode = tokenizer.decode
        # A few prompt tokens give the first output token its proper leading space.
        self.ids: list[int] = list(context[-4:])
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
