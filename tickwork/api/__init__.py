"""The job service API: one table of operations (``operations``), served as
/v1 HTTP routes (``routes``) by the Worker and ``tickwork serve``, and as the
``JobOwner`` Durable Object's RPC methods (``rpc``).

    from tickwork.api import ApiRequest, JobApi, RuntimeService
"""

from __future__ import annotations

from tickwork.api.operations import OPERATIONS, Operation
from tickwork.api.routes import (
    API_VERSION,
    MAX_BODY_BYTES,
    ApiRequest,
    ApiResponse,
    JobApi,
    refusal,
)
from tickwork.api.rpc import JobOwnerRpc, RpcService, plain_data, rpc_methods
from tickwork.api.service import JobService, RuntimeService, ScopedService
from tickwork.api.wire import ApiError

__all__ = [
    "API_VERSION",
    "MAX_BODY_BYTES",
    "OPERATIONS",
    "ApiError",
    "ApiRequest",
    "ApiResponse",
    "JobApi",
    "JobOwnerRpc",
    "JobService",
    "Operation",
    "RpcService",
    "RuntimeService",
    "ScopedService",
    "plain_data",
    "refusal",
    "rpc_methods",
]
