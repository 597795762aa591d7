"""``tickwork worker``: run the jobs of PostgreSQL's shared queues, without the HTTP API.

    tickwork worker --executors MODULE:ATTR [--dsn DSN] [--workers N] [--poll SECONDS]
                    [--lease SECONDS] [--renew-every SECONDS] [--grace SECONDS]
                    [--on-event MODULE:ATTR ...] [--progress-every SECONDS] [--quiet]

Drains the shared queues of a PostgreSQL database (without ``--dsn``,
``$DATABASE_URL``) with ``--workers`` local workers, running each job with
the executors ``--executors`` names (an ExecutorRegistry, an executor, or a
factory taking no arguments; a module of the current directory is found).
Start as many worker processes, on as many machines, as you like: each job
is claimed by one worker at a time. Your application enqueues through
``PostgresRuntime`` (``ingest``, or ``enqueue`` inside its own transaction),
or through ``tickwork serve --postgres``.

The database must have this package's schema: start-up refuses one that
lacks a migration and says to run ``tickwork migrate postgres``. Needs
psycopg 3 and psycopg-pool: ``pip install 'tickwork[postgres]'``.

An idle worker looks for new jobs every ``--poll`` seconds. A running job
holds a lease of ``--lease`` seconds, renewed every ``--renew-every``
seconds while it runs; if this process dies, another worker recovers the
job once its lease has lapsed.

SIGINT or SIGTERM stops the worker gracefully: no new jobs are claimed,
running jobs get ``--grace`` seconds to settle and are then interrupted
(settled ``failed`` / ``execution_interrupted``). A second signal interrupts
them at once. While jobs run, a one-line summary goes to stderr every few
seconds when something changed (``--quiet`` silences it).

Exit status: 0 after a shutdown by signal, 1 when it cannot start (one line
on stderr), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from tickwork.events import fan_out
from tickwork.hosts.cpython.common import redact_dsn, stop_on_signals
from tickwork.hosts.cpython.event_buffer import EventBuffer
from tickwork.hosts.cpython.owners import HostError
from tickwork.hosts.cpython.progress import Progress
from tickwork.hosts.cpython.serve import counted, load_event_hook, load_executor
from tickwork.hosts.cpython.shared import SharedWorkers
from tickwork.leases import DEFAULT_LEASE_MS, DEFAULT_RENEW_EVERY_MS

NAME = "tickwork worker"
DSN_ENV = "DATABASE_URL"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executors", metavar="MODULE:ATTR", required=True,
                        help="an ExecutorRegistry, an executor, or a factory taking no "
                             "arguments, e.g. myapp.jobs:registry")
    parser.add_argument("--dsn", metavar="DSN",
                        help=f"the PostgreSQL database (default ${DSN_ENV})")
    parser.add_argument("--workers", type=int, default=4, metavar="N",
                        help="jobs this process runs at once (default 4)")
    parser.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                        help="how often an idle worker looks for new jobs (default 1)")
    parser.add_argument("--lease", type=float, default=DEFAULT_LEASE_MS / 1000,
                        metavar="SECONDS",
                        help="how long a claim holds a running job before another worker "
                             "may recover it (default %(default)g)")
    parser.add_argument("--renew-every", type=float, default=DEFAULT_RENEW_EVERY_MS / 1000,
                        metavar="SECONDS",
                        help="how often a running job's lease is renewed; shorter than "
                             "--lease (default %(default)g)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                        help="on shutdown, how long running jobs may take to settle (default 10)")
    parser.add_argument("--on-event", action="append", default=[], metavar="MODULE:ATTR",
                        help="also hand every lifecycle event (tickwork.events.Event) to this "
                             "callable; one that raises is logged and changes nothing "
                             "(repeatable)")
    parser.add_argument("--progress-every", type=float, default=5.0, metavar="SECONDS",
                        help="interval of the progress line on stderr (default 5)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def main(options: argparse.Namespace) -> int:
    try:
        return asyncio.run(work(options))
    except HostError as error:
        print(f"{NAME}: {error}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130


def _milliseconds(option: str, seconds: float) -> int:
    if not seconds * 1000 >= 1:  # also refuses NaN
        raise HostError(f"--{option} must be at least 0.001 seconds, got {seconds:g}")
    return round(seconds * 1000)


async def work(options: argparse.Namespace) -> int:
    dsn = options.dsn or os.environ.get(DSN_ENV) or None
    if dsn is None:
        raise HostError(f"no database: pass --dsn DSN or set ${DSN_ENV}")
    if options.workers < 1:
        raise HostError(f"--workers must be at least 1, got {options.workers}")
    for name in ("poll", "progress_every"):
        if not getattr(options, name) > 0:
            raise HostError(f"--{name.replace('_', '-')} must be a positive number of seconds")
    if not options.grace >= 0:
        raise HostError("--grace must be 0 or more seconds")
    lease_ms = _milliseconds("lease", options.lease)
    renew_every_ms = _milliseconds("renew-every", options.renew_every)
    if renew_every_ms >= lease_ms:
        raise HostError(f"--renew-every ({options.renew_every:g}) must be shorter than "
                        f"--lease ({options.lease:g}), or leases lapse between renewals")
    try:
        executor = load_executor(options.executors)
    except ValueError as error:
        raise HostError(str(error)) from None
    hooks = [load_event_hook(spec) for spec in options.on_event]
    # Hooks get the events on a thread of their own, as under tickwork serve.
    buffered = EventBuffer(fan_out(*hooks)) if hooks else None
    progress = Progress(label=NAME)
    shared = SharedWorkers(dsn, counted(executor, progress), workers=options.workers,
                           poll_s=options.poll, progress=progress, on_event=buffered,
                           lease_ms=lease_ms, renew_every_ms=renew_every_ms, name=NAME)
    stop = stop_on_signals(NAME, f"running jobs have {options.grace:g}s to settle",
                           shared.interrupt)
    reporter: asyncio.Task[None] | None = None
    try:
        await shared.start()
        print(f"{NAME}: {options.workers} worker(s) on PostgreSQL ({redact_dsn(dsn)}), "
              f"executors {options.executors}", flush=True)
        if not options.quiet:
            reporter = asyncio.get_running_loop().create_task(
                progress.run(options.progress_every))
        await stop.wait()
    finally:
        if reporter is not None:
            reporter.cancel()
        await shared.close(options.grace)
        if buffered is not None:
            # The last transitions' events reach the hooks before the process ends.
            await asyncio.to_thread(buffered.close, min(options.grace, 5.0))
        if not options.quiet:
            line = progress.summary()
            if line is not None:
                print(line, file=sys.stderr, flush=True)
    print(f"{NAME}: stopped", file=sys.stderr, flush=True)
    return 0
