"""Which tests the real-Pyodide tier runs, and their ids: the same on both sides.

The tier runs test modules written for pytest inside Pyodide (npm
``pyodide@0.28.2``, the build workerd runs for tickwork's compatibility
date) under Node, where pytest itself cannot drive them. This module turns a
suite of modules into cases (one per test function and parametrisation, ids
as ``module::test[params]``). CPython (``test_real_pyodide.py``) collects the
cases to name one pytest test each; Pyodide (``inside/run.py``) collects the
same cases and runs them. Both import the modules, so a case that exists on
one side only is reported, never silently dropped.

Only what the suites use is understood: module-level ``test_*`` functions
(sync or async), ``pytest.mark.parametrize`` (stacked, with ``ids`` and
``pytest.param``), ``pytest.mark.skipif``, and fixtures by argument name,
which the Pyodide side provides (``inside/fixtures.py``).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Every module of tests/behaviour (tests/unit/test_pyodide_suites.py holds
#: the list to the directory, so a new one cannot be left out).
_BEHAVIOUR = tuple(f"tests.behaviour.{name}" for name in (
    "test_backlog", "test_cancel", "test_cancel_lane", "test_dead_letters", "test_drain",
    "test_due_times", "test_error_summaries", "test_events", "test_explain", "test_fail_lane",
    "test_fair_turns", "test_find_jobs", "test_history", "test_ingest", "test_limits",
    "test_list_jobs",
    "test_pause", "test_rate_limits",
    "test_reads", "test_recovery", "test_retention", "test_retries", "test_schedules",
    "test_tick"))

#: The cases of a deployment: the Worker's fetch and scheduled handlers, the
#: JobOwner's RPC methods and alarm, through an SDK's real entry classes.
_DEPLOYMENT = tuple(f"tests.pyodide.cases.{name}" for name in (
    "test_job_owner", "test_worker", "test_workers_events", "test_client",
    "test_example_project", "test_dashboard", "test_sdk_boundary"))

#: The suites the tier runs. The fixtures each needs come from inside/fixtures.py.
SUITES: dict[str, tuple[str, ...]] = {
    # The behaviour suite, on a Durable Object whose ctx.storage is a JS object
    # (tests/pyodide/js/do_storage.mjs) with the measured DO rules...
    "behaviour-do": _BEHAVIOUR,
    # ...and on Miniflare's real D1 handed to Pyodide as a JS object.
    "behaviour-d1": _BEHAVIOUR,
    # What only the owner-local runtime has, on the same JS ctx.storage.
    "owner-local": tuple(f"tests.owner_local.{name}" for name in (
        "test_concurrency", "test_concurrent_lane", "test_drain", "test_due_times",
        "test_fair_turns", "test_limits", "test_rate_limits",
        "test_events",
        "test_projection", "test_recovery",
        "test_schema_and_plans", "test_transactional")),
    # The owner-local store's contract, method by method, on the same JS ctx.storage.
    "contract-owner-local": ("tests.contract.test_owner_local_store_contract",),
    # What only the shared runtimes have (leases, drain, edge values), on D1.
    "shared-d1": tuple(f"tests.shared.{name}" for name in (
        "test_drain", "test_edge_values", "test_event_timers", "test_leases")),
    # The FFI facts, Pyodide-only; and how the DO adapter reads rows, on real
    # JS row objects.
    "workers": (*(f"tests.pyodide.cases.{name}" for name in (
        "test_ffi_facts", "test_do_storage_facts", "test_d1_facts")),
        "tests.stores.test_durable_object_rows"),
    # The Worker, the JobOwner Durable Object and the example project, as
    # workerd runs them (inside/workerd.py), under each SDK shape.
    "sdk-external": _DEPLOYMENT,
    "sdk-builtin": _DEPLOYMENT,
}

#: The ``workers`` module each suite runs under (inside/sdk_shapes.py); the
#: suites not named here import no ``workers`` at all, or the built-in shape.
SDK_FOR_SUITE: dict[str, str] = {"sdk-external": "external", "sdk-builtin": "builtin"}

#: Per suite, the tier fixture that answers to a test's argument name.
FIXTURE_FOR: dict[str, dict[str, str]] = {
    "behaviour-do": {"engine": "engine_do"},
    "behaviour-d1": {"engine": "engine_d1"},
    "workers": {"storage": "do_storage"},
    "contract-owner-local": {"local_store": "local_store_do"},
}


@dataclass(frozen=True)
class Case:
    """One test to run: ``function(**fixtures, **params)``."""

    id: str
    suite: str
    function: Callable[..., Any]
    params: dict[str, Any] = field(default_factory=dict)
    skip: str | None = None

    @property
    def fixtures(self) -> list[str]:
        """Argument names not given by a parametrisation: fixtures, by name."""
        return [name for name in inspect.signature(self.function).parameters
                if name not in self.params]

    def fixture_for(self, name: str) -> str:
        """The tier fixture providing argument ``name`` in this case's suite."""
        return FIXTURE_FOR.get(self.suite, {}).get(name, name)


