"""``tickwork serve``: the /v1 job API on this machine.

    tickwork serve [--data DIR] [--host HOST] [--port PORT] [--token TOKEN]
                   [--executors MODULE:ATTR] [--postgres DSN] [--max-open-owners N]
                   [--concurrency N] [--on-event MODULE:ATTR ...] [--quiet]

Serves the same routes as the Worker (``tickwork.api.JobApi``) over HTTP/1.1
on ``127.0.0.1:8787`` by default (``--port 0`` picks a free port; the bound
URL is printed). Owner-local jobs live in one sqlite3 file per owner under
``DIR/owners`` (see ``tickwork.hosts.cpython.owners``); with ``--postgres`` the
shared queues (``/v1/shared``) live in PostgreSQL and are drained by local
workers (see ``tickwork.hosts.cpython.shared``).

Every /v1 route but health needs ``Authorization: Bearer <token>``: the
token is ``--token``, else ``$TICKWORK_TOKEN``, else one generated at start
and printed once.

Every runtime the server opens (each owner's, the shared workers') reports
its transitions to one ``tickwork.metrics.Metrics``, served as Prometheus
text at ``GET /v1/metrics`` (behind the same token) with gauges of every
queue's backlog read at each scrape, and to each
``--on-event`` hook.

SIGINT or SIGTERM stops the server gracefully: no new connections or
requests, running jobs get ``--grace`` seconds to settle and are then
interrupted (settled ``failed`` / ``execution_interrupted``), databases are
closed. A second signal interrupts at once. While jobs run, a one-line
summary goes to stderr every few seconds when something changed
(``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tickwork.api import JobApi
from tickwork.events import EventHook, fan_out
from tickwork.executors import Executor, ExecutorRegistry
from tickwork.hosts.cpython.common import stop_on_signals
from tickwork.hosts.cpython.event_buffer import EventBuffer
from tickwork.hosts.cpython.http_server import ApiServer
from tickwork.hosts.cpython.owners import DataDirLock, HostError, OwnerDirectory
from tickwork.hosts.cpython.progress import Progress
from tickwork.metrics import Metrics
from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import ExecutionResult
from tickwork.runtimes.execution import call_executor

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_DATA = "./tickwork-data"
TOKEN_ENV = "TICKWORK_TOKEN"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=DEFAULT_DATA, metavar="DIR",
                        help=f"data directory, locked while served (default {DEFAULT_DATA})")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port to listen on; 0 picks a free one (default {DEFAULT_PORT})")
    parser.add_argument("--token", help=f"API bearer token (default ${TOKEN_ENV}; "
                                        "if neither is set, one is generated and printed)")
    parser.add_argument("--executors", metavar="MODULE:ATTR",
                        help="an ExecutorRegistry, an executor, or a factory taking no "
                             "arguments (default: "
                             "tickwork.hosts.cpython.examples:example_registry)")
    parser.add_argument("--postgres", metavar="DSN",
                        help="serve /v1/shared from PostgreSQL (its schema applied by "
                             "tickwork migrate postgres); needs pip install "
                             "'tickwork[postgres]'")
    parser.add_argument("--workers", type=int, default=4,
                        help="shared-queue workers with --postgres (default 4)")
    parser.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                        help="how often idle shared workers look for work (default 1)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                        help="on shutdown, how long running jobs may take to settle (default 10)")
    parser.add_argument("--progress-every", type=float, default=5.0, metavar="SECONDS",
                        help="interval of the progress line on stderr (default 5)")
    parser.add_argument("--webhook-allow", action="append", default=[], metavar="ENTRY",
                        help="let the default webhook executor reach ENTRY although it is not "
                             "a public address: an IP, a network (10.0.0.0/8) or a host name "
                             "(repeatable; by default loopback, private, link-local, "
                             "multicast and unspecified destinations are refused)")
    parser.add_argument("--webhook-credentials", action="store_true",
                        help="let webhook payloads set authorization, cookie and "
                             "proxy-authorization headers (refused by default)")
    parser.add_argument("--max-open-owners", type=int, default=None, metavar="N",
                        help="owners kept open at once (each holds up to 3 file descriptors); "
                             "idle ones close first, and a new owner beyond this while all "
                             "are busy gets 503 with retry-after (default: what the "
                             "descriptor limit allows, at most 256)")
    parser.add_argument("--concurrency", type=int, default=1, metavar="N",
                        help="jobs each owner runs at once, of different queues (a queue "
                             "still runs one at a time); default 1")
    parser.add_argument("--on-event", action="append", default=[], metavar="MODULE:ATTR",
                        help="also hand every lifecycle event (tickwork.events.Event) to this "
                             "callable; one that raises is logged and changes nothing "
                             "(repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def main(options: argparse.Namespace) -> int:
    try:
        return asyncio.run(serve(options))
    except HostError as error:
        print(f"tickwork serve: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130


# ------------------------------------------------------------------ executors


def load_executor(spec: str) -> Executor:
    """The executor ``module:attr`` names (see ``--executors``)."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise HostError(f"--executors {spec!r}: expected MODULE:ATTR, "
                        "e.g. myapp.jobs:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of this directory
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise HostError(f"--executors {spec!r}: cannot import {module_name}: {error}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HostError(f"--executors {spec!r}: {module_name} has no {attribute}") from None
    if isinstance(target, ExecutorRegistry):
        return target
    if not callable(target):
        raise HostError(f"--executors {spec!r} is a {type(target).__name__}, not an "
                        "ExecutorRegistry, an executor or a factory")
    if _takes_no_arguments(target):
        made = target()
        if isinstance(made, ExecutorRegistry) or (callable(made)
                                                  and not _takes_no_arguments(made)):
            executor: Executor = made
            return executor
        raise HostError(f"--executors {spec!r}: the factory returned a "
                        f"{type(made).__name__}, not an ExecutorRegistry or an executor")
    executor = target
    return executor


def load_event_hook(spec: str) -> EventHook:
    """The event hook ``module:attr`` names (see ``--on-event``)."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise HostError(f"--on-event {spec!r}: expected MODULE:ATTR, e.g. myapp.hooks:on_event")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like --executors
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise HostError(f"--on-event {spec!r}: cannot import {module_name}: {error}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HostError(f"--on-event {spec!r}: {module_name} has no {attribute}") from None
    if not callable(target):
        raise HostError(f"--on-event {spec!r} is a {type(target).__name__}, not a callable "
                        "taking an Event")
    hook: EventHook = target
    return hook


def _takes_no_arguments(function: Any) -> bool:
    try:
        inspect.signature(function).bind()
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): not a factory of ours
        return False
    return True


def default_executor(allow: Sequence[str] = (), allow_credentials: bool = False) -> Executor:
    from tickwork.hosts.cpython.examples import example_registry

    return example_registry(allow=allow, allow_credentials=allow_credentials)


def counted(execute: Executor, progress: Progress) -> Executor:
    """``execute``, counting the jobs running for the progress line."""

    async def run(job: JobRecord, signal: Any) -> ExecutionResult:
        progress.started_job()
        try:
            # A plain executor runs in a worker thread (never on the loop).
            result: ExecutionResult = await call_executor(execute, job, signal)
            return result
        finally:
            progress.finished_job()

    return run


# ---------------------------------------------------------------------- serve


async def serve(options: argparse.Namespace) -> int:
    token = options.token or os.environ.get(TOKEN_ENV) or None
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(24)
    if not 0 <= options.port <= 65535:
        raise HostError(f"--port {options.port}: must be 0 to 65535")
    for name in ("poll", "progress_every"):
        if not getattr(options, name) > 0:
            raise HostError(f"--{name.replace('_', '-')} must be a positive number of seconds")
    if options.grace < 0:
        raise HostError("--grace must be 0 or more seconds")
    if options.executors and (options.webhook_allow or options.webhook_credentials):
        raise HostError("--webhook-allow and --webhook-credentials configure the default "
                        "executors; with --executors, your registry decides")
    try:
        executor = load_executor(options.executors) if options.executors else \
            default_executor(options.webhook_allow, options.webhook_credentials)
    except ValueError as error:
        raise HostError(str(error)) from None
    metrics = Metrics()
    # The deployment's hooks get the events on a thread of their own, so a
    # slow one never slows the ticks or the API; the metrics stay synchronous
    # (microseconds, and a scrape sees every transition before it).
    buffered = EventBuffer(fan_out(*(load_event_hook(spec) for spec in options.on_event))) \
        if options.on_event else None
    on_event = fan_out(metrics, buffered) if buffered is not None else metrics
    directory = Path(options.data).expanduser().resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HostError(f"cannot create data directory {directory}: {error}") from None
    lock = DataDirLock(directory)
    lock.acquire()
    progress = Progress()
    execute = counted(executor, progress)
    store = OwnerDirectory(directory, execute, progress=progress,
                           max_open=options.max_open_owners, on_event=on_event,
                           concurrency=options.concurrency)
    shared = None
    server: ApiServer | None = None
    reporter: asyncio.Task[None] | None = None
    try:
        shared_service = None
        if options.postgres:
            from tickwork.hosts.cpython.shared import SharedWorkers

            shared = SharedWorkers(options.postgres, execute, workers=options.workers,
                                   poll_s=options.poll, progress=progress, on_event=on_event)
            shared_service = await shared.start()

        async def scrape() -> str:
            # The counters, and the queue gauges read now: every owner's
            # backlog and the shared queues' (cheap reads, see Metrics).
            backlog = store.backlog()
            if shared is not None:
                backlog += await shared.backlog()
            return metrics.prometheus_text(backlog)

        api = JobApi(token=token, owners=store.service, shared=shared_service, metrics=scrape,
                     directory=store.listing)
        server = ApiServer(api)
        try:
            host, port = await server.start(options.host, options.port)
        except OSError as error:
            raise HostError(f"cannot listen on {options.host}:{options.port}: "
                            f"{error.strerror or error}") from None
        recovered = store.recover()
        shown_host = f"[{host}]" if ":" in host else host
        lines = [f"tickwork serve: listening on http://{shown_host}:{port}",
                 f"  data: {directory}" + (f" ({len(recovered)} owner(s) with pending work)"
                                           if recovered else ""),
                 "  shared queues: " + ("PostgreSQL" if shared else
                                        "not configured (--postgres DSN)")]
        if generated:
            lines.append(f"  token (generated; pass --token or set {TOKEN_ENV} to keep one): "
                         f"{token}")
        print("\n".join(lines), flush=True)  # one write: a reader sees all of it or none
        if not options.quiet:
            reporter = asyncio.get_running_loop().create_task(
                progress.run(options.progress_every))
        await _until_signalled(store, shared)
    finally:
        if reporter is not None:
            reporter.cancel()
        if server is not None:
            await server.close(grace_s=min(options.grace, 5.0))
        closing = [store.close(options.grace)]
        if shared is not None:
            closing.append(shared.close(options.grace))
        await asyncio.gather(*closing)  # one grace period for both
        if buffered is not None:
            # The last transitions' events reach the hooks before the process ends.
            await asyncio.to_thread(buffered.close, min(options.grace, 5.0))
        lock.release()
        if not options.quiet:
            line = progress.summary()
            if line is not None:
                print(line, file=sys.stderr, flush=True)
    print("tickwork serve: stopped", file=sys.stderr, flush=True)
    return 0


async def _until_signalled(store: OwnerDirectory, shared: Any) -> None:
    """Return at the first SIGINT/SIGTERM; a second one interrupts running jobs at once."""

    def interrupt() -> None:
        store.interrupt()
        if shared is not None:
            shared.interrupt()

    await stop_on_signals("tickwork serve", "running jobs may settle", interrupt).wait()
