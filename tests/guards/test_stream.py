"""The stream guard at unit level: every sample of every detector, split at every position
across two chunks and at every pair of positions across three, is redacted exactly as the whole
text is, and nothing else waits longer than a match may still be forming."""

from __future__ import annotations

import itertools

import pytest

from switchyard.core.guardrails import BUILT_IN_DETECTORS
from switchyard.guards.detectors import BUILT_IN
from switchyard.guards.scan import Hit, Holder, apply, scan
from tests.guards.corpus import POSITIVE

ENTRIES = [(d, n) for n, d in BUILT_IN.items()]
SPAN = max(d.span for d in BUILT_IN.values())


def tag(h: Hit[str], matched: str) -> str:
    return f"[{h.detector.tag}]"


def whole(text: str) -> str:
    hits, _ = scan(ENTRIES, text)
    return apply(text, hits, tag)


def streamed(pieces: list[str]) -> str:
    h = Holder(ENTRIES, tag)
    out = []
    for p in pieces:
        out.append(h.feed(p))
        assert h.held <= SPAN
    out.append(h.feed("", final=True))
    return "".join(out)


@pytest.mark.parametrize("name", BUILT_IN_DETECTORS)
def test_every_split_is_redacted_as_the_whole(name: str) -> None:
    for sample in POSITIVE[name]:
        text = f"is {sample} ok"
        expect = whole(text)
        assert sample not in expect and f"[{BUILT_IN[name].tag}]" in expect
        for i in range(len(text) + 1):
            assert streamed([text[:i], text[i:]]) == expect, (sample, i)
        # Three chunks: every pair of cut points (for the long key block, every 20th first cut).
        firsts = range(0, len(text) + 1, 20 if len(text) > 100 else 1)
        for i in firsts:
            for j in range(i, len(text) + 1):
                assert streamed([text[:i], text[i:j], text[j:]]) == expect, (sample, i, j)


def test_a_stream_of_samples_one_character_a_chunk() -> None:
    text = " ".join(s for samples in POSITIVE.values() for s in samples)
    assert streamed(list(text)) == whole(text)


def test_plain_text_is_not_held() -> None:
    h = Holder(ENTRIES, tag)
    assert h.feed("The answer is forty two, ") == "The answer is forty two, "
    assert h.feed("mail me at ") == "mail me at "
    # A word may start an email address: it waits for what follows, and only it.
    assert h.feed("jane") == ""
    assert h.feed(".doe@example.com is mine") == "[EMAIL] is "
    assert h.feed("", final=True) == "mine"


def test_digits_wait_only_while_a_number_may_grow() -> None:
    h = Holder(ENTRIES, tag)
    assert h.feed("card 4111 1111") == "card "
    assert h.feed(" 1111 1111 ok") == "[PAYMENT_CARD] "  # "ok" may begin an email address
    assert h.feed(", ") == "ok, "


@pytest.mark.parametrize("pieces", [["x" * 50] * 40, ["ab" * 700]])
def test_the_hold_never_exceeds_the_longest_span(pieces: list[str]) -> None:
    """Text that stays a possible match (a long run of key-ish characters) is released once it
    can no longer be one."""
    h = Holder(ENTRIES, tag)
    for p in itertools.chain(pieces):
        h.feed(p)
        assert h.held <= SPAN