def cases(suites: Sequence[str] | None = None) -> list[Case]:
    """Every case of ``suites`` (all by default), in a stable order."""
    found: list[Case] = []
    for suite in suites or SUITES:
        for module_name in SUITES[suite]:
            module = importlib.import_module(module_name)
            short = module_name.rsplit(".", 1)[1]
            for name, function in vars(module).items():
                if name.startswith("test_") and inspect.isfunction(function) \
                        and function.__module__ == module.__name__:
                    found.extend(_expand(suite, f"{suite}/{short}::{name}", function))
    ids = [case.id for case in found]
    duplicates = sorted({case_id for case_id in ids if ids.count(case_id) > 1})
    if duplicates:
        raise RuntimeError(f"real-Pyodide tier: duplicate case ids {duplicates}")
    return found


def _marks(function: Callable[..., Any]) -> list[Any]:
    return list(getattr(function, "pytestmark", []))


def _expand(suite: str, base: str, function: Callable[..., Any]) -> Iterator[Case]:
    marks = _marks(function)
    skip = None
    for mark in marks:
        if mark.name == "skipif" and mark.args and bool(mark.args[0]):
            skip = str(mark.kwargs.get("reason", "skipif"))
        if mark.name == "skip":
            skip = str(mark.kwargs.get("reason", mark.args[0] if mark.args else "skip"))
    # Decorators apply bottom-up, so pytestmark lists the bottom one first;
    # expand top-down, as pytest numbers them.
    grids = [_grid(mark) for mark in reversed(marks) if mark.name == "parametrize"]
    for combination in itertools.product(*grids):
        params: dict[str, Any] = {}
        labels: list[str] = []
        for label, values in combination:
            params.update(values)
            labels.append(label)
        case_id = base + (f"[{'-'.join(labels)}]" if labels else "")
        yield Case(case_id, suite, function, params, skip)


def _grid(mark: Any) -> list[tuple[str, dict[str, Any]]]:
    argnames, argvalues = mark.args[0], mark.args[1]
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) \
        else list(argnames)
    ids = mark.kwargs.get("ids")
    grid: list[tuple[str, dict[str, Any]]] = []
    for index, raw in enumerate(argvalues):
        given_id = getattr(raw, "id", None) if _is_param_set(raw) else None
        values = raw.values if _is_param_set(raw) else (raw if len(names) > 1 else (raw,))
        if ids is not None and not callable(ids):
            label = str(ids[index])
        elif given_id is not None:
            label = str(given_id)
        else:
            label = "-".join(_label(value, name, index) for name, value in zip(names, values,
                                                                            strict=True))
        grid.append((label, dict(zip(names, values, strict=True))))
    labels = [label for label, _ in grid]
    if len(set(labels)) < len(labels) or "" in labels:
        grid = [(f"{label}{index}", values) for index, (label, values) in enumerate(grid)]
    return grid


def _is_param_set(value: Any) -> bool:
    return type(value).__name__ == "ParameterSet"


def _label(value: Any, name: str, index: int) -> str:
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = str(value)
        if text.isascii() and text.isprintable() and len(text) <= 40:
            return text
    return f"{name}{index}"
