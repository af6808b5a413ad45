"""A proxy-only install (no ``ledger`` extra, no torch) works while usage.ledger is unset, and a
config that sets it fails at load with what to install."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import sys

class Missing:  # as if asyncpg and torch were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("asyncpg", "torch"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Missing())
import asyncio
import httpx
from switchyard.http.app import create_app
from switchyard.core.config import parse_config
from switchyard.core.settings import ConfigError

MK = "mk-0123456789abcdef"
raw = {"master_key": MK, "teams": [{"name": "t"}], "keys": [{"id": "k", "team": "t", "key": "sk-k"}],
       "models": [{"name": "openai/m", "deployments": [{"name": "d", "base_url": "http://127.0.0.1:9/v1"}]}]}

app = create_app(parse_config(raw))
async def go():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        r = await c.get("/admin/usage", headers={"authorization": f"Bearer {MK}"})
        assert r.status_code == 200 and r.json()["source"] == "store", r.text
        r = await c.get("/admin/usage", params={"status": "5xx"}, headers={"authorization": f"Bearer {MK}"})
        assert r.status_code == 400 and "usage.ledger" in r.json()["error"]["message"], r.text
asyncio.run(go())
assert "asyncpg" not in sys.modules
try:
    parse_config({**raw, "usage": {"ledger": "postgresql://127.0.0.1/x"}})
except ConfigError as e:
    assert "usage.ledger" in str(e) and "switchyard-gateway[ledger]" in str(e), str(e)
    print("ok")
'''


def test_no_ledger_extra_needed_without_a_ledger():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
