"""Runs the real-Pyodide tier's cases inside Pyodide (started by ``runner.mjs``).

Each case runs on Pyodide's own event loop (the WebLoop, as in a Worker):
its fixtures are entered, the test is awaited with a time limit, tasks it
left behind are cancelled, and one JSON line is written per case:
``{"id", "status": "passed" | "failed" | "skipped", "seconds", "detail"}``.

Miniflare's D1 proxy answers synchronous calls (``prepare``, ``bind``) over
a worker thread; under load on this 2-core machine it was seen to lose step
once (``SynchronousFetcher.fetch`` asserts on the reply id) and then fail
every later call. That is the test harness breaking, not D1: such a case
restarts Miniflare and runs once more, and its line says so (``"rerun"``).
Any other failure, or the same one twice, stays a failure.

The call that lost step is not always in the failure's traceback: a drain
the test started as a task dies of it, and the test then times out waiting
for jobs that never start. So after any failure the proxy is asked once
more; a proxy that has lost step fails that call too, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
import time
import traceback
from typing import Any

import tickwork_tier  # type: ignore[import-not-found]  # registered by runner.mjs

from tests.pyodide import collect
from tests.pyodide.inside import sdk_shapes
from tests.pyodide.inside.fixtures import FIXTURES
from tests.pyodide.inside.workerd import PROXY_LOST_STEP

#: Seconds one case may take (its fixtures included).
CASE_TIMEOUT_S = 120.0


async def main(out_path: str, suites: list[str], only: str = "") -> int:
    """Run every case of ``suites`` (all when empty) whose id contains
    the regular expression ``only``; the number that failed."""
    failed = 0
    with open(out_path, "w", encoding="utf-8") as out:
        try:
            cases = [case for case in collect.cases(suites or None) if re.search(only, case.id)]
        except Exception:
            out.write(json.dumps({"id": "<collection>", "status": "failed", "seconds": 0,
                                  "detail": traceback.format_exc()}) + "\n")
            return 1
        for case in cases:
            result = await run_case(case)
            lost_step = (await _proxy_lost_step(result["detail"])
                         if result["status"] == "failed" else None)
            if lost_step:
                await tickwork_tier.restartMiniflare()
                result = await run_case(case)
                result["rerun"] = f"Miniflare restarted after its proxy lost step:\n{lost_step}"
            failed += result["status"] == "failed"
            out.write(json.dumps(result) + "\n")
            out.flush()
    return failed


async def _proxy_lost_step(detail: str) -> str | None:
    """How a case that failed with ``detail`` shows that Miniflare's proxy
    lost step: its traceback, or else the traceback of one more call to the
    proxy after it; None when the proxy answers that call."""
    if PROXY_LOST_STEP in detail:
        return detail
    try:
        await tickwork_tier.nextD1().prepare("SELECT 1").raw()
    except Exception:
        probe = traceback.format_exc()
        if PROXY_LOST_STEP in probe:
            return f"{detail}\nand the next call to the proxy:\n{probe}"
    return None


async def run_case(case: collect.Case) -> dict[str, Any]:
    if case.skip is not None:
        return {"id": case.id, "status": "skipped", "seconds": 0, "detail": case.skip}
    started = time.perf_counter()
    before = asyncio.all_tasks()
    status, detail = "passed", ""
    try:
        await asyncio.wait_for(_run(case), CASE_TIMEOUT_S)
    except BaseException as error:  # a test's failure of any kind is its result
        if type(error).__name__ == "Skipped":  # pytest.skip() inside the test
            status, detail = "skipped", str(error)
        else:
            status, detail = "failed", "".join(traceback.format_exception(error))
    finally:
        await _cancel_leftovers(before)
    return {"id": case.id, "status": status, "seconds": round(time.perf_counter() - started, 4),
            "detail": detail}


async def _run(case: collect.Case) -> None:
    sdk_shapes.use(collect.SDK_FOR_SUITE.get(case.suite, "builtin"))
    async with contextlib.AsyncExitStack() as stack:
        arguments = dict(case.params)
        for name in case.fixtures:
            factory = FIXTURES.get(case.fixture_for(name))
            if factory is None:
                raise LookupError(f"the real-Pyodide tier provides no fixture "
                                  f"{case.fixture_for(name)!r} "
                                  f"(add it to tests/pyodide/inside/fixtures.py)")
            arguments[name] = await stack.enter_async_context(factory())
        result = case.function(**arguments)
        if inspect.isawaitable(result):
            await result


async def _cancel_leftovers(before: set[asyncio.Task[Any]]) -> None:
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() - before if task is not current]
    for task in leftovers:
        task.cancel()
    if leftovers:
        await asyncio.gather(*leftovers, return_exceptions=True)
