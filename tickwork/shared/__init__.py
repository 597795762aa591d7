"""The lifecycle over a database shared by many workers (D1, PostgreSQL).

``runtime.SharedRuntime`` makes every decision; ``port.SharedStore`` is what a
dialect implements (``tickwork.d1``, ``tickwork.postgres``).
"""

from .port import ClaimView, ExpiredClaim, RenewAnswer, SharedStore
from .runtime import CLAIM_REPLACED, LEASE_EXPIRED, LeasedSignal, SharedExecutor, SharedRuntime

__all__ = [
    "CLAIM_REPLACED",
    "LEASE_EXPIRED",
    "ClaimView",
    "ExpiredClaim",
    "LeasedSignal",
    "RenewAnswer",
    "SharedExecutor",
    "SharedRuntime",
    "SharedStore",
]
