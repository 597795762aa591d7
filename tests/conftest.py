from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import OWNER_KINDS, Harness
from tests.support.fakes.do_storage import FakeDurableObjectStorage
from tests.support.fakes.pyodide_ffi import fake_pyodide
from tests.support.reports import utf8_safe
from tests.support.stores import owner_local_harness

#: The tier of every test under a path (the first that matches), as a marker:
#: ``pytest -m "not (pyodide or browser or bench or slow)"`` runs the fast tier
#: (see docs/explanation/architecture.md); bash scripts/test runs them all.
TIERS: tuple[tuple[str, str], ...] = (
    ("tests/pyodide/", "pyodide"),
    ("tests/dashboard/test_browser.py", "browser"),
    ("tests/test_bench_", "bench"),
    ("bench/tests/", "bench"),
    ("tests/crash/", "slow"),
    ("tests/packaging/", "slow"),
    ("tests/examples/test_example_environment.py", "slow"),
    ("tests/docs/test_examples.py", "slow"),
    ("tests/postgres_cli/test_worker.py", "slow"),
    ("tests/property/", "slow"),  # hypothesis against the reference models
    # Real time passing: renewals over several lease periods, a hook's delay.
    ("tests/shared/test_leases.py::test_periodic_renewal_", "slow"),
    ("tests/locks/test_job_lock.py::test_renewal_keeps_", "slow"),
    ("tests/serve/test_event_buffer.py::test_a_10_ms_hook_", "slow"),
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier (``TIERS``), and run the real-Pyodide
    tier's tests last. Its Node processes start when collection finishes and
    take minutes on the other core; its tests wait for their results, so
    placed in the middle of the suite they would hold up everything after
    them while that core does the work."""
    for item in items:
        for prefix, tier in TIERS:
            if item.nodeid.startswith(prefix):
                item.add_marker(getattr(pytest.mark, tier))
                break
    tier = [item for item in items if item.nodeid.startswith("tests/pyodide/")]
    if tier:
        others = [item for item in items if not item.nodeid.startswith("tests/pyodide/")]
        items[:] = others + tier


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each pytest-xdist worker how the controller hands out tests (a
    worker's own ``--dist`` reads "no"): the real-Pyodide tier must run in
    one worker (tests/pyodide/test_real_pyodide.py)."""
    node.workerinput["dist"] = node.config.getoption("dist")


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(report: pytest.TestReport | pytest.CollectReport,
                                  ) -> Generator[None, Any, Any]:
    """A report as pytest-xdist sends it from a worker, with any lone
    surrogate escaped (tests/support/reports.py): execnet cannot encode one,
    and a test that logs an executor's exception carrying one would
    otherwise kill its worker."""
    data = yield
    return utf8_safe(data)


@pytest.fixture(params=OWNER_KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A real store of every owner-local kind: sqlite3, and the DO storage
    stand-in answering like the built-in SDK and like the external SDK."""
    with owner_local_harness(request.param, tmp_path) as built:
        yield built


@pytest.fixture(params=["builtin", "external"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeDurableObjectStorage]:
    """A Durable Object's ctx.storage (the CPython stand-in), as either SDK shows it."""
    with fake_pyodide():
        built = FakeDurableObjectStorage(tmp_path / "do.sqlite3", sdk=request.param)
        yield built
        built.close()
