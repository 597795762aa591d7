"""The built wheel is the product: it installs into a fresh venv and every
public module imports from it (tickwork.cloudflare under a ``workers``
stand-in), with the schema files and py.typed inside and no repository
tooling (tests, bench, the reference deployment) in it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tree_build import building_from_the_checkout

REPO = Path(__file__).resolve().parents[2]

PUBLIC_MODULES = ("tickwork", "tickwork.api", "tickwork.client", "tickwork.executors",
                  "tickwork.locks", "tickwork.runtimes.d1", "tickwork.runtimes.postgres",
                  "tickwork.schemas", "tickwork.stores", "tickwork.cloudflare")

#: Just enough of the Workers ``workers`` module for tickwork.cloudflare to import.
WORKERS_STAND_IN = textwrap.dedent('''
    class DurableObject:
        def __init__(self, ctx, env):
            self.ctx, self.env = ctx, env
    class WorkerEntrypoint:
        def __init__(self, ctx, env):
            self.ctx, self.env = ctx, env
    class Response:
        def __init__(self, body=None, status=200, headers=None):
            self.body, self.status, self.headers = body, status, headers
    async def fetch(*args, **kwargs):
        raise OSError("no network here")
''')


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    with building_from_the_checkout(REPO):
        subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out),
                        str(REPO)], check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob("tickwork-*.whl")
    yield built


def test_the_wheel_carries_the_package_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {entry for entry in top if not entry.endswith(".dist-info")} == {"tickwork"}
    for needed in ("tickwork/py.typed", "tickwork/_schema/d1/0001_tickwork_jobs.sql",
                   "tickwork/_schema/postgres/0001_tickwork_jobs.sql",
                   "tickwork/cloudflare/job_owner.py", "tickwork/client/clients.py"):
        assert needed in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_a_fresh_venv_imports_every_public_module_from_the_wheel(
        wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    (stand_in / "workers.py").write_text(WORKERS_STAND_IN)
    script = textwrap.dedent(f'''
        import importlib, pathlib, sys
        for name in {PUBLIC_MODULES!r}:
            module = importlib.import_module(name)
            assert "site-packages" in module.__file__, (name, module.__file__)
        from tickwork.schemas import migrations
        print(len(migrations("d1")), len(migrations("postgres")))
        from tickwork.cloudflare import job_owner_class, worker_class
        owner = job_owner_class(lambda env: None)
        from tickwork.api.operations import OPERATIONS
        own = {{n for n in vars(owner) if not n.startswith("_")}}
        print(own == {{operation.name for operation in OPERATIONS}} | {{"alarm"}})
    ''')
    run = subprocess.run([str(python), "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={"PYTHONPATH": str(stand_in), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    d1, postgres = map(int, run.stdout.split("\n")[0].split())
    assert d1 >= 3 and postgres >= 3
    assert run.stdout.split("\n")[1] == "True"  # an RPC method per operation, and alarm


def test_a_wheel_user_gets_the_postgres_extra_and_the_migrations(
        wheel: Path, tmp_path: Path) -> None:
    # The extra that `pip install 'tickwork[postgres]'` names exists...
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    lines = archive.read(metadata).decode().splitlines()
    assert "Provides-Extra: postgres" in lines
    assert sorted(line.removeprefix("Requires-Dist: ") for line in lines
                  if line.startswith("Requires-Dist:") and 'extra == "postgres"' in line) == [
        'psycopg-pool<4,>=3.2; extra == "postgres"',
        'psycopg[binary]<4,>=3.2; extra == "postgres"']
    # ... and without it, the wheel still prints its migrations, and names the
    # extra when asked to apply them or run a worker.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "--no-deps",
                    "--quiet", str(wheel)], check=True, capture_output=True, text=True,
                   timeout=300)
    tickwork = str(env_dir / "bin" / "tickwork")
    clean = {"PATH": "/usr/bin:/bin"}
    printed = subprocess.run([tickwork, "migrate", "postgres", "--sql"], cwd=tmp_path, env=clean,
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("-- tickwork migration 0001_tickwork_jobs.sql\n")
    for command in (["migrate", "postgres", "--dsn", "postgresql://db.invalid/jobs"],
                    ["worker", "--dsn", "postgresql://db.invalid/jobs", "--executors",
                     "tickwork.hosts.cpython.examples:example_registry"]):
        refused = subprocess.run([tickwork, *command], cwd=tmp_path, env=clean,
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        assert "pip install 'tickwork[postgres]'" in refused.stderr
