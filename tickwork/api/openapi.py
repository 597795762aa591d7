"""The OpenAPI document of the /v1 API, generated from the operations table.

    python -m tickwork.api.openapi > docs/reference/openapi.json
    python -m tickwork.api.openapi --markdown     # the route table of http-api.md
    python -m tickwork.api.openapi --client       # the client's methods, for
                                                  # call-tickwork-from-python.md

The tests regenerate both and compare, so the published reference cannot
drift from the routes the Worker and ``tickwork serve`` actually serve.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tickwork.api.operations import LIST_OWNERS, OPERATIONS, Operation
from tickwork.api.routes import API_VERSION, MAX_BODY_BYTES

_ERROR = {"$ref": "#/components/schemas/Error"}

#: Answers every authorised route may give besides its own.
_COMMON = {
    400: "bad input (the error names the field); nothing changed",
    401: "missing or wrong bearer token",
    404: "no such route, or this server has no such scope (scope_not_configured)",
    405: "another HTTP method (see the allow header)",
    413: f"a body over {MAX_BODY_BYTES} bytes",
    415: "a body that is not application/json",
    503: "no token configured (fail closed), or every owner is busy (retry-after)",
}

_SCOPES = (
    ("owners/{owner}", "owner", "One owner's jobs: a JobOwner Durable Object on "
                                "Cloudflare, one sqlite3 file under tickwork serve."),
    ("shared", "shared", "The shared queues: D1 on Cloudflare, PostgreSQL under "
                         "tickwork serve --postgres."),
)


#: The directory of owners: one route across owners (``operations.LIST_OWNERS``).
DIRECTORY_PATH = f"/{API_VERSION}/owners"
_DIRECTORY_TAG = "directory"
_DIRECTORY_TEXT = ("Every owner with a summary of its jobs: a D1 table each JobOwner writes "
                   "its row to on Cloudflare, the data directory under tickwork serve.")


def _path_parameter(name: str) -> dict[str, Any]:
    max_length = 512 if name == "lane" else 256
    return {"name": name, "in": "path", "required": True,
            "description": "percent-encoded UTF-8; '.' and '..' cannot be addressed",
            "schema": {"type": "string", "minLength": 1, "maxLength": max_length}}


def _operation(operation: Operation, tag: str, owner: bool) -> dict[str, Any]:
    answers = {**_COMMON, **operation.answers}
    document: dict[str, Any] = {
        "operationId": f"{tag}_{operation.name}",
        "summary": operation.summary,
        "tags": [tag],
        "parameters": [_path_parameter(name)
                       for name in (("owner",) if owner else ()) + operation.path_params]
        + [{"name": name, "in": "query", "required": name in operation.required_query,
            "description": text,
            "schema": dict(schema)}
           for name, (schema, text) in operation.query_params.items()],
        "responses": {
            str(status): {"description": text,
                          "content": {"application/json": {"schema": (
                              _ERROR if status >= 400 and status not in operation.answers
                              else {})}}}
            for status, text in sorted(answers.items())},
    }
    if operation.body_schema is not None:
        document["requestBody"] = {"required": operation.name != "purge", "content": {
            "application/json": {"schema": dict(operation.body_schema)}}}
    return document


def openapi_document() -> dict[str, Any]:
    """The whole document (OpenAPI 3.1)."""
    paths: dict[str, Any] = {f"/{API_VERSION}/health": {"get": {
        "operationId": "health", "summary": "Liveness of the server; needs no token",
        "security": [], "tags": ["health"],
        "responses": {"200": {"description": "the server answers",
                              "content": {"application/json": {"schema": {
                                  "type": "object", "properties": {
                                      "ok": {"const": True}, "api": {"const": API_VERSION}}}}}}},
    }}}
    for prefix, tag, _ in _SCOPES:
        for operation in OPERATIONS:
            path = f"/{API_VERSION}/{prefix}/" + "/".join(operation.path)
            paths.setdefault(path, {})[operation.method.lower()] = _operation(
                operation, tag, owner=tag == "owner")
    paths[DIRECTORY_PATH] = {LIST_OWNERS.method.lower(): _operation(
        LIST_OWNERS, _DIRECTORY_TAG, owner=False)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tickwork job service", "version": API_VERSION,
                 "description": "Every route but health needs Authorization: Bearer <token>. "
                                "A refused request changes nothing."},
        "tags": [{"name": tag, "description": text} for _, tag, text in _SCOPES]
        + [{"name": _DIRECTORY_TAG, "description": _DIRECTORY_TEXT},
           {"name": "health", "description": "Whether the server is up."}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                   "field": {"type": "string"},
                                   "job_id": {"type": "string",
                                              "description": "ingest_conflict: the job"},
                                   "fields": {"type": "array", "items": {"type": "string"},
                                              "description": "ingest_conflict: the cargo "
                                                             "fields that differ"}}}}}},
        },
    }


def openapi_json() -> str:
    """The document as the JSON text in docs/reference/openapi.json."""
    return json.dumps(openapi_document(), indent=2, sort_keys=False) + "\n"


def route_table() -> str:
    """The routes as the Markdown table in docs/reference/http-api.md."""
    lines = ["| Method and path | Body | Reply | Answers |", "| --- | --- | --- | --- |"]
    routes = [("/v1/{scope}/" + "/".join(operation.path), operation) for operation in OPERATIONS]
    routes.append((DIRECTORY_PATH, LIST_OWNERS))
    for path, operation in routes:
        schema = operation.body_schema
        if operation.query_params:
            body = "query: " + ", ".join(f"`{name}`" for name in operation.query_params)
        elif schema is None:
            body = ""
        elif operation.name == "ingest":
            body = 'a job, or `{"jobs": [...]}` (1 to 100)'
        else:
            properties = schema.get("properties", {})
            body = ", ".join(f"`{name}`" for name in properties) or "`{}` or none"
        answers = "; ".join(f"{status} {text}" for status, text in sorted(
            operation.answers.items()))
        lines.append(f"| `{operation.method} {path}` | {body} | {operation.reply_shape} "
                     f"| {answers} |")
    return "\n".join(lines) + "\n"


def client_method_table() -> str:
    """Every method of the client's ``Jobs`` (``tickwork.client``), with its
    operation's summary, as the Markdown table in call-tickwork-from-python.md.
    ``ingest`` (one job) and ``ingest_many`` are both the ``ingest`` operation."""
    import inspect

    from tickwork.client.clients import Jobs
    from tickwork.lifecycle.surface import declared_operations

    summaries = {operation.name: operation.summary for operation in OPERATIONS}
    signatures = {name: (list(inspect.signature(method).parameters.values())[1:],
                         str(inspect.signature(method).return_annotation))
                  for name, method in inspect.getmembers(Jobs, inspect.isfunction)
                  if not name.startswith("_")}
    for name, declared in declared_operations(Jobs).items():
        plan_returns = str(declared.signature.return_annotation)  # "Plan[...]"
        signatures[name] = (list(declared.signature.parameters.values()),
                            plan_returns.removeprefix("Plan[").removesuffix("]"))
    lines = ["| Method | Returns | What it does |", "| --- | --- | --- |"]
    for name, (parameters, returns) in sorted(signatures.items()):
        shown = str(inspect.Signature(
            [parameter.replace(annotation=inspect.Parameter.empty) for parameter in parameters]))
        returns = returns.replace("|", "\\|")  # a table cell
        operation = "ingest" if name == "ingest_many" else name
        lines.append(f"| `{name}{shown}` | `{returns}` | {summaries[operation]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        sys.stdout.write(route_table())
    elif sys.argv[1:] == ["--client"]:
        sys.stdout.write(client_method_table())
    else:
        sys.stdout.write(openapi_json())
