"""How the client sends a request: ``urllib`` on CPython, ``fetch`` in a Worker.

* ``UrllibTransport`` (synchronous): Python's ``urllib.request``, so TLS is
  verified with the system's trust store and ``HTTP(S)_PROXY`` /
  ``NO_PROXY`` apply. Redirects are not followed (a 3xx is an answer).
* ``ThreadedUrllibTransport`` (async, CPython): the same, in a worker thread
  per request (``asyncio.to_thread``), so the event loop never blocks.
* ``FetchTransport`` (async, Workers/Pyodide): the Workers ``fetch``,
  ``redirect: "manual"``; imported on first use, so this module loads anywhere.

No transport keeps connections open between requests: the API is called at
the rate a producer enqueues, and a connection per call keeps the client
free of dependencies (an HTTP library with pooling would be an extra without
a Workers build). ``default_async_transport()`` picks by platform.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import urllib.error
import urllib.request  # loads on Pyodide too (without ssl); used only on CPython
from typing import Any

from tickwork._pyodide import fetch_error_message, fetch_never_sent
from tickwork.client.core import AsyncTransport, HttpAnswer, HttpRequest, TransportError

#: Most bytes of an answer read (the API's largest answers are far smaller).
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class UrllibTransport:
    """Synchronous HTTP through ``urllib.request`` (see the module doc)."""

    def __init__(self) -> None:
        self._opener = urllib.request.build_opener(_NoRedirect())

    def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        prepared = urllib.request.Request(request.url, data=request.body,
                                          headers=dict(request.headers),
                                          method=request.method)
        try:
            with self._opener.open(prepared, timeout=timeout_s) as response:
                return HttpAnswer(response.status, _lower(response.headers.items()),
                                  response.read(MAX_ANSWER_BYTES))
        except urllib.error.HTTPError as answer:  # a 4xx/5xx (or 3xx) is an answer
            with answer:
                return HttpAnswer(answer.code, _lower(answer.headers.items()),
                                  answer.read(MAX_ANSWER_BYTES))
        except urllib.error.URLError as error:
            reason = error.reason
            never_sent = isinstance(reason, (ConnectionRefusedError, socket.gaierror))
            raise TransportError(f"{request.method} {request.url}: {reason}",
                                 maybe_sent=not never_sent) from error
        except (TimeoutError, OSError) as error:
            raise TransportError(f"{request.method} {request.url}: {error!r}",
                                 maybe_sent=True) from error


class ThreadedUrllibTransport:
    """``UrllibTransport`` for ``await``: each request in a worker thread."""

    def __init__(self) -> None:
        self._sync = UrllibTransport()

    async def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        return await asyncio.to_thread(self._sync.send, request, timeout_s)


class FetchTransport:
    """The Workers ``fetch`` (a Worker calling another Worker's tickwork).

    API bodies are UTF-8 JSON, so they cross to JS as strings (alike in every
    SDK shape). A failed fetch is "maybe sent" unless its message proves the
    request never left (``tickwork._pyodide.fetch_never_sent``, the webhook
    transport's rule), so otherwise only idempotent calls go again."""

    async def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        from workers import fetch  # type: ignore[import-not-found, unused-ignore]

        async def exchange() -> HttpAnswer:
            options: dict[str, Any] = {"method": request.method, "redirect": "manual",
                                       "headers": dict(request.headers)}
            if request.body is not None:
                options["body"] = request.body.decode("utf-8")
            response = await fetch(request.url, **options)
            text = await response.text()
            retry_after = response.headers.get("retry-after")
            headers = {} if retry_after is None else {"retry-after": str(retry_after)}
            return HttpAnswer(int(response.status), headers, str(text).encode("utf-8"))

        try:
            return await asyncio.wait_for(exchange(), timeout_s)
        except TimeoutError as error:  # asyncio.TimeoutError is TimeoutError on 3.11+
            raise TransportError(f"{request.method} {request.url}: no answer within "
                                 f"{timeout_s:g} s", maybe_sent=True) from error
        except Exception as error:
            raise TransportError(f"{request.method} {request.url}: "
                                 f"{fetch_error_message(error)}",
                                 maybe_sent=not fetch_never_sent(error)) from error


def default_async_transport() -> AsyncTransport:
    """``FetchTransport`` inside Pyodide (a Worker), else ``ThreadedUrllibTransport``."""
    if sys.platform == "emscripten":
        return FetchTransport()
    return ThreadedUrllibTransport()


def _lower(items: Any) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in items}
