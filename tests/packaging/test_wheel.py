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
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
                   check=True, capture_output=True, text=True, timeout=600)
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
        print(sorted(n for n in vars(owner) if not n.startswith("_"))[:2])
    ''')
    run = subprocess.run([str(python), "-c", script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         env={"PYTHONPATH": str(stand_in), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    d1, postgres = map(int, run.stdout.split("\n")[0].split())
    assert d1 >= 3 and postgres >= 3
    assert run.stdout.split("\n")[1] == "['alarm', 'cancel']"
