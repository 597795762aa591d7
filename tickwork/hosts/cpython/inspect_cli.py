"""``tickwork inspect``: queue and job status in the terminal, through the HTTP API.

    tickwork inspect [--url URL] [--token TOKEN] [--timeout SECONDS]
                     (--owner KEY | --shared) [--job ID | --queue NAME] [--watch SECONDS]

Only the /v1 API is used, through ``tickwork.client``, so it works the same
against ``tickwork serve`` and a deployed Worker. Without ``--job`` or
``--queue`` it prints a table of every queue of the scope (queued, running,
settled, and settled by outcome); ``--queue`` prints one queue and its head;
``--job`` prints one job.
``--watch`` prints again every few seconds until Ctrl-C.
The exit codes are those of every command that calls the API
(``tickwork.hosts.cpython.api_commands``): 0 done, 1 the server refused
(no such job...), 2 usage, 3 no server to talk to or the token refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.api import wire
from tickwork.client import AsyncClient, RetryPolicy
from tickwork.hosts.cpython.api_commands import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandError,
    add_connection_arguments,
    exit_codes_epilog,
    explain,
    request_timeout,
    scope_title,
    server_token,
    server_url,
)
from tickwork.hosts.cpython.common import one_line

#: Table columns for the outcomes, in the API's order.
OUTCOME_COLUMNS = (("completed", "completed"), ("failed", "failed"),
                   ("cancelled", "cancelled"), ("outcome_unknown", "unknown"),
                   ("interrupted", "interrupted"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = exit_codes_epilog()
    add_connection_arguments(parser)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--job", metavar="ID", help="show one job")
    what.add_argument("--queue", metavar="NAME", help="show one queue and its head")
    parser.add_argument("--watch", type=float, metavar="SECONDS",
                        help="print again every SECONDS until Ctrl-C")


def main(options: argparse.Namespace) -> int:
    """Print once (or every ``--watch`` seconds); the exit code (see ``api_commands``)."""
    try:
        url, token = server_url(options), server_token(options)
        request_timeout(options)
        if options.watch is not None and options.watch <= 0:
            raise CommandError("--watch takes a positive number of seconds", EXIT_USAGE)
        if options.watch is None:
            print(asyncio.run(render(url, token, options)))
            return EXIT_OK
    except CommandError as error:
        print(f"tickwork inspect: {error}", file=sys.stderr)
        return error.exit_code
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch(url, token, options))
    return EXIT_OK


async def _watch(url: str, token: str, options: argparse.Namespace) -> None:
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    while True:
        try:
            text = await render(url, token, options)
        except CommandError as error:
            text = f"tickwork inspect: {error}"
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        print(f"{clear}{text}\n\n(every {options.watch:g} s, {stamp}; Ctrl-C to stop)",
              flush=True)
        await asyncio.sleep(options.watch)


async def render(url: str, token: str, options: argparse.Namespace) -> str:
    """What one look at the scope prints; CommandError for what went wrong."""
    title = scope_title(options)
    try:
        client = AsyncClient(url, token=token, timeout_s=options.timeout,
                             retry=RetryPolicy(attempts=2))
        jobs = client.shared() if options.shared else client.owner(options.owner)
        if options.job is not None:
            record = await jobs.read(options.job)
            if record is None:
                raise CommandError(f"404 job_not_found: no job {options.job!r}",
                                   EXIT_REFUSED)
            return format_job(wire.record_to_wire(record))
        if options.queue is not None:
            status = await jobs.queue_status(options.queue)
            head = await jobs.read_queue_head(options.queue)
            text = format_queues([wire.status_to_wire(status)],
                                 f"{title}, queue {options.queue!r} at {url}")
            return text + "\n\nhead: " + ("none" if head is None else
                                          f"{head.job_id} ({_state(wire.record_to_wire(head))})")
        statuses = await jobs.status()
        return format_queues([wire.status_to_wire(status) for status in statuses],
                             f"{title} at {url}")
    except CommandError:
        raise
    except Exception as error:
        explained = explain(error, url, options.timeout)
        if explained is None:
            raise
        raise explained from None


# ----------------------------------------------------------------- formatting


def format_queues(queues: Sequence[Mapping[str, Any]], title: str) -> str:
    """A table of queue statuses, with a total row when there are several."""
    if not queues:
        return f"{title}\n\nno jobs"
    header = ["queue", "queued", "delayed", "running", "settled",
              *(name for _, name in OUTCOME_COLUMNS)]
    rows = [[str(item["queue"]) + (" (paused)" if item.get("paused") else ""),
             *(str(item.get(key, 0)) for key in ("queued", "delayed", "running", "settled")),
             *(str(item["outcomes"].get(key, 0)) for key, _ in OUTCOME_COLUMNS)]
            for item in queues]
    if len(rows) > 1:
        totals = [sum(int(row[index]) for row in rows) for index in range(1, len(header))]
        rows.append(["(total)", *(str(total) for total in totals)])
    widths = [max(len(row[index]) for row in [header, *rows]) for index in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    lines = [line(header), "  ".join("-" * width for width in widths)]
    lines += [line(row) for row in rows]
    return f"{title}\n\n" + "\n".join(lines)


def format_job(job: Mapping[str, Any]) -> str:
    recovery = job.get("recovery")
    budget = "no recovery" if recovery is None else f"max {recovery['max_recoveries']}"
    fields = [
        ("job", job["job_id"]),
        ("queue", job["queue"]),
        ("lane", job["lane"]),
        ("priority", str(job["priority"])),
        ("state", _state(job)),
        ("recoveries", f"{job['recoveries']} ({budget})"),
        *_attempts(job),
        ("sequence", str(job["sequence"])),
        ("enqueued", _time(job.get("enqueued_at"))),
        *_due(job),
        ("started", _time(job.get("started_at"))),
        ("settled", _time(job.get("settled_at")) + _took(job)),
    ]
    if job.get("cancellation_id") is not None:
        fields.append(("cancellation", str(job["cancellation_id"])))
    error = job.get("error")
    if error is not None:
        fields.append(("error", one_line(f"{error['type']}: {error['message']}")))
    fields.append(("payload", json.dumps(job.get("payload"), ensure_ascii=False)))
    width = max(len(name) for name, _ in fields)
    text = "\n".join(f"{name.ljust(width)}  {value}" for name, value in fields)
    if error is not None and error.get("traceback"):
        # Last, whole and indented: the innermost frames are at its end.
        lines = str(error["traceback"]).rstrip("\n").split("\n")
        text += "\ntraceback\n" + "\n".join(f"  {line}" for line in lines)
    return text


def _attempts(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The attempt the job is on (of its policy's), and its earlier attempts."""
    retry = job.get("retry")
    if retry is None and not job.get("history"):
        return []
    attempt = str(job.get("attempt", 1))
    if retry is not None:
        attempt += f" of {retry['attempts']}"
    lines = [("attempt", attempt)]
    for entry in job.get("history", ()):
        ended = f"{entry['outcome']}" + (f" ({entry['failure_reason']})"
                                         if entry.get("failure_reason") else "")
        redriven = f", redriven as {entry['redrive_id']}" if entry.get("redrive_id") else ""
        raised = f", raised {one_line(entry['error'])}" if entry.get("error") else ""
        lines.append((f"attempt {entry['attempt']}",
                      f"{ended} at {_time(entry.get('ended_at'))}{redriven}{raised}"))
    return lines


def _due(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The job's asked-for time, and its due time while it waits, if any."""
    if job.get("run_at") is not None:
        asked = f"at {_time(job['run_at'])}"
    elif job.get("delay_ms") is not None:
        asked = f"{job['delay_ms'] / 1000:g} s after it was stored"
    else:
        return []
    if job.get("due_at") is not None:
        asked += f" (waits until {_time(job['due_at'])})"
    return [("due", asked)]


def _state(job: Mapping[str, Any]) -> str:
    if job["state"] != "settled":
        return str(job["state"])
    reason = job.get("failure_reason")
    return f"settled: {job['outcome']}" + (f" ({reason})" if reason else "")


def _time(epoch_ms: Any) -> str:
    if not isinstance(epoch_ms, int):
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{epoch_ms % 1000:03d} UTC"


def _took(job: Mapping[str, Any]) -> str:
    started, settled = job.get("started_at"), job.get("settled_at")
    if isinstance(started, int) and isinstance(settled, int):
        return f" (ran {(settled - started) / 1000:.3f} s)"
    return ""
