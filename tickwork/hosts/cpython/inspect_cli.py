"""``tickwork inspect``: queue and job status in the terminal, through the HTTP API.

    tickwork inspect [--url URL] [--token TOKEN] (--owner KEY | --shared)
                     [--job ID | --queue NAME] [--watch SECONDS]

Only the /v1 API is used, through ``tickwork.client``, so it works the same
against ``tickwork serve`` and a deployed Worker. Without ``--job`` or
``--queue`` it prints a table of every queue of the scope (queued, running,
settled, and settled by outcome); ``--queue`` prints one queue and its head;
``--job`` prints one job.
``--watch`` prints again every few seconds until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.api import wire
from tickwork.api.wire import ApiError
from tickwork.client import AsyncClient, RetryPolicy, TransportError
from tickwork.model.errors import InvalidArgument

DEFAULT_URL = "http://127.0.0.1:8787"
URL_ENV = "TICKWORK_URL"
TOKEN_ENV = "TICKWORK_TOKEN"
TIMEOUT_S = 10.0

#: Table columns for the outcomes, in the API's order.
OUTCOME_COLUMNS = (("completed", "completed"), ("failed", "failed"),
                   ("cancelled", "cancelled"), ("outcome_unknown", "unknown"),
                   ("interrupted", "interrupted"))


class InspectError(Exception):
    """A problem shown to the user in one line."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=None,
                        help=f"the API's base URL (default ${URL_ENV}, else {DEFAULT_URL})")
    parser.add_argument("--token", help=f"API bearer token (default ${TOKEN_ENV})")
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--owner", metavar="KEY", help="one owner's jobs")
    scope.add_argument("--shared", action="store_true", help="the shared queues")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--job", metavar="ID", help="show one job")
    what.add_argument("--queue", metavar="NAME", help="show one queue and its head")
    parser.add_argument("--watch", type=float, metavar="SECONDS",
                        help="print again every SECONDS until Ctrl-C")


def main(options: argparse.Namespace) -> int:
    url = (options.url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    token = options.token or os.environ.get(TOKEN_ENV)
    if not token:
        print(f"tickwork inspect: no token; pass --token or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    if options.watch is not None and options.watch <= 0:
        print("tickwork inspect: --watch takes a positive number of seconds", file=sys.stderr)
        return 2
    if options.watch is None:
        try:
            print(asyncio.run(render(url, token, options)))
        except InspectError as error:
            print(f"tickwork inspect: {error}", file=sys.stderr)
            return 1
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_watch(url, token, options))
    return 0


async def _watch(url: str, token: str, options: argparse.Namespace) -> None:
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
    while True:
        try:
            text = await render(url, token, options)
        except InspectError as error:
            text = f"tickwork inspect: {error}"
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        print(f"{clear}{text}\n\n(every {options.watch:g} s, {stamp}; Ctrl-C to stop)",
              flush=True)
        await asyncio.sleep(options.watch)


def scope_title(options: argparse.Namespace) -> str:
    """How to name the scope."""
    return "shared queues" if options.shared else f"owner {options.owner!r}"


async def render(url: str, token: str, options: argparse.Namespace) -> str:
    """What one look at the scope prints."""
    title = scope_title(options)
    try:
        client = AsyncClient(url, token=token, timeout_s=TIMEOUT_S,
                             retry=RetryPolicy(attempts=2))
        jobs = client.shared() if options.shared else client.owner(options.owner)
        if options.job is not None:
            record = await jobs.read(options.job)
            if record is None:
                raise InspectError(f"404 job_not_found: no job {options.job!r}")
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
    except InvalidArgument as error:
        prefix = "invalid URL" if error.field == "base_url" else error.field
        raise InspectError(f"{prefix}: {error.problem}") from None
    except TransportError as error:
        raise InspectError(_unreachable(url, error)) from None
    except ApiError as error:
        raise InspectError(_refused(error)) from None


def _refused(error: ApiError) -> str:
    if error.status == 401:
        return (f"401 unauthorized ({error.message or 'bad token'}); pass the "
                f"server's token with --token or {TOKEN_ENV}")
    if error.status == 404:
        return f"404 {error.code}: {error.message}"
    return f"HTTP {error.status} {error.code}: {error.message}"


def _unreachable(url: str, error: TransportError) -> str:
    cause = error.__cause__
    reason = getattr(cause, "reason", cause)
    if isinstance(reason, ConnectionRefusedError):
        return f"cannot connect to {url}: connection refused; is tickwork serve running there?"
    if not error.maybe_sent:
        return f"cannot connect to {url}: {reason}; is tickwork serve running there?"
    if isinstance(reason, TimeoutError):
        return f"no reply from {url} within {TIMEOUT_S:g} s"
    return f"no reply from {url}: {reason}"


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
        fields.append(("error", _one_line(f"{error['type']}: {error['message']}")))
    fields.append(("payload", json.dumps(job.get("payload"), ensure_ascii=False)))
    width = max(len(name) for name, _ in fields)
    text = "\n".join(f"{name.ljust(width)}  {value}" for name, value in fields)
    if error is not None and error.get("traceback"):
        # Last, whole and indented: the innermost frames are at its end.
        lines = str(error["traceback"]).rstrip("\n").split("\n")
        text += "\ntraceback\n" + "\n".join(f"  {line}" for line in lines)
    return text


def _one_line(text: str) -> str:
    """``text`` on one line of the table (a message may hold newlines)."""
    return " ".join(text.splitlines()) if "\n" in text or "\r" in text else text


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
        raised = f", raised {_one_line(entry['error'])}" if entry.get("error") else ""
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
