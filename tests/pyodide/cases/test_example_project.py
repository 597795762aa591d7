"""examples/cloudflare-worker under real Pyodide: its ``src/entry.py`` is the
main module, built by the runtime stand-in under each SDK shape; its
executors run owner jobs on the alarm and shared jobs on the cron drain
(runs inside Pyodide)."""

from __future__ import annotations

from typing import Any

from tests.support.example_scenario import EXPECTED, ingest_receipts, outcomes


async def test_the_example_main_module_serves_and_runs_owner_jobs(
        example_deployment: Any) -> None:
    async def send(method: str, path: str, body: Any) -> tuple[int, str]:
        return await example_deployment.send(method, path, body)

    await ingest_receipts(send, "owners/tenant")
    await example_deployment.alarm("tenant")
    assert await outcomes(send, "owners/tenant") == EXPECTED


async def test_the_example_main_module_drains_shared_jobs_on_cron(
        example_deployment: Any) -> None:
    async def send(method: str, path: str, body: Any) -> tuple[int, str]:
        return await example_deployment.send(method, path, body)

    await ingest_receipts(send, "shared")
    await example_deployment.scheduled(1_796_000_000_000)
    assert await outcomes(send, "shared") == EXPECTED
