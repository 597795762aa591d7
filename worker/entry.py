"""The Worker's main module (``main`` in ``wrangler.toml``): the reference deployment.

Everything comes from the package (``tickwork.cloudflare``); this deployment
adds only its executors and domain hook (``worker/executors.py``, the file
you edit). Workers find the Durable Object class only when the main module
exports it, under the ``class_name`` of its binding (``JobOwner``,
``SharedPump``).

wrangler uploads the main module under its base name (``entry``), not as
``worker.entry``, so every import here is absolute.
"""

from __future__ import annotations

from durable_objects.job_owner import JobOwner
from durable_objects.pump import SharedPump
from tickwork.cloudflare import worker_class
from worker.executors import build_registry, domain_statements

__all__ = ["Default", "JobOwner", "SharedPump"]

Default = worker_class(build_registry, domain_statements=domain_statements)
