"""A shared enqueue commits the deployment's own rows and the jobs in one D1 batch:
both land, or neither does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.support.worker import job, send, use_deployment_hook

pytestmark = pytest.mark.usefixtures("js_module")


@pytest.fixture
async def orders(db: Any, worker: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """A domain hook writing one ``orders`` row per job (strictly: a second row
    for the same job id fails the statement, so the tests can make it fail)."""
    await db.prepare("CREATE TABLE orders (job_id TEXT PRIMARY KEY, note TEXT NOT NULL)").run()
    calls: list[list[str]] = []

    def domain_statements(env: Any, jobs: Sequence[Any]) -> list[Any]:
        calls.append([item.job_id for item in jobs])
        return [env.DB.prepare("INSERT INTO orders (job_id, note) VALUES (?1, ?2)")
                .bind(item.job_id, f"order for {item.queue}") for item in jobs]

    use_deployment_hook(monkeypatch, "domain_statements", domain_statements)
    return calls


async def rows(query: Any) -> tuple[list[Any], list[Any]]:
    return (sorted(await query("SELECT job_id, note FROM orders")),
            sorted(await query("SELECT job_id, payload_json FROM tickwork_jobs")))


async def test_domain_rows_and_jobs_commit_together(
        worker: Any, shape: str, orders: list[list[str]], query: Any) -> None:
    status, body = await send(worker, shape, "POST", "/v1/shared/jobs",
                              {"jobs": [job("o1", payload={"n": 1}), job("o2", queue="ship")]})
    assert status == 200 and [item["status"] for item in body["jobs"]] == ["queued", "queued"]
    assert orders == [["o1", "o2"]]
    assert await rows(query) == (
        [("o1", "order for q"), ("o2", "order for ship")],
        [("o1", '{"n":1}'), ("o2", "null")])


async def test_a_conflicting_job_rolls_back_the_domain_rows(
        worker: Any, shape: str, orders: list[list[str]], query: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await send(worker, shape, "POST", "/v1/shared/jobs", job("o1", payload={"n": 1}))
    before = await rows(query)
    # A new order o2 plus a replay of o1 with other cargo: the trigger fails the batch.
    def new_rows_only(env: Any, jobs: Sequence[Any]) -> list[Any]:
        return [env.DB.prepare("INSERT INTO orders (job_id, note) VALUES (?1, 'new')")
                .bind(item.job_id) for item in jobs if item.job_id != "o1"]

    use_deployment_hook(monkeypatch, "domain_statements", new_rows_only)
    status, body = await send(worker, shape, "POST", "/v1/shared/jobs",
                              {"jobs": [job("o2"), job("o1", payload={"n": 2})]})
    assert (status, body["error"]["code"]) == (409, "ingest_conflict")
    assert "'o1'" in body["error"]["message"] and "payload" in body["error"]["message"]
    assert await rows(query) == before


async def test_a_failing_domain_statement_stores_no_job(
        worker: Any, shape: str, orders: list[list[str]], query: Any) -> None:
    await send(worker, shape, "POST", "/v1/shared/jobs", job("o1"))
    before = await rows(query)
    # orders already has o1: the hook's INSERT fails, so the new job o3 must not land.
    status, body = await send(worker, shape, "POST", "/v1/shared/jobs",
                              {"jobs": [job("o3"), job("o1")]})
    assert (status, body) == (500, {"error": {"code": "internal_error",
                                              "message": "internal error"}})
    assert await rows(query) == before


async def test_an_identical_replay_reports_duplicate(
        worker: Any, shape: str, db: Any, query: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    await db.prepare("CREATE TABLE orders (job_id TEXT PRIMARY KEY, note TEXT)").run()
    def idempotent(env: Any, jobs: Sequence[Any]) -> list[Any]:
        return [env.DB.prepare("INSERT INTO orders (job_id) VALUES (?1) ON CONFLICT DO NOTHING")
                .bind(item.job_id) for item in jobs]

    use_deployment_hook(monkeypatch, "domain_statements", idempotent)
    first = await send(worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("a"), job("b")]})
    again = await send(worker, shape, "POST", "/v1/shared/jobs",
                       {"jobs": [job("a"), job("c"), job("c")]})
    assert [item["status"] for item in first[1]["jobs"]] == ["queued", "queued"]
    assert [item["status"] for item in again[1]["jobs"]] == ["duplicate", "queued", "duplicate"]
    assert sorted(await query("SELECT job_id FROM orders")) == [("a",), ("b",), ("c",)]


async def test_an_async_hook_works_too(worker: Any, shape: str, db: Any, query: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    await db.prepare("CREATE TABLE audit (job_id TEXT)").run()
    async def hook(env: Any, jobs: Sequence[Any]) -> list[Any]:
        return [env.DB.prepare("INSERT INTO audit VALUES (?1)").bind(jobs[0].job_id)]

    use_deployment_hook(monkeypatch, "domain_statements", hook)
    assert (await send(worker, shape, "POST", "/v1/shared/jobs", job("a")))[0] == 201
    assert await query("SELECT job_id FROM audit") == [("a",)]
