"""``tickwork serve --concurrency N`` over real HTTP: each owner runs up to N
jobs of different queues at once; a queue still runs one at a time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.serve import Serve, job, owner_path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    serve = Serve(tmp_path_factory.mktemp("serve-concurrency") / "data",
                  "--concurrency", "3").start()
    try:
        yield serve
    finally:
        serve.stop()


def test_an_owner_runs_up_to_n_jobs_of_different_queues_at_once(server: Serve) -> None:
    client, owner = server.client(), "tenant-many"
    base = f"{owner_path(owner)}/jobs"
    assert client.enqueue(owner, *(job(name, "slow", queue=name)
                                   for name in ("exports", "payments", "mail")))[0] == 200
    for name in ("exports", "payments", "mail"):
        client.running(owner, name)  # all three at once: each stays running until cancelled
    assert client.enqueue(owner, job("reports", queue="reports"),
                          job("mail-2", queue="mail"))[0] == 200
    status, why = client.call("GET", f"{base}/reports/why")
    assert status == 200
    [hold] = why["holds"]
    assert hold["kind"] == "owner_busy"
    assert sorted(hold["job_ids"]) == ["exports", "mail", "payments"]
    assert hold["text"].startswith("the owner is at its concurrency (3 running): ")
    # One slot frees: the next job of another queue runs; the mail queue's
    # second job still waits for its head.
    assert client.call("POST", f"{base}/exports/cancel", {"cancellation_id": "c1"})[0] == 200
    assert client.settled(owner, "reports")["outcome"] == "completed"
    assert client.job(owner, "mail-2")["state"] == "queued"  # type: ignore[index]
    status, why = client.call("GET", f"{base}/mail-2/why")
    assert [hold["kind"] for hold in why["holds"]] == ["queue_busy"]
    for name in ("payments", "mail"):
        client.call("POST", f"{base}/{name}/cancel", {"cancellation_id": "c2"})
    assert client.settled(owner, "mail-2")["outcome"] == "completed"
    assert client.settled(owner, "payments")["outcome"] == "cancelled"


def test_a_bad_concurrency_is_refused_at_start(tmp_path_factory: pytest.TempPathFactory) -> None:
    serve = Serve(tmp_path_factory.mktemp("serve-bad") / "data", "--concurrency", "0")
    with pytest.raises(RuntimeError, match="serve exited with") as caught:
        serve.start(timeout_s=10)
    assert "--concurrency 0: must be 1 to 1000" in str(caught.value)


def test_a_queue_limit_set_over_http_lets_its_jobs_run_together(server: Serve) -> None:
    client, owner = server.client(), "tenant-wide"
    scope = owner_path(owner)
    assert client.call("POST", f"{scope}/limits",
                       {"kind": "queue", "key": "exports", "max_running": 2}) == (
        200, {"kind": "queue", "key": "exports", "changed": True})
    assert client.call("GET", f"{scope}/limits")[1]["limits"][0]["max_running"] == 2
    assert client.enqueue(owner, *(job(name, "slow", queue="exports")
                                   for name in ("e1", "e2", "e3")))[0] == 200
    client.running(owner, "e1")
    client.running(owner, "e2")  # two of one queue at once: its limit
    status, why = client.call("GET", f"{owner_path(owner)}/jobs/e3/why")
    assert status == 200
    [hold] = why["holds"]
    assert (hold["kind"], sorted(hold["job_ids"]), hold["limit"]) == (
        "queue_busy", ["e1", "e2"], 2)
    assert hold["text"].startswith("its queue runs at most 2 jobs at once and is running ")
    # A bad limit is refused by name and changes nothing.
    status, body = client.call("POST", f"{scope}/limits",
                               {"kind": "queue", "key": "exports", "max_running": 0})
    assert status == 400 and "max_running" in str(body)
    assert client.call("GET", f"{scope}/limits")[1]["limits"][0]["max_running"] == 2
    assert client.call("POST", f"{scope}/limits/clear", {"kind": "queue", "key": "exports"}) == (
        200, {"kind": "queue", "key": "exports", "changed": True})
    for name in ("e1", "e2", "e3"):
        client.call("POST", f"{scope}/jobs/{name}/cancel", {"cancellation_id": "c"})
    assert client.settled(owner, "e3")["outcome"] == "cancelled"
