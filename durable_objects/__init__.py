"""Durable Object classes of the tickwork Worker.

``JobOwner`` hosts one owner-local runtime per object (binding ``JOB_OWNERS``).
The Worker's main module must import it (``from durable_objects import JobOwner``)
so the runtime finds the class.
"""

from .job_owner import JobOwner

__all__ = ["JobOwner"]
