"""The reference deployment's ``JobOwner``: tickwork's Durable Object running
this deployment's executors (``worker/executors.py``). Its behaviour, alarm
policy and hooks are ``tickwork.cloudflare.JobOwner``'s."""

from __future__ import annotations

from tickwork.cloudflare import job_owner_class
from worker.executors import build_registry

__all__ = ["JobOwner"]

JobOwner = job_owner_class(build_registry)
