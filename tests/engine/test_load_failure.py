"""A built-in model that fails to load says so, with its cause, on ``/ready`` and in the log:
before, ``/ready`` answered "model is loading" forever after the load had failed (the engine
image without the embedder's weights). The embedder here is pointed at an empty folder, so its
process starts (torch and transformers imported) and fails to load."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tests.gateway.conftest import base_config, serve


async def test_a_failed_load_is_reported_as_failed_with_its_cause(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    empty = tmp_path / "no-model-here"
    empty.mkdir()
    cfg = base_config([
        {"name": "local/emb", "deployments": [
            {"name": "embedder", "backend": "embedder", "engine": {"path": str(empty), "threads": 1}}]},
        {"name": "v/up", "deployments": [{"name": "up", "backend": "upstream",
                                          "base_url": "http://127.0.0.1:9/v1"}]}])
    caplog.set_level(logging.ERROR, logger="switchyard")
    async with serve(cfg) as client:
        first = await client.get("/ready")
        assert first.status_code == 503
        assert first.json()["message"] == "model is loading: local/emb/embedder"  # at first, truly
        router = client.app.state.gateway.router  # type: ignore[attr-defined]
        for _ in range(2400):  # the embedder process imports torch and transformers, then fails
            if router.load_error(router.targets[0]) is not None:
                break
            await asyncio.sleep(0.05)
        r = await client.get("/ready")
        answer = await client.post("/v1/embeddings", json={"model": "local/emb", "input": "hi"})
        for _ in range(200):  # the line comes once the failed process is reaped
            if any("failed to load" in rec.getMessage() for rec in caplog.records):
                break
            await asyncio.sleep(0.05)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    message = r.json()["message"]
    assert message.startswith("model failed to load: local/emb/embedder (engine failed to load: "), message
    assert "No such file or directory" in message  # the cause: the folder holds no tokenizer
    assert "loading" not in message
    assert answer.status_code == 503 and "failed to load" in answer.json()["error"]["message"]
    logged = [rec.getMessage() for rec in caplog.records if "failed to load" in rec.getMessage()]
    assert logged and "No such file or directory" in logged[0], [rec.getMessage() for rec in caplog.records]
