"""The reference deployment's Durable Object classes.

``JobOwner`` (binding ``JOB_OWNERS``) is ``tickwork.cloudflare.JobOwner`` with
this deployment's executors; the Worker's main module exports it.
"""

from .job_owner import JobOwner

__all__ = ["JobOwner"]
