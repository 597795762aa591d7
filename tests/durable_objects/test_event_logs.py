"""JobOwner writes one JSON line per transition at ``TICKWORK_LOG_LEVEL``."""

from __future__ import annotations

import json

import pytest

from tests.durable_objects.conftest import Host, job


def json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_every_transition_is_a_json_line_at_the_chosen_level(
        host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    host.namespace.env.TICKWORK_LOG_LEVEL = "debug"
    await host.stub().ingest([job("ok"), job("no", "other", payload={"do": "fail"})])
    await host.scheduler.run_due()
    logged = json_lines(capsys.readouterr().out)
    assert sorted((line["event"], line["job_id"], line["level"], line.get("outcome"))
                  for line in logged) == [
        ("claimed", "no", "debug", None), ("claimed", "ok", "debug", None),
        ("ingested", "no", "info", None), ("ingested", "ok", "info", None),
        ("settled", "no", "warn", "failed"), ("settled", "ok", "info", "completed")]
    assert all(line["logger"] == "tickwork" and isinstance(line["at"], int) for line in logged)


async def test_info_by_default_and_nothing_when_off(
        host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    await host.stub().ingest(job("a"))
    await host.scheduler.run_due()
    assert [line["event"] for line in json_lines(capsys.readouterr().out)] == [
        "ingested", "settled"]
    host.namespace.env.TICKWORK_LOG_LEVEL = "off"
    await host.stub().ingest(job("b", "other"))  # the same instance: its hook stays
    assert [line["job_id"] for line in json_lines(capsys.readouterr().out)] == ["b"]
    quiet = host.stub("another-owner")  # a new object reads the variable again
    await quiet.ingest(job("c"))
    assert json_lines(capsys.readouterr().out) == []


async def test_an_unknown_level_logs_at_the_default_and_says_so(
        host: Host, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown level must not break the object (it failed every RPC call)."""
    from tickwork.cloudflare import bindings

    monkeypatch.setattr(bindings, "_REPORTED_LOG_LEVELS", set())
    host.namespace.env.TICKWORK_LOG_LEVEL = "loud"
    await host.stub().ingest(job("a"))
    await host.scheduler.run_due()
    await host.stub("another-owner").ingest(job("b"))  # a second object: not said again
    logged = capsys.readouterr()
    assert [(line["event"], line["job_id"]) for line in json_lines(logged.out)] == [
        ("ingested", "a"), ("settled", "a"), ("ingested", "b")]
    assert logged.err.count("TICKWORK_LOG_LEVEL must be one of") == 1, logged.err
