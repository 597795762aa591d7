"""What every command that calls the HTTP API shares: where the server is,
the token, the scope, and how a failure becomes a message and an exit code.

``tickwork inspect``, ``jobs``, ``queues`` and ``schedules`` take the same
``--url`` (default ``$TICKWORK_URL``, else http://127.0.0.1:8787),
``--token`` (default ``$TICKWORK_TOKEN``), ``--timeout`` and ``--owner KEY``
or ``--shared``, and exit with the same codes:

    0  done
    1  the server answered with an error for this request: no such job or
       schedule, a cancel or redrive refused, a server without that scope,
       any other refusal or server error
    2  usage: bad options or arguments (argparse's own code), no token, an
       invalid URL, an argument the API would refuse (nothing is sent), an
       action the scope does not have
    3  no tickwork API to talk to: the server cannot be reached (refused,
       unknown host, no reply in time), what answered is not tickwork's API,
       or the token was refused (401) or the server has none (503)
"""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import Final

from tickwork.api.wire import ApiError
from tickwork.client import TransportError
from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob

DEFAULT_URL: Final = "http://127.0.0.1:8787"
URL_ENV: Final = "TICKWORK_URL"
TOKEN_ENV: Final = "TICKWORK_TOKEN"
DEFAULT_TIMEOUT_S: Final = 10.0

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3

#: The exit codes and what each means, for help texts and the reference page.
EXIT_CODES: Final = (
    (EXIT_OK, "done"),
    (EXIT_REFUSED, "the server answered with an error for this request (not found, "
                   "refused, conflict, no such scope, a server error)"),
    (EXIT_USAGE, "usage: bad options or arguments, no token, an invalid URL, an "
                 "action the scope does not have (nothing was sent)"),
    (EXIT_UNREACHABLE, "no tickwork API to talk to: unreachable, no reply in time, not "
                       "tickwork's answer, or the token refused"),
)


class CommandError(Exception):
    """A failure shown to the user in one line, and the exit code it means."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def exit_codes_epilog() -> str:
    """The exit codes, as the end of a command's ``--help``."""
    lines = [textwrap.fill(meaning, 78, initial_indent=f"  {code}  ", subsequent_indent="     ")
             for code, meaning in EXIT_CODES]
    return "exit codes:\n" + "\n".join(lines)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--token``, ``--timeout`` and the scope (``--owner`` or ``--shared``)."""
    parser.add_argument("--url", default=None,
                        help=f"the API's base URL (default ${URL_ENV}, else {DEFAULT_URL})")
    parser.add_argument("--token", help=f"API bearer token (default ${TOKEN_ENV})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"seconds one request may take (default {DEFAULT_TIMEOUT_S:g})")
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--owner", metavar="KEY", help="one owner's jobs")
    scope.add_argument("--shared", action="store_true", help="the shared queues")


def server_url(options: argparse.Namespace) -> str:
    """The base URL: ``--url``, else ``$TICKWORK_URL``, else the local default."""
    url: str = options.url or os.environ.get(URL_ENV) or DEFAULT_URL
    return url.rstrip("/")


def server_token(options: argparse.Namespace) -> str:
    """The token: ``--token``, else ``$TICKWORK_TOKEN``; a usage error without one."""
    token: str | None = options.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise CommandError(f"no token; pass --token or set {TOKEN_ENV}", EXIT_USAGE)
    return token


def request_timeout(options: argparse.Namespace) -> float:
    timeout: float = options.timeout
    if not timeout > 0:
        raise CommandError("--timeout takes a positive number of seconds", EXIT_USAGE)
    return timeout


def scope_title(options: argparse.Namespace) -> str:
    """How to name the scope."""
    return "shared queues" if options.shared else f"owner {options.owner!r}"


def explain(error: Exception, url: str, timeout_s: float) -> CommandError | None:
    """The message and exit code for a failure of a call to the API at
    ``url``, or None for an exception that is not such a failure."""
    if isinstance(error, InvalidArgument):
        # Refused before anything was sent (the client checks as the server
        # does), or rebuilt from the server's identical 400.
        prefix = "invalid URL" if error.field == "base_url" else error.field
        return CommandError(f"{prefix}: {error.problem}", EXIT_USAGE)
    if isinstance(error, InvalidJob):
        return CommandError(str(error), EXIT_USAGE)
    if isinstance(error, IngestConflict):
        return CommandError(str(error), EXIT_REFUSED)
    if isinstance(error, TransportError):
        return CommandError(_unreachable(url, error, timeout_s), EXIT_UNREACHABLE)
    if isinstance(error, ApiError):
        return _refused(error, url)
    return None


def _refused(error: ApiError, url: str) -> CommandError:
    if error.status == 401:
        return CommandError(f"401 unauthorized ({error.message or 'bad token'}); pass the "
                            f"server's token with --token or {TOKEN_ENV}", EXIT_UNREACHABLE)
    if error.code == "token_not_configured":
        return CommandError(f"{error.status} {error.code}: the server at {url} has no API "
                            "token configured", EXIT_UNREACHABLE)
    if error.code == "unexpected_answer":
        return CommandError(f"no tickwork API at {url}: {error.message}", EXIT_UNREACHABLE)
    message = f"{error.status} {error.code}: {error.message}"
    if error.code == "scope_not_configured":
        message += (" (tickwork serve has shared queues with --postgres DSN; a Worker, with "
                    "its DB binding)")
    elif error.status not in (404, 409):
        message = f"HTTP {message}"
    return CommandError(message, EXIT_REFUSED)


def _unreachable(url: str, error: TransportError, timeout_s: float) -> str:
    cause = error.__cause__
    reason = getattr(cause, "reason", cause)
    if isinstance(reason, ConnectionRefusedError):
        return f"cannot connect to {url}: connection refused; is tickwork serve running there?"
    if not error.maybe_sent:
        return f"cannot connect to {url}: {reason}; is tickwork serve running there?"
    if isinstance(reason, TimeoutError):
        return f"no reply from {url} within {timeout_s:g} s"
    return f"no reply from {url}: {reason}"
