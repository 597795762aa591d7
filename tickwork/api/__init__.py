"""The job service API: one set of /v1 HTTP routes and one RPC contract,
served by the Worker, the ``JobOwner`` Durable Object and ``tickwork serve``.

    from tickwork.api import ApiRequest, JobApi, OwnerJobs, SharedJobs
"""

from __future__ import annotations

from tickwork.api.routes import (
    API_VERSION,
    MAX_BODY_BYTES,
    ApiRequest,
    ApiResponse,
    JobApi,
    refusal,
)
from tickwork.api.service import JobOwnerRpc, JobService, OwnerJobs, RpcJobs, SharedJobs, plain_data
from tickwork.api.wire import ApiError

__all__ = [
    "API_VERSION",
    "MAX_BODY_BYTES",
    "ApiError",
    "ApiRequest",
    "ApiResponse",
    "JobApi",
    "JobOwnerRpc",
    "JobService",
    "OwnerJobs",
    "RpcJobs",
    "SharedJobs",
    "plain_data",
    "refusal",
]
