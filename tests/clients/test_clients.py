"""Every real client, unmodified, against one running gateway: each SDK x each call, on the engine
and on an upstream route. The outcomes are written to docs/clients.md (tests/clients/matrix.py)."""

from __future__ import annotations

import pytest

from tests.clients.conftest import Gateway
from tests.clients.drivers_frameworks import LangChain, LiteLLM
from tests.clients.drivers_sdks import Fireworks, OpenAISDK, ScaleGP, ScaleGPBeta
from tests.clients.matrix import CALLS, Cell, params

CLIENTS = [OpenAISDK(), LangChain(), Fireworks(), ScaleGP(), ScaleGPBeta(), LiteLLM()]
CELLS = [Cell(c.name, call, getattr(c, call)) for c in CLIENTS for call in CALLS]


@pytest.mark.parametrize(("cell", "route"), params(CELLS))
def test_client(gateway: Gateway, cell: Cell, route: str) -> None:
    cell.run(gateway, route)
