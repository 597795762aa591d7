"""examples/cloudflare-worker, the project a user copies: its main module
serves the API and runs its executors (owner jobs on the alarm, shared jobs on
the cron drain) under the stand-ins in both SDK shapes; its files agree with
each other; ``tickwork schema`` writes the migrations its wrangler.toml reads.
The same main module runs under real Pyodide in tests/pyodide."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest

from tests.support.example_scenario import EXPECTED, ingest_receipts, outcomes
from tests.support.examples import EXAMPLE, load_example_entry
from tests.support.fakes.do_namespace import FakeDurableObjectNamespace
from tests.support.worker import TOKEN, send
from tickwork.schemas import migrations

pytestmark = pytest.mark.usefixtures("js_module")

CRON = types.SimpleNamespace(scheduledTime=1_796_000_040_000.0, cron="* * * * *")


@pytest.fixture
def example(db: Any, shape: str, workers_module: types.ModuleType) -> Any:
    entry = load_example_entry()
    env = types.SimpleNamespace(DB=db, TICKWORK_TOKEN=TOKEN)
    env.JOB_OWNERS = FakeDurableObjectNamespace(entry.JobOwner, env, sdk=shape)  # type: ignore[arg-type]
    worker = entry.Default(types.SimpleNamespace(), env)
    yield types.SimpleNamespace(entry=entry, env=env, worker=worker, shape=shape)
    env.JOB_OWNERS.close()


def sender(example: Any) -> Any:
    async def call(method: str, path: str, body: Any) -> tuple[int, str]:
        status, decoded = await send(example.worker, example.shape, method, path, body)
        return status, json.dumps(decoded)
    return call


async def test_owner_jobs_run_on_the_objects_alarm(example: Any) -> None:
    call = sender(example)
    await ingest_receipts(call, "owners/tenant")
    namespace = example.env.JOB_OWNERS
    await namespace.storage("tenant").deleteAlarm()
    await namespace.instance("tenant").alarm(types.SimpleNamespace(retryCount=0, isRetry=False))
    assert await outcomes(call, "owners/tenant") == EXPECTED


async def test_shared_jobs_run_on_the_cron_drain(example: Any) -> None:
    call = sender(example)
    await ingest_receipts(call, "shared")
    await example.worker.scheduled(CRON)
    assert await outcomes(call, "shared") == EXPECTED


def test_the_project_files_agree() -> None:
    wrangler = tomllib.loads((EXAMPLE / "wrangler.toml").read_text())
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert wrangler["main"] == "src/entry.py" and (EXAMPLE / wrangler["main"]).is_file()
    assert "tickwork" in project["project"]["dependencies"]
    assert any(dep.startswith("workers-py") for dep in project["dependency-groups"]["dev"])
    owner_binding, pump_binding = wrangler["durable_objects"]["bindings"]
    assert (owner_binding["name"], owner_binding["class_name"]) == ("JOB_OWNERS", "JobOwner")
    assert (pump_binding["name"], pump_binding["class_name"]) == ("TICKWORK_PUMP", "SharedPump")
    assert wrangler["migrations"][0]["new_sqlite_classes"] == ["JobOwner", "SharedPump"]
    (database,) = wrangler["d1_databases"]
    assert database["binding"] == "DB"
    source = (EXAMPLE / "src" / "entry.py").read_text()
    assert "JobOwner = " in source and "SharedPump = " in source and "Default = " in source
    readme = (EXAMPLE / "README.md").read_text()
    assert f"python -m tickwork schema d1 {database['migrations_dir']}" in readme


def test_tickwork_schema_writes_the_migrations_and_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "migrations"
    command = [sys.executable, "-m", "tickwork", "schema", "d1", str(target)]
    first = subprocess.run(command, capture_output=True, text=True, check=True)
    written = sorted(path.name for path in target.iterdir())
    assert written == [migration.name for migration in migrations("d1")]
    assert all((target / m.name).read_text() == m.sql for m in migrations("d1"))
    assert first.stdout.count("wrote") == len(written)
    again = subprocess.run(command, capture_output=True, text=True, check=True)
    assert again.stdout == ""  # the same files: nothing to do
    changed = target / written[0]
    changed.write_text(changed.read_text() + "-- edited\n")
    refused = subprocess.run(command, capture_output=True, text=True)
    assert refused.returncode == 1 and "differ" in refused.stderr
    assert changed.read_text().endswith("-- edited\n")
