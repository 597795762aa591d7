"""``tickwork serve`` reports events: Prometheus text at /v1/metrics, and
every ``--on-event`` hook, over real HTTP to a real server process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.serve import ROOT, TOKEN, Serve, job
from tests.unit.test_metrics import parse


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Path]]:
    directory = tmp_path_factory.mktemp("observed")
    events = directory / "events.jsonl"
    serve = Serve(directory / "data", "--on-event", "tests.support.event_hooks:broken",
                  "--on-event", "tests.support.event_hooks:record",
                  env={"TICKWORK_TEST_EVENTS": str(events)}).start()
    try:
        yield serve, events
    finally:
        serve.stop()


def get(serve: Serve, path: str, token: str | None = TOKEN,
        method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(serve.url + path, method=method)
    if token is not None:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def test_metrics_count_what_the_runtimes_did(observed: tuple[Serve, Path]) -> None:
    serve, events = observed
    client = serve.client()
    client.enqueue("metered", job("ok"), job("no", "fail", payload={"reason": "nope"}))
    assert client.settled("metered", "ok")["outcome"] == "completed"
    assert client.settled("metered", "no")["outcome"] == "failed"
    status, headers, body = get(serve, "/v1/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse(body.decode())
    counted = {dict(labels)["kind"] + "/" + dict(labels)["outcome"]: value
               for (name, labels), value in samples.items()
               if name == "tickwork_events_total" and dict(labels)["queue"] == "q"}
    assert counted == {"ingested/": 2, "claimed/": 2, "settled/completed": 1,
                       "settled/failed": 1}
    assert samples[("tickwork_execution_duration_seconds_count", (("queue", "q"),))] == 2
    # The hook after a broken one still got every event (on the hooks' own
    # thread, so a moment later); the broken one was logged, once: its
    # later failures are counted until a minute has passed.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
            not events.exists() or len(events.read_text().splitlines()) < 6):
        time.sleep(0.05)
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert sorted((line["kind"], line["job_id"]) for line in lines) == [
        ("claimed", "no"), ("claimed", "ok"), ("ingested", "no"), ("ingested", "ok"),
        ("settled", "no"), ("settled", "ok")]
    while "broken hook on" not in serve.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serve.stderr().count("RuntimeError: broken hook on") == 1, serve.stderr()


def test_metrics_need_the_token_and_a_get(observed: tuple[Serve, Path]) -> None:
    serve, _ = observed
    status, headers, body = get(serve, "/v1/metrics", token=None)
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized"
    assert get(serve, "/v1/metrics", token="wrong")[0] == 401
    status, headers, _ = get(serve, "/v1/metrics", method="POST")
    assert (status, headers["allow"]) == (405, "GET")


@pytest.mark.parametrize(("spec", "problem"), [
    ("tests.support.event_hooks", "expected MODULE:ATTR"),
    ("tests.support.no_such_module:hook", "cannot import"),
    ("tests.support.event_hooks:missing", "has no missing"),
    ("tests.support.event_hooks:NOT_CALLABLE", "not a callable"),
])
def test_a_bad_on_event_is_refused_by_name(tmp_path: Path, spec: str, problem: str) -> None:
    run = subprocess.run([sys.executable, "-m", "tickwork", "serve", "--data",
                          str(tmp_path / "data"), "--port", "0", "--token", TOKEN,
                          "--on-event", spec], cwd=ROOT, capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 1
    assert f"--on-event {spec!r}" in run.stderr and problem in run.stderr


def gauges(serve: Serve) -> dict[tuple[str, str], float]:
    """The queue gauges of one scrape: (metric name's last word, queue/state) -> value."""
    status, _, body = get(serve, "/v1/metrics")
    assert status == 200
    found = {}
    for (name, labels), value in parse(body.decode()).items():
        named = dict(labels)
        if name == "tickwork_queue_jobs":
            found[(named["queue"], named["state"])] = value
        elif name == "tickwork_queue_oldest_ready_age_seconds":
            found[(named["queue"], "age")] = value
    return found


def test_queue_gauges_count_every_owner_open_or_closed(tmp_path: Path) -> None:
    """One owner open at a time: the owner closed to make room for another
    is counted from what it held when it closed, its wait still growing."""
    serve = Serve(tmp_path / "data", "--max-open-owners", "1").start()
    try:
        client = serve.client()
        for owner in ("alpha", "beta"):
            assert client.call("POST", f"/v1/owners/{owner}/queues/held/pause")[0] == 200
        assert client.enqueue("alpha", job("a1", queue="held"), job("a2", queue="held"),
                              job("later", queue="held", delay_ms=600_000))[0] == 200
        first = gauges(serve)
        assert {key: value for key, value in first.items() if key[1] != "age"} == {
            ("held", "ready"): 2, ("held", "delayed"): 1, ("held", "running"): 0}
        # beta's ingest opens beta, so alpha (idle: its queue is paused) closes.
        assert client.enqueue("beta", job("b1", queue="held"))[0] == 201
        time.sleep(0.3)
        second = gauges(serve)
        assert {key: value for key, value in second.items() if key[1] != "age"} == {
            ("held", "ready"): 3, ("held", "delayed"): 1, ("held", "running"): 0}
        assert second[("held", "age")] >= first[("held", "age")] + 0.25
        # A running job counts as running until it settles.
        assert client.enqueue("beta", job("slow", "slow", queue="busy",
                                          payload={"ms": 60_000}))[0] == 201
        client.running("beta", "slow")
        assert gauges(serve)[("busy", "running")] == 1
    finally:
        serve.stop()
