"""Stop sequences held back across token boundaries while streaming (the scanner the engine
and the upstream emulation share)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.core.stops import StopScanner


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


def _metaspace_tokenizer():
    """A SentencePiece-style tokenizer (``▁`` for spaces, stripped at the start of a text, and
    byte fallback for characters it never saw)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10,
                            trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", *bytes_]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", bos_token="<s>")


TEXTS = ["the quick brown fox", " two  spaces and\ttabs\n\nnew lines", "émoji 😀 and 日本語 between words",
         "</s> a special token in the middle </s>", "🤖🤖"]


@pytest.mark.parametrize("which", ["tiny", "metaspace"])
def test_detokenizers_agree_with_decoding_the_whole_text(which, tiny_loaded):
    """Both detokenizers give, delta by delta, the text the tokenizer decodes after the context
    (never half a UTF-8 character, special tokens skipped, a SentencePiece leading space kept)."""
    from switchyard.engine.stops import CONTEXT, PrefixDetokenizer, StreamDetokenizer, detokenizer_for

    tok = tiny_loaded.tokenizer if which == "tiny" else _metaspace_tokenizer()
    for text in TEXTS:
        ids = tok.encode("the start " + text, add_special_tokens=False)
        for cut in range(1, len(ids)):  # every context, some ending mid-word, some before a space
            context, new = ids[:cut], ids[cut:]
            tail = context[-CONTEXT:]
            before = tok.decode(tail, skip_special_tokens=True)
            if "\ufffd" in before:  # a prompt of whole characters never ends inside one
                continue
            want = tok.decode(tail + new, skip_special_tokens=True)[len(before):]
            assert isinstance(detokenizer_for(tok)(context), StreamDetokenizer)
            for kind in (StreamDetokenizer, PrefixDetokenizer):
                d = kind(tok, context)
                deltas = [d.add(t) for t in new]
                assert "".join(deltas) == want, (kind, text, cut)
                assert not any("\ufffd" in x for x in deltas)


def test_a_tokenizer_that_cleans_up_spaces_decodes_twice():
    """``tokenizers``' stream decoder skips transformers' clean-up pass (" ." -> "."), so such a
    tokenizer keeps the exact two-decode detokenizer."""
    from switchyard.engine.stops import PrefixDetokenizer, detokenizer_for

    tok = _metaspace_tokenizer()
    tok.clean_up_tokenization_spaces = True
    assert isinstance(detokenizer_for(tok)([]), PrefixDetokenizer)
