"""What the example project's Worker does, checked the same way on CPython
(stand-ins, Miniflare's D1) and under real Pyodide: its executors run owner
jobs on the Durable Object's alarm and shared jobs on the cron drain."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

#: ``send(method, path, body) -> (status, body text)`` through the Worker's fetch.
Send = Callable[[str, str, Any], Awaitable[tuple[int, str]]]


async def ingest_receipts(send: Send, scope: str) -> None:
    status, text = await send("POST", f"/v1/{scope}/jobs", {"jobs": [
        {"job_id": "r-1", "queue": "receipts", "payload": {"email": "a@example.com"}},
        {"job_id": "r-2", "queue": "receipts", "payload": {}},
    ]})
    assert status == 200, text
    assert [item["status"] for item in json.loads(text)["jobs"]] == ["queued", "queued"]


async def outcomes(send: Send, scope: str) -> dict[str, tuple[Any, ...]]:
    found = {}
    for job_id in ("r-1", "r-2"):
        status, text = await send("GET", f"/v1/{scope}/jobs/{job_id}", None)
        assert status == 200, text
        job = json.loads(text)["job"]
        found[job_id] = (job["state"], job.get("outcome"), job.get("failure_reason"))
    return found


EXPECTED = {"r-1": ("settled", "completed", None), "r-2": ("settled", "failed", "no_email")}
