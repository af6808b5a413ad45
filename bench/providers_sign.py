"""Cost of the per-request pieces of the Bedrock lane, per call: SigV4 signing of a Converse
request (the issue's target: <= 30 us) against botocore's own SigV4Auth in the same run, and
decoding a ConverseStream answer's event-stream frames against botocore's EventStreamBuffer.

    .venv/bin/python bench/providers_sign.py [--n 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from switchyard.providers.aws.eventstream import FrameReader, encode_frame
from switchyard.providers.aws.sigv4 import Credentials, SigV4

HOST = "bedrock-runtime.us-east-1.amazonaws.com"
PATH = "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
BODY = b'{"messages":[{"role":"user","content":[{"text":"' + b"hello " * 300 + b'"}]}],' \
       b'"inferenceConfig":{"maxTokens":256}}'


def per_call(fn: Callable[[], object], n: int) -> float:
    for _ in range(min(n, 1000)):
        fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
    signer = SigV4("bedrock", "us-east-1", lambda: creds)
    headers = {"content-type": "application/json"}
    ours = per_call(lambda: signer.sign("POST", HOST, PATH, "", headers, BODY), n)

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials
    boto = SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.token), "bedrock", "us-east-1")

    def boto_sign() -> None:
        boto.add_auth(AWSRequest("POST", f"https://{HOST}{PATH}", data=BODY, headers=dict(headers)))
    theirs = per_call(boto_sign, max(n // 10, 100))
    print(f"sign a Converse request ({len(BODY)} B body): switchyard {ours:.1f} us, "
          f"botocore SigV4Auth {theirs:.1f} us ({theirs / ours:.1f}x)")

    frames = b"".join(encode_frame({":message-type": "event", ":event-type": "contentBlockDelta",
                                    ":content-type": "application/json"},
                                   b'{"contentBlockIndex":0,"delta":{"text":"token "},"p":"abcdefgh"}')
                      for _ in range(100))

    def ours_decode() -> None:
        r = FrameReader()
        r.feed(frames)

    from botocore.eventstream import EventStreamBuffer

    def boto_decode() -> None:
        b = EventStreamBuffer()
        b.add_data(frames)
        for _ in b:
            pass
    a = per_call(ours_decode, max(n // 100, 20))
    b = per_call(boto_decode, max(n // 100, 20))
    print(f"decode 100 ConverseStream frames: switchyard {a:.1f} us, botocore EventStreamBuffer {b:.1f} us "
          f"({b / a:.1f}x)")


if __name__ == "__main__":
    main()
