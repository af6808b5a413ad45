"""Stop sequences held back across token boundaries while streaming (the scanner the engine
and the upstream emulation share)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.stops import StopScanner


def feed_all(m: StopScanner, pieces: list[str]) -> tuple[str, str | None]:
    out = ""
    for p in pieces:
        out += m.feed(p)
        if m.word:
            return out, m.word
    return out + m.flush(), None


def test_stop_split_across_pieces_is_removed():
    m = StopScanner(["STOP"], include=False)
    assert m.feed("hello S") == "hello "  # "S" held back
    assert m.feed("TO") == ""
    assert (m.feed("P and more"), m.word) == ("", "STOP")


def test_include_stop_str():
    assert feed_all(StopScanner(["\n\n"], include=True), ["a\n", "\nb"]) == ("a\n\n", "\n\n")


def test_held_text_released_when_it_cannot_match():
    m = StopScanner(["abc"], include=False)
    assert m.feed("xab") == "x"
    assert m.feed("x") == "abx"
    assert m.word is None


def test_earliest_stop_wins():
    assert feed_all(StopScanner(["world", "lo"], include=False), ["hello world"]) == ("hel", "lo")


@given(st.text(alphabet="abc", max_size=30), st.lists(st.integers(1, 5), max_size=10),
       st.sampled_from(["ab", "cab", "bb", "c"]))
def test_streaming_equals_whole_text(text, cuts, stop):
    pieces, i = [], 0
    for c in cuts:
        pieces.append(text[i:i + c])
        i += c
    pieces.append(text[i:])
    out, hit = feed_all(StopScanner([stop], include=False), pieces)
    if stop in text:
        assert hit == stop
        assert out == text[: text.index(stop)]
    else:
        assert hit is None
        assert out == text
