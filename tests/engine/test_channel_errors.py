"""What may cross the pipe from the engine process as an error: the classes in ``CROSSING``,
with their message and parameter; any other class arrives as a plain GatewayError (500)."""

from __future__ import annotations

from switchyard.core.errors import GatewayError, InvalidRequest, RateLimited, Unavailable
from switchyard.engine.channel import error_message, error_of


def test_known_errors_cross_as_themselves() -> None:
    for e in (InvalidRequest("top_k must be >= 0", param="top_k"), Unavailable("model is loading")):
        back = error_of(error_message(7, e))
        assert type(back) is type(e) and back.message == e.message and back.param == e.param
        assert back.status == e.status


def test_other_errors_cross_as_a_plain_gateway_error() -> None:
    class Local(InvalidRequest):  # a subclass the gateway side does not know
        pass

    for e in (Local("odd", param="x"), RateLimited("not an engine's to say")):
        back = error_of(error_message(7, e))
        assert type(back) is GatewayError and back.status == 500 and back.message == e.message
