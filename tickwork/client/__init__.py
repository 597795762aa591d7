"""A typed client of tickwork's HTTP API, for CPython and for Workers.

    from tickwork.client import AsyncClient, Client

    jobs = Client("http://127.0.0.1:8787", token=TOKEN).owner("alice")
    jobs.ingest(Job("j1", queue="emails", payload={"to": "a@example.com"}))  # "queued"

See ``tickwork.client.clients`` for the methods and ``core`` for retries.
"""

from tickwork.api.wire import ApiError
from tickwork.client.clients import AsyncClient, AsyncJobs, Client, Jobs
from tickwork.client.core import HttpAnswer, HttpRequest, RetryPolicy, TransportError
from tickwork.client.transports import (
    FetchTransport,
    ThreadedUrllibTransport,
    UrllibTransport,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncJobs",
    "Client",
    "FetchTransport",
    "HttpAnswer",
    "HttpRequest",
    "Jobs",
    "RetryPolicy",
    "ThreadedUrllibTransport",
    "TransportError",
    "UrllibTransport",
]
