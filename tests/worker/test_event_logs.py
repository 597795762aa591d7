"""The Worker's cron drain writes one JSON line per transition at ``TICKWORK_LOG_LEVEL``."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from tests.support.worker import job, send, use_deployment_hook
from tickwork import Completed, Failed, JobRecord
from tickwork.executors import ExecutorRegistry

pytestmark = pytest.mark.usefixtures("js_module")


@pytest.fixture(autouse=True)
def executors(monkeypatch: pytest.MonkeyPatch, worker: Any) -> None:
    async def run(job_record: JobRecord, signal: Any) -> Completed | Failed:
        return Failed("declined") if job_record.job_id.startswith("no") else Completed()

    use_deployment_hook(monkeypatch, "build_registry",
                        lambda env: ExecutorRegistry(fallback=run))


def controller() -> Any:
    return types.SimpleNamespace(scheduledTime=1_796_000_040_000.0, cron="* * * * *")


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def enqueue(worker: Any, shape: str, *ids: str) -> None:
    status, _ = await send(worker, shape, "POST", "/v1/shared/jobs",
                           {"jobs": [job(job_id, queue=f"q-{job_id}") for job_id in ids]})
    assert status == 200


@pytest.mark.parametrize(("level", "expected"), [
    ("debug", [("claimed", "no", "debug"), ("claimed", "ok", "debug"),
               ("settled", "no", "warn"), ("settled", "ok", "info")]),
    (None, [("settled", "no", "warn"), ("settled", "ok", "info")]),
    ("warn", [("settled", "no", "warn")]),
    ("off", []),
])
async def test_the_cron_drain_logs_its_transitions(
        worker: Any, env: Any, shape: str, capsys: pytest.CaptureFixture[str],
        level: str | None, expected: list[tuple[str, str, str]]) -> None:
    await enqueue(worker, shape, "ok", "no")
    capsys.readouterr()
    if level is not None:
        env.TICKWORK_LOG_LEVEL = level
    await worker.scheduled(controller(), env, types.SimpleNamespace())
    logged = capsys.readouterr()
    lines = json_lines(logged.out)
    assert sorted((line["event"], line["job_id"], line["level"]) for line in lines) == expected
    assert "{" not in logged.err  # stdout: wrangler shows every stderr line as an [ERROR]
    for line in lines:
        assert (line["logger"], line["queue"]) == ("tickwork", f"q-{line['job_id']}")


async def test_an_unknown_level_logs_at_the_default_and_says_so_once(
        worker: Any, env: Any, shape: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured in workerd before: with ``loud`` even /v1/health answered 500."""
    from tickwork.cloudflare import app, bindings

    monkeypatch.setattr(bindings, "_REPORTED_LOG_LEVELS", set())
    monkeypatch.setattr(app, "_API_RUNTIMES", type(app._API_RUNTIMES)())
    env.TICKWORK_LOG_LEVEL = "loud"
    assert (await send(worker, shape, "GET", "/v1/health", token=None))[0] == 200
    for scope in ("owners/tenant", "shared"):
        status, text = await send(worker, shape, "POST", f"/v1/{scope}/jobs", job(f"x-{shape}"))
        assert status == 201, text
    await enqueue(worker, shape, "ok")
    await worker.scheduled(controller())
    logged = capsys.readouterr()
    assert logged.err.count("TICKWORK_LOG_LEVEL must be one of debug, info, warn, off, "
                            "got 'loud'; logging at 'info' instead") == 1, logged.err
    assert ("settled", "ok", "info") in {(line["event"], line["job_id"], line["level"])
                                         for line in json_lines(logged.out)}
