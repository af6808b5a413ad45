"""Decode steps captured in CUDA graphs, one per batch-size bucket (as vLLM does).

On a GPU an eager decode step of a small model is launch-bound: ~35 ops a layer, each a kernel
launch of several microseconds whatever the batch, against ~1 us replayed inside a graph. A graph
needs fixed shapes and addresses, so the captured step is ``Runner.step_static``: the batch is
padded to a bucket, attention covers the cache's whole capacity under a position mask, inputs
come from persistent buffers, padding rows write to the cache's scratch slot, and the logits land
in a persistent output. The graphs are dropped and captured again when the cache reallocates.

With ``capture=False`` the same buffers and padding run eagerly: that is how the CPU test suite
checks the static step against the ordinary decode (the capture itself needs a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from switchyard.engine.kvcache import KVCache

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


class StaticStep(Protocol):
    """What the graphs need of the runner (``runner.Runner`` is one): its cache, tensors made on
    its device, and the static-shape step they capture. A protocol, so this module does not
    import the runner that imports it."""

    @property
    def cache(self) -> KVCache: ...

    def tensor(self, data: object, dtype: torch.dtype = ...) -> torch.Tensor: ...

    def step_static(self, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor) -> torch.Tensor: ...


@dataclass
class _Graph:
    inputs: torch.Tensor  # [3, bucket]: token ids, positions, slots written (one copy a step)
    logits: torch.Tensor | None = None
    graph: Any = None  # torch.cuda.CUDAGraph

    def step(self, runner: StaticStep) -> torch.Tensor:
        ids, pos, write = self.inputs
        return runner.step_static(ids, pos, write)


class GraphedDecode:
    def __init__(self, runner: StaticStep, capture: bool) -> None:
        self.runner = runner
        self.capture = capture
        slots = runner.cache.slots
        self.buckets = [b for b in BUCKETS if b < slots] + [slots]
        self._graphs: dict[int, _Graph] = {}
        self._generation = -1
        self._pool: Any = None

    def bucket(self, b: int) -> int:
        return next(x for x in self.buckets if x >= b)

    @torch.inference_mode()
    def decode(self, tokens: list[int]) -> torch.Tensor:
        """Same contract as ``Runner.decode``: logits ``[B, V]`` for slots ``0..B-1``."""
        r, cache = self.runner, self.runner.cache
        b = len(tokens)
        bucket = self.bucket(b)
        pos = [len(cache.tokens[s]) for s in range(b)]
        cache.ensure(max(pos) + 1, bucket)
        if cache.generation != self._generation:  # the graphs hold the old tensors
            self._graphs.clear()
            self._generation = cache.generation
        g = self._graphs.get(bucket) or self._make(bucket)
        pad = bucket - b
        g.inputs.copy_(torch.tensor([tokens + [0] * pad, pos + [0] * pad,
                                     list(range(b)) + [cache.scratch] * pad]), non_blocking=True)
        if g.graph is not None:
            g.graph.replay()
            logits = g.logits
        else:
            logits = g.step(r)
        for s in range(b):
            cache.tokens[s].append(tokens[s])
        assert logits is not None
        return logits[:b].float()

    def _make(self, bucket: int) -> _Graph:
        r = self.runner
        g = _Graph(inputs=r.tensor([[0] * bucket, [0] * bucket, [r.cache.scratch] * bucket]))
        if self.capture:
            # Warm up on a side stream (kernels pick their algorithms), then capture; during both
            # every row writes to the scratch slot, so no sequence's cache is touched.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    g.step(r)
            torch.cuda.current_stream().wait_stream(stream)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            g.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g.graph, pool=self._pool):
                g.logits = g.step(r)
        self._graphs[bucket] = g
        return g
