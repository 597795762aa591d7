"""``tickwork.client`` under real Pyodide: the same scenario as tests/client,
through the Worker's fetch handler (JobOwner over RPC, Miniflare's D1), and
the module loads where Workers load it (runs inside Pyodide)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.support.client_scenario import names, scenario


class DeploymentFetch:
    """An AsyncTransport handing each request to the tier's ``Default.fetch``."""

    def __init__(self, deployment: Any) -> None:
        self.deployment = deployment

    async def send(self, request: Any, timeout_s: float) -> Any:
        from tests.pyodide.inside.deployment import BASE_URL
        from tickwork.client import HttpAnswer

        assert request.url.startswith(BASE_URL)
        status, text = await self.deployment.send(
            request.method, request.url[len(BASE_URL):], token=None,
            headers=dict(request.headers), raw=request.body)
        return HttpAnswer(status, {}, text.encode("utf-8"))


def test_the_client_loads_with_the_fetch_transport_by_default() -> None:
    from tickwork.client import AsyncClient, FetchTransport

    assert sys.platform == "emscripten"
    assert isinstance(AsyncClient("https://jobs.example").transport, FetchTransport)


@pytest.mark.parametrize("scope", ["owner", "shared"])
async def test_the_scenario_through_the_worker(deployment: Any, scope: str) -> None:
    from tests.pyodide.inside.deployment import BASE_URL, TOKEN
    from tickwork.client import AsyncClient

    client = AsyncClient(BASE_URL, token=TOKEN, transport=DeploymentFetch(deployment))
    jobs = client.owner(f"tier-owner-{next(names)}") if scope == "owner" else client.shared()
    await scenario(jobs, runs_beside=False)
