"""``tickwork jobs``, ``queues`` and ``schedules``: act on one scope's jobs,
queues and schedules from the terminal, through the HTTP API.

    tickwork jobs list (--queue NAME | --lane NAME) [--state STATE] [--outcome OUTCOME]
                       [--order newest|oldest] [--limit N] [--cursor CURSOR] [--all]
    tickwork jobs dead-letters --queue NAME [--limit N] [--cursor CURSOR] [--all]
    tickwork jobs cancel (JOB_ID [JOB_ID ...] [--only-if-queued] | --lane NAME)
                         [--cancellation-id ID]
    tickwork jobs redrive (JOB_ID [JOB_ID ...] | --queue NAME) [--redrive-id ID]
    tickwork jobs why JOB_ID [JOB_ID ...]
    tickwork jobs settled [--after SEQUENCE] [--limit N]        (an owner's feed)
    tickwork queues status [QUEUE]
    tickwork queues pause QUEUE [QUEUE ...]
    tickwork queues resume QUEUE [QUEUE ...]
    tickwork queues retention
    tickwork queues set-retention [QUEUE] --completed DURATION --failed DURATION
    tickwork queues clear-retention [QUEUE]
    tickwork queues limits
    tickwork queues set-limit (QUEUE | --lane NAME) N
    tickwork queues clear-limit (QUEUE | --lane NAME)
    tickwork queues rate-limits
    tickwork queues set-rate-limit (QUEUE | --lane NAME) N/DURATION [--burst B]
    tickwork queues clear-rate-limit (QUEUE | --lane NAME)
    tickwork schedules list
    tickwork schedules pause|resume|delete NAME [NAME ...]

Every action also takes --url URL (default $TICKWORK_URL, else
http://127.0.0.1:8787), --token TOKEN (default $TICKWORK_TOKEN), --timeout
SECONDS, the scope (--owner KEY or --shared) and --json. Only the /v1 API is
used, through ``tickwork.client``, so they work the same against ``tickwork
serve`` and a deployed Worker, on both scopes; the settled feed is an
owner's only (the shared queues have none), and asking it of --shared is
refused before anything is sent.

A list prints a table, then the --cursor of the next page if there is one
(--all follows the cursors to the end). An action prints one line per job,
queue or schedule. --json prints one JSON document instead: a list's page
as the API answers it (``{"jobs": [...], "cursor": ...}``), an action's
answers as a JSON array, one per argument, in the API's shapes.

A cancel or redrive without an id of yours gets a fresh one (``cli-`` and a
random hex), sent again as is if a reply is lost, so a retry is a replay.
Nothing to change is not an error (a queue paused already, a cancellation
replayed); a job or schedule that is not there, or a cancel or redrive the
engine refuses, is (exit 1, after the other arguments were tried).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, get_args

from tickwork.api import wire
from tickwork.client import Client, Jobs
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
from tickwork.hosts.cpython.inspect_cli import format_queues
from tickwork.model.jobs import JobRecord, JobState
from tickwork.model.limits import (
    MAX_RUNNING_LIMIT,
    ConcurrencyLimit,
    LimitKind,
    check_max_running,
)
from tickwork.model.outcomes import OUTCOMES, ListOrder
from tickwork.model.rate_limits import RateLimit, validate_rate_limit

#: The commands this module adds (their one-line help is ``tickwork.__main__``'s).
COMMANDS: Final = ("jobs", "queues", "schedules")

#: Actions the shared queues do not have, and what to use instead.
OWNER_ONLY: Final = {
    ("jobs", "settled"): "the settled feed is an owner's; the shared queues have none "
                         "(use 'tickwork jobs list --shared --queue NAME --state settled')",
}

#: The most jobs one dead-letters page asks for when redriving a whole queue.
DEAD_LETTER_PAGE: Final = 100
#: The most queued jobs one request cancels when cancelling a whole lane.
LANE_PAGE: Final = 100


# ------------------------------------------------------------------ arguments


def add_arguments(command: str, parser: argparse.ArgumentParser) -> None:
    """The actions of ``command`` (one of ``COMMANDS``) as subcommands of ``parser``."""
    parser.epilog = exit_codes_epilog()
    actions = parser.add_subparsers(dest="action", metavar="<action>", required=True)

    def action(name: str, summary: str) -> argparse.ArgumentParser:
        added = actions.add_parser(name, help=summary, description=summary + ".",
                                   epilog=exit_codes_epilog(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
        add_connection_arguments(added)
        added.add_argument("--json", action="store_true",
                           help="print one JSON document instead of text")
        return added

    if command == "jobs":
        _add_job_actions(action)
    elif command == "queues":
        _add_queue_actions(action)
    else:
        assert command == "schedules", command
        _add_schedule_actions(action)


def _add_job_actions(action: Callable[[str, str], argparse.ArgumentParser]) -> None:
    listing = action("list", "list one queue's or one lane's jobs in one state, a page "
                             "at a time")
    where = listing.add_mutually_exclusive_group(required=True)
    where.add_argument("--queue", metavar="NAME", help="the queue's jobs")
    where.add_argument("--lane", metavar="NAME", help="the lane's jobs")
    listing.add_argument("--state", choices=get_args(JobState), default=None,
                         help="queued (the default), running or settled")
    listing.add_argument("--outcome", choices=OUTCOMES,
                         help="settled jobs with this outcome (implies --state settled)")
    listing.add_argument("--order", choices=get_args(ListOrder), default="newest",
                         help="newest first (the default) or oldest first")
    _add_paging(listing, 50)

    dead = action("dead-letters", "list a queue's dead letters (settled failed, "
                                  "outcome_unknown or interrupted), newest settlement first")
    dead.add_argument("--queue", metavar="NAME", required=True, help="the queue")
    _add_paging(dead, 50)

    cancel = action("cancel", "cancel jobs: a queued job settles cancelled, a running "
                              "one is told to stop")
    cancel.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="the job(s) to cancel")
    cancel.add_argument("--lane", metavar="NAME",
                        help="cancel every queued job of this lane instead (running ones "
                             "keep running)")
    cancel.add_argument("--only-if-queued", action="store_true",
                        help="refuse (exit 1) for a job that is already running")
    cancel.add_argument("--cancellation-id", metavar="ID",
                        help="the cancellation's id, to make a repeated command a replay "
                             "(default: a fresh one)")

    redrive = action("redrive", "queue dead letters again, each as a new attempt chain")
    redrive.add_argument("job_ids", nargs="*", metavar="JOB_ID",
                         help="the dead letter(s) to redrive")
    redrive.add_argument("--queue", metavar="NAME",
                         help="redrive every dead letter of this queue instead")
    redrive.add_argument("--redrive-id", metavar="ID",
                         help="the redrive's id, to make a repeated command a replay "
                              "(default: a fresh one)")

    why = action("why", "say why jobs are not running yet: every hold on a queued job")
    why.add_argument("job_ids", nargs="+", metavar="JOB_ID", help="the job(s) to explain")

    settled = action("settled", "read an owner's settled feed: settled jobs in enqueue "
                                "order, after a sequence number")
    settled.add_argument("--after", type=int, default=0, metavar="SEQUENCE",
                         help="only jobs after this sequence number (default 0)")
    settled.add_argument("--limit", type=int, default=100, metavar="N",
                         help="at most N jobs (default 100, at most 1000)")


def _add_paging(parser: argparse.ArgumentParser, default_limit: int) -> None:
    parser.add_argument("--limit", type=int, default=default_limit, metavar="N",
                        help=f"jobs per page (default {default_limit}, at most 100)")
    parser.add_argument("--cursor", metavar="CURSOR",
                        help="start where the page that printed this cursor ended")
    parser.add_argument("--all", action="store_true",
                        help="follow the cursors: every page to the end")


def _add_queue_actions(action: Callable[[str, str], argparse.ArgumentParser]) -> None:
    status = action("status", "count the scope's jobs per queue and state, or one queue's")
    status.add_argument("queue", nargs="?", metavar="QUEUE",
                        help="only this queue (default: every queue with jobs)")
    pause = action("pause", "pause queues: no new job of theirs starts until resumed")
    pause.add_argument("queues", nargs="+", metavar="QUEUE", help="the queue(s) to pause")
    resume = action("resume", "resume paused queues")
    resume.add_argument("queues", nargs="+", metavar="QUEUE", help="the queue(s) to resume")
    action("retention", "list the retention policies in force: the scope's default, then "
                        "each queue's own")
    keep = action("set-retention", "keep a queue's settled jobs (or, without QUEUE, every "
                                   "queue's without a policy of its own) this long")
    keep.add_argument("queue", nargs="?", metavar="QUEUE",
                      help="the queue (default: the scope's default policy)")
    for option, kinds in (("--completed", "completed and cancelled jobs"),
                          ("--failed", "failed, outcome_unknown and interrupted jobs")):
        keep.add_argument(option, required=True, metavar="DURATION",
                          help=f"how long to keep {kinds} after they settle: 90m, 36h, 7d "
                               "(units ms, s, m, h, d), or 'forever'")
    clear = action("clear-retention", "remove a queue's policy (it follows the default "
                                      "again), or without QUEUE the scope's default (the "
                                      "built-in one applies again)")
    clear.add_argument("queue", nargs="?", metavar="QUEUE",
                       help="the queue (default: the scope's default policy)")
    # A lane is named with --lane in place of a queue, as in 'jobs list' and
    # 'jobs cancel': lanes have no commands of their own, and 'limits' lists
    # both kinds together.
    action("limits", "list the concurrency limits: each queue's and each lane's max_running "
                     "(a queue not listed runs one job at a time; a lane not listed has no "
                     "limit of its own)")
    limit = action("set-limit", "let at most N jobs of a queue, or of a lane across every "
                                "queue, run at once (running jobs are never stopped)")
    limit.add_argument("queue", nargs="?", metavar="QUEUE", help="the queue")
    limit.add_argument("--lane", metavar="NAME", help="limit this lane instead of a queue")
    limit.add_argument("max_running", metavar="N", help="at most this many at once (1 to "
                                                        f"{MAX_RUNNING_LIMIT:,})")
    unlimit = action("clear-limit", "remove a limit: the queue runs one job at a time "
                                    "again, the lane has no limit of its own")
    unlimit.add_argument("queue", nargs="?", metavar="QUEUE", help="the queue")
    unlimit.add_argument("--lane", metavar="NAME", help="clear this lane's limit instead")
    action("rate-limits", "list the rate limits (each queue's and lane's starts per period, "
                          "and when each next allows a start) and the holds executors' "
                          "RateLimited put in force")
    rate = action("set-rate-limit", "let a queue, or a lane across every queue, start at "
                                    "most N jobs per DURATION, a token bucket every claim "
                                    "checks and spends")
    rate.add_argument("queue", nargs="?", metavar="QUEUE", help="the queue")
    rate.add_argument("--lane", metavar="NAME", help="rate-limit this lane instead of a queue")
    rate.add_argument("rate", metavar="N/DURATION",
                      help="N starts per DURATION: 10/1s, 600/1h (units ms, s, m, h, d)")
    rate.add_argument("--burst", metavar="B",
                      help="how many may start at once after a quiet spell (default: N)")
    unrate = action("clear-rate-limit", "remove a rate limit and any hold on its key: its "
                                        "jobs start as fast as claims take them")
    unrate.add_argument("queue", nargs="?", metavar="QUEUE", help="the queue")
    unrate.add_argument("--lane", metavar="NAME", help="clear this lane's instead")


def _add_schedule_actions(action: Callable[[str, str], argparse.ArgumentParser]) -> None:
    action("list", "list the scope's schedules")
    for name, summary in (("pause", "pause schedules: their slots get no job until resumed"),
                          ("resume", "resume paused schedules from their next slot"),
                          ("delete", "delete schedules (the jobs they created stay)")):
        added = action(name, summary)
        added.add_argument("names", nargs="+", metavar="NAME", help="the schedule(s)")


# ----------------------------------------------------------------------- main


class Report:
    """Where an action's results go: lines as they come, or one JSON document."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.items: list[Any] = []
        self.failed = False

    def item(self, text: str, data: Any, *, ok: bool = True) -> None:
        """One argument's result (a JSON array's element)."""
        self.failed = self.failed or not ok
        if self.as_json:
            self.items.append(data)
        else:
            print(text, flush=True)

    def document(self, text: str, data: Any) -> None:
        """The whole result of a list or a status."""
        print(_json_text(data) if self.as_json else text, flush=True)

    def finish(self) -> None:
        """Print the JSON array of the items, if any (also when an error cut it short)."""
        if self.as_json and self.items:
            print(_json_text(self.items), flush=True)
            self.items = []


