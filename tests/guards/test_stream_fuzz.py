"""The chunk-boundary fuzz through the real gateway: the fake upstream streams an answer in which
every built-in detector's samples are each split at a position, across two chunks and across
three; for every position, an OpenAI chat caller and an Anthropic Messages caller read no sample,
and read exactly the whole text's redaction. (Every pair of three-way splits, and the long key
block at every position, are in tests/guards/test_stream.py, on the stream holder itself.)"""

from __future__ import annotations

import itertools
import re

import pytest

from switchyard.core.guardrails import BUILT_IN_DETECTORS
from switchyard.guards.detectors import BUILT_IN
from switchyard.guards.scan import apply, scan
from tests.fakes.upstream import Behaviour, FakeUpstream
from tests.gateway.conftest import serve
from tests.guards.corpus import PEM, POSITIVE
from tests.guards.helpers import ANTHROPIC, MODEL, guarded, streamed_text

SAMPLES = [s for samples in POSITIVE.values() for s in samples if s != PEM]
LONGEST = max(len(s) for s in SAMPLES)
GUARD = [{"name": "all", "detectors": list(BUILT_IN_DETECTORS), "direction": "response"}]
SEP = " and "
_PH = re.compile(r"\[[A-Z_]+_\d+\]")


def expected(text: str) -> str:
    hits, _ = scan([(d, n) for n, d in BUILT_IN.items()], text)
    return apply(text, hits, lambda h, m: "[X]")


def pieces(cuts: list[tuple[str, list[int]]]) -> list[str]:
    out = ["Here:"]
    for s, at in cuts:
        edges = [0, *sorted(min(a, len(s)) for a in at), len(s)]
        out.append(SEP)
        out += [s[a:b] for a, b in itertools.pairwise(edges) if b > a]
    return [*out, " done"]


def splits(three: bool) -> list[list[str]]:
    runs = []
    for i in range(LONGEST + 1):
        cuts = [(s, [i, (i * 7 + 3) % (len(s) + 1)] if three else [i]) for s in SAMPLES]
        cuts.append((PEM, [i * 3, i * 3 + 40] if three else [i * 3]))  # the key block, coarser
        runs.append(pieces(cuts))
    return runs


async def read(gw, anthropic: bool, parts: list[str]) -> str:  # type: ignore[no-untyped-def]
    body = {"model": MODEL, "stream": True, "max_tokens": 9, "messages": [{"role": "user", "content": "go"}]}
    if anthropic:
        r = await gw.post("/v1/messages", headers=ANTHROPIC, json=body)
    else:
        r = await gw.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return streamed_text(r.text)


@pytest.mark.parametrize("three", [False, True], ids=["two-chunks", "three-chunks"])
@pytest.mark.parametrize("anthropic", [False, True], ids=["openai-chat", "anthropic-messages"])
async def test_no_sample_leaks_at_any_split(anthropic: bool, three: bool) -> None:
    async with FakeUpstream() as up, serve(guarded(up.url, model=GUARD)) as gw:
        for parts in splits(three):
            whole = "".join(parts)
            up.script.append(Behaviour(pieces=parts))
            got = await read(gw, anthropic, parts)
            for s in [*SAMPLES, PEM]:
                assert s not in got
            assert _PH.sub("[X]", got) == expected(whole), parts
