"""Credentials off the event loop: a fetched credential (Vertex's OAuth token, the AWS credential
chain) is kept fresh by a task of its own deployment. A token endpoint that stalls fails only that
deployment's requests (a 503 naming it, within their deadline) and delays no other deployment on
the same process; a chain that cannot fetch credentials is a 502 naming the deployment, not a 500."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from pathlib import Path

import pytest

from tests.fakes.bedrock import FakeBedrock
from tests.fakes.gemini import FakeGemini, FakeTokenServer, vertex_dep
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import base_config, upstream_model

HI = [{"role": "user", "content": "hi"}]
STALL = 10.0


async def test_a_stalled_vertex_token_endpoint_delays_no_other_deployment(
        gateway_for, upstream: FakeUpstream, tmp_path: Path) -> None:
    async with FakeGemini() as fake:
        with FakeTokenServer(b"", fake.tokens) as tokens:
            tokens.stall = STALL  # Google's token endpoint in trouble: every grant takes 10 s
            dep, info = vertex_dep(tokens, tmp_path, fake.url, "gemini-2.5-pro")
            dep["timeout"] = 2.0  # the vertex requests' deadline
            cfg = base_config([{"name": "gcp/pro", "deployments": [dep]},
                               upstream_model("oa/x", upstream.url)])
            async with gateway_for(cfg) as client:
                t0 = time.monotonic()
                vertex = asyncio.create_task(
                    client.post("/v1/chat/completions", json={"model": "gcp/pro", "messages": HI}))
                await asyncio.sleep(0)  # the vertex request goes first
                latencies = []
                for _ in range(5):
                    start = time.monotonic()
                    r = await client.post("/v1/chat/completions", json={"model": "oa/x", "messages": HI})
                    assert r.status_code == 200, r.text
                    latencies.append(time.monotonic() - start)
                others_done = time.monotonic() - t0
                failed = await vertex
                vertex_done = time.monotonic() - t0
    # The other deployment never waited for the token endpoint (each call is local, milliseconds;
    # on a blocked loop each would wait out the stall).
    assert others_done < STALL / 2 and max(latencies) < STALL / 4, (others_done, latencies)
    # The vertex request failed on its own deadline, naming its deployment and what it lacked.
    assert failed.status_code == 503, failed.text
    message = failed.json()["error"]["message"]
    assert "upstream v" in message and "Google OAuth token" in message, message
    assert vertex_done < STALL, vertex_done
    assert info["private_key"] not in failed.text
    assert fake.requests == []  # nothing was sent to Vertex unsigned


def _credential_process(folder: Path) -> Path:
    """A credential_process (the AWS CLI's contract) that answers once with credentials about to
    expire, then fails: the chain's next refresh cannot fetch any."""
    mark = folder / "answered"
    expires = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    answer = json.dumps({"Version": 1, "AccessKeyId": "AKIAPROCESSKEY000000",
                         "SecretAccessKey": "proc-secret", "SessionToken": "proc-token",
                         "Expiration": expires})
    script = folder / "creds.sh"
    script.write_text(f"#!/bin/sh\nif [ -e '{mark}' ]; then echo 'denied' >&2; exit 1; fi\n"
                      f"touch '{mark}'\necho '{answer}'\n")
    script.chmod(0o755)
    return script


async def test_aws_credentials_that_cannot_be_fetched_are_a_502_naming_the_deployment(
        gateway_for, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {_credential_process(tmp_path)}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    async with FakeBedrock() as fake:
        dep = {"name": "b1", "backend": "upstream", "provider": "bedrock", "base_url": fake.url,
               "region": "us-east-1", "model": "anthropic.claude-3-5-sonnet-20240620-v1:0"}
        async with gateway_for(base_config([{"name": "aws/claude", "deployments": [dep]}])) as client:
            r = await client.post("/v1/chat/completions", json={"model": "aws/claude", "messages": HI})
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "upstream b1" in message and "AWS credentials" in message, message
    assert "proc-secret" not in r.text and "denied" not in r.text
    assert fake.requests == []
