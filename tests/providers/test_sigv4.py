"""SigV4 as botocore computes it: the same Authorization header, byte for byte, for the requests
boto3's own bedrock-runtime client makes (model ids with colons, ARNs with slashes, inference
profiles), with and without a session token, at a fixed clock."""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from switchyard.providers.aws.sigv4 import Credentials, SigV4, canonical_uri

NOW = datetime.datetime(2026, 11, 26, 4, 5, 6, tzinfo=datetime.UTC)
MODELS = [
    "anthropic.claude-3-5-sonnet-20240620-v1:0",
    "us.anthropic.claude-sonnet-4-20250514-v1:0",
    "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.meta.llama3-2-1b-instruct-v1:0",
    "arn:aws:bedrock:eu-west-1:123456789012:provisioned-model/abc def+x",
    "amazon.nova-lite-v1:0",
]
BODIES = [b"", b'{"messages":[{"role":"user","content":[{"text":"hi \xc3\xa9"}]}]}', b"x" * 70_000]


class _Captured(Exception):
    pass


def _boto_request(model: str, token: str | None, stream: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The request boto3's bedrock-runtime client signs and would send (caught before sending)."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    client = boto3.client("bedrock-runtime", region_name="us-west-2", aws_access_key_id="AKIDEXAMPLE",
                          aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                          aws_session_token=token, endpoint_url="http://127.0.0.1:9")
    seen: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        seen.append(request)
        raise _Captured

    op = "ConverseStream" if stream else "Converse"
    client.meta.events.register(f"before-send.bedrock-runtime.{op}", capture)
    call = client.converse_stream if stream else client.converse
    with pytest.raises(_Captured):
        call(modelId=model, messages=[{"role": "user", "content": [{"text": "hi é"}]}],
             inferenceConfig={"maxTokens": 5})
    return seen[0]


def _str(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEXAMPLE//token+/="])
@pytest.mark.parametrize("model", MODELS)
def test_same_authorization_as_boto3_client(model: str, token: str | None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for stream in (False, True):
        req = _boto_request(model, token, stream, monkeypatch)
        url = urlsplit(req.url)
        sent = {k.lower(): _str(v) for k, v in req.headers.items()}
        signer = SigV4("bedrock", "us-west-2", lambda: Credentials(
            "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token))
        names = sent["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
        assert "host" in names and "x-amz-date" in names
        mine = {n: sent[n] for n in names
                if n not in ("host", "x-amz-date", "x-amz-security-token")}
        ours = signer.sign("POST", url.netloc, url.path, url.query, mine, req.body, now=NOW.timestamp())
        assert ours["authorization"] == sent["authorization"]
        assert ours["x-amz-date"] == sent["x-amz-date"] == "20261126T040506Z"
        assert ours.get("x-amz-security-token") == sent.get("x-amz-security-token")


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("model", MODELS)
def test_same_as_sigv4auth_for_any_body(model: str, body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.utils import percent_encode
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: NOW.replace(tzinfo=None))
    path = f"/model/{percent_encode(model)}/converse"
    headers = {"content-type": "application/json", "x-custom": "  a   b  "}
    req = AWSRequest("POST", f"https://bedrock-runtime.us-east-1.amazonaws.com{path}?b=2&a=1",
                     data=body, headers=dict(headers))
    botocore.auth.SigV4Auth(BotoCredentials("AK", "SK", "TOK"), "bedrock", "us-east-1").add_auth(req)
    ours = SigV4("bedrock", "us-east-1", lambda: Credentials("AK", "SK", "TOK")).sign(
        "POST", "bedrock-runtime.us-east-1.amazonaws.com", path, "b=2&a=1", headers, body,
        now=NOW.timestamp())
    assert ours["authorization"] == req.headers["Authorization"]


def test_path_segments_are_encoded_twice() -> None:
    assert canonical_uri("/model/anthropic.claude-v1%3A0/converse") == \
        "/model/anthropic.claude-v1%253A0/converse"
    assert canonical_uri("/model/arn%3Aaws%3Ab%2Fp/invoke") == "/model/arn%253Aaws%253Ab%252Fp/invoke"


def test_signature_changes_with_body_time_and_key() -> None:
    s = SigV4("bedrock", "us-east-1", lambda: Credentials("AK", "SK"))
    base = s.sign("POST", "h", "/p", "", {}, b"a", now=1.8e9)["authorization"]
    assert s.sign("POST", "h", "/p", "", {}, b"b", now=1.8e9)["authorization"] != base
    assert s.sign("POST", "h", "/p", "", {}, b"a", now=1.8e9 + 1)["authorization"] != base
    other = SigV4("bedrock", "us-east-1", lambda: Credentials("AK", "SK2"))
    assert other.sign("POST", "h", "/p", "", {}, b"a", now=1.8e9)["authorization"] != base
    assert "x-amz-security-token" not in s.sign("POST", "h", "/p", "", {}, b"a")
