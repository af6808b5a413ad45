"""The gateway fixtures (a fake upstream, a served gateway) for these tests."""

from tests.gateway.conftest import gateway_for, upstream  # noqa: F401
from tests.http.roles_world import world  # noqa: F401
