"""Executors: user code that runs a claimed job, and a registry that picks one.

    from tickwork.executors import ExecutorRegistry

    registry = ExecutorRegistry(field="kind")
    registry.on_queue("webhooks", deliver_webhook)
    registry.on_field("report", build_report)      # payload["kind"] == "report"

    OwnerRuntime(owner, execute=registry, ...)      # a registry is an executor

The shipped examples live in ``tickwork.executors.webhook`` (HTTP delivery
with the abort signal and outcome mapping) and
``tickwork.executors.long_job`` (a long job that heartbeats its lease).
"""

from __future__ import annotations

from tickwork.executors.long_job import long_job
from tickwork.executors.registry import NO_EXECUTOR, Executor, ExecutorRegistry
from tickwork.executors.webhook import (
    HttpPost,
    HttpRefused,
    HttpReply,
    HttpTimeout,
    HttpUnreachable,
    webhook_executor,
)

__all__ = [
    "NO_EXECUTOR",
    "Executor",
    "ExecutorRegistry",
    "HttpPost",
    "HttpRefused",
    "HttpReply",
    "HttpTimeout",
    "HttpUnreachable",
    "long_job",
    "webhook_executor",
]
