"""THE FILE YOU EDIT: which executor runs which job, and the optional domain hook.

Everything else under ``worker/`` is the kit's plumbing; this module is where
a deployment plugs in its own work. Two functions:

``build_registry(env)``
    Returns the ``ExecutorRegistry`` that runs jobs: the shared D1 queues
    (``Default.scheduled``) and, if the Durable Object host uses it, every
    ``JobOwner``. Shipped wiring:

    * queue ``webhooks``, or payload ``"kind": "webhook"`` -> webhook delivery
      (``tickwork.executors.webhook``) over the Workers ``fetch``
      (``tickwork.cloudflare.http``), 30 s per request. Payloads may not set credential
      headers (``authorization``, ``cookie``): pass ``allow_credentials=True``
      to ``webhook_executor`` if yours must. Where a request can go is the
      platform's rule: ``fetch`` runs on Cloudflare's network, with no route
      to your own loopback or private networks;
    * payload ``"kind": "long"`` -> ``tickwork.executors.long_job``;
    * anything else fails with ``no_executor`` (recorded, never retried blindly).

    Add your own with ``registry.on_queue(name, fn)`` or
    ``registry.on_field(kind, fn)``; an executor is
    ``async def fn(job, signal) -> Completed() | Failed(reason) | Cancelled() | OutcomeUnknown()``.

``domain_statements(env, jobs)``
    Called for every shared enqueue (``POST /v1/shared/jobs``) with the
    validated jobs, before anything is written. Return prepared D1
    statements (``env.DB.prepare(...).bind(...)``) for your own tables: they
    go into the same ``db.batch`` as the jobs, so your rows and the jobs
    commit together or not at all (a conflicting job replay fails the batch,
    and a failing statement of yours stores no job). A request may be
    retried, so make the statements idempotent (``INSERT ... ON CONFLICT DO
    NOTHING``). It may be ``async``. The default adds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickwork import Job
from tickwork.cloudflare import workers_fetch_post
from tickwork.executors import ExecutorRegistry, long_job, webhook_executor

#: Seconds one webhook request may take before it counts as timed out.
WEBHOOK_TIMEOUT_S = 30.0


def build_registry(env: Any) -> ExecutorRegistry:
    """The executors of this deployment (see the module doc)."""
    del env  # the shipped executors need no bindings; yours may
    registry = ExecutorRegistry(field="kind")
    deliver = webhook_executor(workers_fetch_post, timeout_s=WEBHOOK_TIMEOUT_S)
    registry.on_queue("webhooks", deliver)
    registry.on_field("webhook", deliver)
    registry.on_field("long", long_job)
    return registry


def domain_statements(env: Any, jobs: Sequence[Job]) -> list[Any]:
    """Your D1 statements committed with a shared enqueue (see the module doc)."""
    del env, jobs
    return []
