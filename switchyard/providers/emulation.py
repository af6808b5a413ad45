"""What the gateway does itself to an upstream's answer: stop sequences the upstream could not
carry (and whether the stop string stays), and echo of the prompt."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.core.canonical import CanonicalRequest, Chunk
from switchyard.core.stops import StopScanner


@dataclass(slots=True)
class Emulation:
    """What the gateway does itself on the way back."""

    stop: list[str] | None = None  # apply these stop sequences to the returned text
    include_stop: bool = False  # ... keeping the stop string in the text
    echo: str | None = None  # prepend this prompt text


class Emulator:
    """Gateway-applied stop sequences and echo, per choice."""

    def __init__(self, emulation: Emulation) -> None:
        self.emulation = emulation
        self.scanners: dict[int, StopScanner] = {}
        self.echoed: set[int] = set()
        self.stopped: set[int] = set()

    def apply(self, chunks: list[Chunk]) -> list[Chunk]:
        em = self.emulation
        if em.stop is None and em.echo is None:
            return chunks
        out = []
        for ch in chunks:
            i = ch.index
            if i in self.stopped:
                if ch.usage is not None:  # usage still counts after a gateway stop
                    out.append(Chunk(index=i, usage=ch.usage))
                continue
            if em.echo is not None and i not in self.echoed and (ch.text or ch.finish_reason):
                self.echoed.add(i)
                ch.text = em.echo + ch.text
            if em.stop is not None:
                sc = self.scanners.get(i)
                if sc is None:
                    sc = self.scanners[i] = StopScanner(em.stop, em.include_stop)
                ch.text = sc.feed(ch.text)
                if sc.word is not None:
                    ch.finish_reason, ch.stop_word = "stop", sc.word
                    self.stopped.add(i)
                elif ch.finish_reason is not None:
                    ch.text += sc.flush()
            out.append(ch)
        return out

    def all_stopped(self, req: CanonicalRequest) -> bool:
        total = len(req.prompt or [None]) * req.choices_per_prompt
        return bool(self.stopped) and len(self.stopped) >= total