Action = Callable[[Jobs, argparse.Namespace, Report], None]


def main(options: argparse.Namespace) -> int:
    """Run ``tickwork <command> <action>``; its exit code (see ``api_commands``)."""
    name = f"tickwork {options.command} {options.action}"
    report = Report(options.json)
    url, timeout = "", 0.0
    try:
        url, token, timeout = server_url(options), server_token(options), request_timeout(options)
        unsupported = OWNER_ONLY.get((options.command, options.action))
        if options.shared and unsupported is not None:
            raise CommandError(unsupported, EXIT_USAGE)
        client = Client(url, token=token, timeout_s=timeout)
        jobs = client.shared() if options.shared else client.owner(options.owner)
        ACTIONS[(options.command, options.action)](jobs, options, report)
    except CommandError as error:
        report.finish()
        print(f"{name}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:  # Ctrl-C (a long --all): the results so far are printed
        report.finish()
        return 130
    except Exception as error:
        explained = explain(error, url, timeout)
        if explained is None:
            raise
        report.finish()
        print(f"{name}: {explained}", file=sys.stderr)
        return explained.exit_code
    report.finish()
    return EXIT_REFUSED if report.failed else EXIT_OK


# ---------------------------------------------------------------------- jobs


def list_jobs(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    state: JobState = options.state or ("settled" if options.outcome else "queued")
    found: list[JobRecord] = []
    cursor = options.cursor
    while True:
        page = jobs.list_jobs(options.queue, lane=options.lane, state=state,
                              outcome=options.outcome, order=options.order,
                              limit=options.limit, cursor=cursor)
        found += page.jobs
        cursor = page.cursor
        if cursor is None or not options.all:
            break
    where = f"queue {options.queue!r}" if options.queue is not None \
        else f"lane {options.lane!r}"
    what = f"{options.outcome} jobs" if options.outcome else f"{state} jobs"
    report.document(_job_table(found, f"no {what} in {where}", cursor),
                    {"jobs": [wire.record_to_wire(job) for job in found], "cursor": cursor})


def dead_letters(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    found: list[JobRecord] = []
    cursor = options.cursor
    while True:
        page = jobs.dead_letters(options.queue, limit=options.limit, cursor=cursor)
        found += page.jobs
        cursor = page.cursor
        if cursor is None or not options.all:
            break
    report.document(_job_table(found, f"no dead letters in queue {options.queue!r}", cursor),
                    {"queue": options.queue, "jobs": [wire.record_to_wire(job) for job in found],
                     "cursor": cursor})


def read_settled(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    found = jobs.read_settled(options.limit, options.after)
    text = _job_table(found, f"no settled jobs after sequence {options.after}", None,
                      with_sequence=True)
    if found:
        text += f"\n\nread on with: --after {found[-1].sequence}"
    report.document(text, {"jobs": [wire.record_to_wire(job) for job in found]})


def why(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    for job_id in options.job_ids:
        wait = jobs.explain(job_id)
        if wait is None:
            report.item(f"{job_id}: no such job", None, ok=False)
            continue
        if wait.state != "queued":
            said = f"{wait.state}; not waiting"
        elif not wait.holds:
            said = "queued; nothing holds it: the next tick may claim it"
        else:
            said = "queued; held: " + "; ".join(hold.describe() for hold in wait.holds)
        report.item(f"{job_id}: {said}", wire.job_wait_to_wire(wait))


#: What a cancel's status says, and whether it is what was asked for.
CANCELLED: Final = {
    "recorded": ("cancellation recorded", True),
    "replayed": ("cancellation recorded already under this id (replayed)", True),
    "already_settled": ("settled already; nothing to cancel", False),
    "refused": ("running already; not cancelled (--only-if-queued)", False),
    "conflict": ("carries another cancellation already", False),
    "not_found": ("no such job", False),
}


def cancel(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    if bool(options.job_ids) == (options.lane is not None):
        raise CommandError("give the job ids to cancel, or --lane NAME for every queued job "
                           "of a lane (not both)", EXIT_USAGE)
    cancellation_id = options.cancellation_id or _fresh_id()
    if options.lane is not None:
        if options.only_if_queued:
            raise CommandError("--lane cancels queued jobs only already; drop "
                               "--only-if-queued", EXIT_USAGE)
        _cancel_lane(jobs, options.lane, cancellation_id, report)
        return
    for job_id in options.job_ids:
        result = jobs.cancel(job_id, cancellation_id, only_if_queued=options.only_if_queued)
        said, ok = CANCELLED.get(result.status, (result.status, False))
        report.item(f"{job_id}: {said}", wire.cancel_to_wire(result), ok=ok)


#: Why a redrive was refused, in words.
REDRIVE_REFUSALS: Final = {
    "not_settled": "it has not settled",
    "not_dead": "it settled completed or cancelled: not a dead letter",
    "cancellation_recorded": "it carries a cancellation",
}


def redrive(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    if bool(options.job_ids) == (options.queue is not None):
        raise CommandError("give the job ids to redrive, or --queue NAME for every dead "
                           "letter of a queue (not both)", EXIT_USAGE)
    redrive_id = options.redrive_id or _fresh_id()
    if options.queue is not None:
        _redrive_queue(jobs, options.queue, redrive_id, report)
        return
    for job_id in options.job_ids:
        result = jobs.redrive(job_id, redrive_id)
        if result.status == "redriven":
            said, ok = f"redriven: queued again as attempt 1 (redrive id {redrive_id})", True
        elif result.status == "replayed":
            said, ok = "redriven already under this id (replayed)", True
        elif result.status == "not_found":
            said, ok = "no such job", False
        else:
            reason = REDRIVE_REFUSALS.get(result.reason or "", result.reason or "")
            said, ok = f"refused: {reason}", False
        report.item(f"{job_id}: {said}", wire.redrive_to_wire(result), ok=ok)


def _redrive_queue(jobs: Jobs, queue: str, redrive_id: str, report: Report) -> None:
    """Every dead letter of ``queue``, a page per request (the server redrives
    each page under the one id, so the command may be run again)."""
    cursor = None
    while True:
        page = jobs.redrive_dead_letters(queue, redrive_id, limit=DEAD_LETTER_PAGE,
                                         cursor=cursor)
        if cursor is None and page.cursor is None and not (
                page.redriven or page.replayed or page.refused):
            report.document(f"no dead letters in queue {queue!r}", [])
            return
        report.item(f"{queue}: {page.redriven} redriven, {page.replayed} redriven already "
                    f"under this id, {page.refused} refused (redrive id {redrive_id})",
                    wire.redriven_to_wire(page), ok=not page.refused)
        cursor = page.cursor
        if cursor is None:
            return


def _cancel_lane(jobs: Jobs, lane: str, cancellation_id: str, report: Report) -> None:
    """Every queued job of ``lane``, a page per request (the server cancels
    each page under the one id, so the command may be run again)."""
    cursor = None
    while True:
        page = jobs.cancel_lane(lane, cancellation_id, limit=LANE_PAGE, cursor=cursor)
        if cursor is None and page.cursor is None and not (
                page.cancelled or page.replayed or page.skipped):
            report.document(f"no queued jobs in lane {lane!r}", [])
            return
        report.item(f"{lane}: {page.cancelled} cancelled, {page.replayed} cancelled already "
                    f"under this id, {page.skipped} skipped (started, settled or cancelled "
                    f"under another id meanwhile) (cancellation id {cancellation_id})",
                    wire.lane_cancelled_to_wire(page), ok=not page.skipped)
        cursor = page.cursor
        if cursor is None:
            return


def _fresh_id() -> str:
    return f"cli-{uuid.uuid4().hex}"


# -------------------------------------------------------------------- queues


def queue_status(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    title = f"{scope_title(options)} at {server_url(options)}"
    if options.queue is not None:
        status = wire.status_to_wire(jobs.queue_status(options.queue))
        report.document(format_queues([status], f"{title}, queue {options.queue!r}"),
                        {"queue": status})
        return
    statuses = [wire.status_to_wire(status) for status in jobs.status()]
    report.document(format_queues(statuses, title), {"queues": statuses})


def pause_queues(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    for queue in options.queues:
        changed = jobs.pause(queue)
        report.item(f"queue {queue!r} " + ("paused" if changed else "was paused already"),
                    {"queue": queue, "paused": True, "changed": changed})


def resume_queues(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    for queue in options.queues:
        changed = jobs.resume(queue)
        report.item(f"queue {queue!r} " + ("resumed" if changed else "was not paused"),
                    {"queue": queue, "paused": False, "changed": changed})


#: A duration's units, in ms.
DURATION_UNITS: Final = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(option: str, text: str) -> int | None:
    """``text`` (``90m``, ``36h``, ``7d``, ``forever``) in ms; None for forever.
    The engine checks the range (a minute to 100 years) and names the field."""
    if text == "forever":
        return None
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(number):] or "ms"
    if not number.isdigit() or unit not in DURATION_UNITS:
        raise CommandError(f"{option}: {text!r} is not a duration: give a whole number and a "
                           f"unit ({', '.join(DURATION_UNITS)}), like 7d, or 'forever'",
                           EXIT_USAGE)
    return int(number) * DURATION_UNITS[unit]


def _duration(ms: int | None) -> str:
    """A kept time as the largest unit that divides it ("forever" for None)."""
    if ms is None:
        return "forever"
    for unit in ("d", "h", "m", "s"):
        if ms % DURATION_UNITS[unit] == 0:
            return f"{ms // DURATION_UNITS[unit]}{unit}"
    return f"{ms}ms"


def list_retention(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    policies = jobs.retention()
    rows = [["(default)" if policy.queue is None else policy.queue,
             _duration(policy.keep_completed_ms), _duration(policy.keep_failed_ms),
             "built in" if policy.updated_at is None else _time(policy.updated_at)]
            for policy in policies]
    text = _table(["queue", "completed, cancelled", "failed, dead letters", "set (UTC)"], rows)
    report.document(text, {"policies": [wire.retention_to_wire(policy)
                                        for policy in policies]})


def set_retention(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    completed = parse_duration("--completed", options.completed)
    failed = parse_duration("--failed", options.failed)
    changed = jobs.set_retention(options.queue, keep_completed_ms=completed,
                                 keep_failed_ms=failed)
    subject = "the default" if options.queue is None else f"queue {options.queue!r}"
    said = (f"{subject} keeps completed jobs {_duration(completed)}, failed ones "
            f"{_duration(failed)}" + ("" if changed else " (already so)"))
    report.item(said, {"queue": options.queue, "keep_completed_ms": completed,
                       "keep_failed_ms": failed, "changed": changed})


def clear_retention(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    changed = jobs.clear_retention(options.queue)
    if options.queue is None:
        said = "the default is the built-in one" + ("" if changed else " already")
    else:
        said = f"queue {options.queue!r} follows the default" + (
            "" if changed else " already (it had no policy)")
    report.item(said, {"queue": options.queue, "changed": changed})


def list_limits(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    limits = jobs.limits()
    if not limits:
        text = ("no limits: every queue runs one job at a time, and no lane has a limit "
                "of its own")
    else:
        text = _table(["kind", "key", "max_running", "updated (UTC)"],
                      [[limit.kind, limit.key, str(limit.max_running),
                        _time(limit.updated_at)] for limit in limits])
    report.document(text, {"limits": [wire.limit_to_wire(limit) for limit in limits]})


def _limit_subject(options: argparse.Namespace) -> tuple[LimitKind, str]:
    """The kind and key a (rate) limit's action names: QUEUE or --lane, one of them."""
    if (options.queue is None) == (options.lane is None):
        raise CommandError("give a QUEUE, or --lane NAME for a lane's limit (not both)",
                           EXIT_USAGE)
    return ("queue", options.queue) if options.lane is None else ("lane", options.lane)


def _at_once(limit: ConcurrencyLimit) -> str:
    runs = ("1 job at a time" if limit.max_running == 1
            else f"up to {limit.max_running} jobs at once")
    return runs + (" across every queue" if limit.kind == "lane" else "")


def set_limit(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    kind, key = _limit_subject(options)
    given = options.max_running
    # Whole numbers only; anything else is refused as the engine would, by name.
    max_running = check_max_running(_whole(given))
    changed = jobs.set_limit(kind, key, max_running)
    limit = ConcurrencyLimit(kind, key, max_running)
    said = f"{kind} {key!r} runs {_at_once(limit)}" + ("" if changed else " (already so)")
    report.item(said, {"kind": kind, "key": key, "max_running": max_running,
                       "changed": changed})


def clear_limit(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    kind, key = _limit_subject(options)
    changed = jobs.clear_limit(kind, key)
    if kind == "queue":
        said = (f"queue {key!r} runs one job at a time again" if changed
                else f"queue {key!r} had no limit (it runs one job at a time)")
    else:
        said = (f"lane {key!r} has no limit of its own any more" if changed
                else f"lane {key!r} had no limit")
    report.item(said, {"kind": kind, "key": key, "changed": changed})


def list_rate_limits(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    limits = jobs.rate_limits()
    if not limits:
        text = "no rate limits and no holds: jobs start as fast as claims take them"
    else:
        text = _table(["kind", "key", "rate", "burst", "next start (UTC)", "held until (UTC)"],
                      [[limit.kind, limit.key, _rate(limit),
                        "-" if limit.burst is None else str(limit.burst),
                        _time(limit.next_start_at), _time(limit.held_until)]
                       for limit in limits])
    report.document(text, {"rate_limits": [wire.rate_limit_to_wire(limit)
                                           for limit in limits]})


def _rate(limit: RateLimit) -> str:
    if limit.starts is None or limit.period_ms is None:
        return "- (held only)"
    return f"{limit.starts}/{_duration(limit.period_ms)}"


def _whole(text: str) -> int | str:
    """A whole number as an int; anything else as given, for the engine's
    check to refuse by name."""
    return int(text) if text.isascii() and text.isdigit() else text


def set_rate_limit(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    kind, key = _limit_subject(options)
    starts_text, slash, period_text = options.rate.partition("/")
    if not slash:
        raise CommandError(f"N/DURATION: {options.rate!r} is not a rate: give starts per "
                           "duration, like 10/1s", EXIT_USAGE)
    period_ms = parse_duration("N/DURATION", period_text)
    burst = None if options.burst is None else _whole(options.burst)
    limit = validate_rate_limit(kind, key, _whole(starts_text), period_ms, burst)
    assert limit.starts is not None and limit.period_ms is not None
    changed = jobs.set_rate_limit(kind, key, limit.starts, limit.period_ms, limit.burst)
    said = (f"{kind} {key!r} starts at most {_rate(limit)} (burst {limit.burst})"
            + ("" if changed else " (already so)"))
    report.item(said, {"kind": kind, "key": key, "starts": limit.starts,
                       "period_ms": limit.period_ms, "burst": limit.burst,
                       "changed": changed})


def clear_rate_limit(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    kind, key = _limit_subject(options)
    changed = jobs.clear_rate_limit(kind, key)
    said = (f"{kind} {key!r} has no rate limit or hold any more" if changed
            else f"{kind} {key!r} had no rate limit or hold")
    report.item(said, {"kind": kind, "key": key, "changed": changed})


# ----------------------------------------------------------------- schedules


def list_schedules(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
    records = jobs.schedules()
    wired = [wire.schedule_record_to_wire(record) for record in records]
    if not records:
        text = "no schedules"
    else:
        header = ["schedule", "when", "queue", "lane", "next (UTC)", "state"]
        rows = [[item["name"], _when(item), item["job"]["queue"], item["job"]["lane"],
                 _time(item["next_at"]), "paused" if item["paused"] else "active"]
                for item in wired]
        text = _table(header, rows)
    report.document(text, {"schedules": wired})


def _when(schedule: Mapping[str, Any]) -> str:
    if schedule.get("cron") is not None:
        return f"cron {schedule['cron']}"
    return f"every {schedule['every_ms'] / 1000:g} s"


def _schedule_action(verb: str, call: Callable[[Jobs, str], bool], unchanged: str
                     ) -> Action:
    def act(jobs: Jobs, options: argparse.Namespace, report: Report) -> None:
        names: set[str] | None = None
        for name in options.names:
            changed = call(jobs, name)
            if changed:
                said, ok = verb, True
            else:
                # The reply is the same for a schedule left as it was and for
                # one that is not there: the list tells them apart.
                if names is None:
                    names = {record.schedule.name for record in jobs.schedules()}
                ok = name in names and bool(unchanged)
                said = unchanged if ok else "no such schedule"
            report.item(f"schedule {name!r}: {said}", {"name": name, "changed": changed},
                        ok=ok)
    return act


# ---------------------------------------------------------------- formatting


def _json_text(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)


def _job_table(found: Sequence[JobRecord], empty: str, cursor: str | None, *,
               with_sequence: bool = False) -> str:
    if not found:
        text = empty
    else:
        header = ["job", "queue", "lane", "priority", "state", "attempt",
                  "enqueued (UTC)", "settled or due (UTC)"]
        if with_sequence:
            header.insert(0, "sequence")
        rows = []
        for job in found:
            row = [job.job_id, job.queue, job.lane, str(job.priority), _state(job),
                   str(job.attempt), _time(job.enqueued_at),
                   _time(job.settled_at) if job.settled_at is not None
                   else (f"due {_time(job.due_at)}" if job.due_at is not None else "-")]
            if with_sequence:
                row.insert(0, str(job.sequence))
            rows.append(row)
        text = _table(header, rows)
    if cursor is not None:
        text += f"\n\nmore: pass --cursor {cursor} for the next page (or --all)"
    return text


def _state(job: JobRecord) -> str:
    if job.state != "settled":
        return job.state
    reason = f" ({job.failure_reason})" if job.failure_reason else ""
    return f"{job.outcome}{reason}"


def _time(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = [[one_line(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[index]) for row in cells) for index in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


ACTIONS: Final[Mapping[tuple[str, str], Action]] = {
    ("jobs", "list"): list_jobs,
    ("jobs", "dead-letters"): dead_letters,
    ("jobs", "cancel"): cancel,
    ("jobs", "redrive"): redrive,
    ("jobs", "settled"): read_settled,
    ("jobs", "why"): why,
    ("queues", "status"): queue_status,
    ("queues", "pause"): pause_queues,
    ("queues", "resume"): resume_queues,
    ("queues", "retention"): list_retention,
    ("queues", "set-retention"): set_retention,
    ("queues", "clear-retention"): clear_retention,
    ("queues", "limits"): list_limits,
    ("queues", "set-limit"): set_limit,
    ("queues", "clear-limit"): clear_limit,
    ("queues", "rate-limits"): list_rate_limits,
    ("queues", "set-rate-limit"): set_rate_limit,
    ("queues", "clear-rate-limit"): clear_rate_limit,
    ("schedules", "list"): list_schedules,
    ("schedules", "pause"): _schedule_action(
        "paused", lambda jobs, name: jobs.pause_schedule(name), "was paused already"),
    ("schedules", "resume"): _schedule_action(
        "resumed", lambda jobs, name: jobs.resume_schedule(name), "was not paused"),
    ("schedules", "delete"): _schedule_action(
        "deleted (the jobs it created stay)", lambda jobs, name: jobs.delete_schedule(name), ""),
}
