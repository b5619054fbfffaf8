"""The one place that turns errors into HTTP responses: domain errors, validation errors, the rest.

Every error body has the same shape, ``{"error": <code>, "message": <what to change>}`` plus
``"detail"`` (a list of ``{"loc", "msg"}``) for validation errors. Nothing a client sends gets a stack
trace back; unexpected errors are logged here with a request id the client can quote.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from neardup.api.models import ErrorOut
from neardup.api.responses import JSONBytesResponse
from neardup.domain.errors import (
    CollectionConflict,
    CollectionFull,
    InvalidInput,
    NearDupError,
    NotFound,
    StoreUnavailable,
)
from neardup.domain.group_commit import being_cancelled

log = logging.getLogger("neardup.api")

#: Seconds a client should wait before retrying when the store is down and the domain gave no hint.
DEFAULT_RETRY_AFTER = 1
#: Longest input excerpt echoed back in a validation error (texts can be megabytes).
MAX_ECHO_CHARS = 80

_HTTP_CODES: dict[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "store_unavailable",
}


#: What each error status means, for the OpenAPI document (the bodies are all ``ErrorOut``).
_ERROR_DESCRIPTIONS: dict[int, str] = {
    401: "no API key, or an unknown one (when NEARDUP_API_KEYS is set)",
    403: "the API key is read-only and this call writes",
    404: "no such collection or document",
    409: "a conflict with the collection's state: it exists with other parameters (create), it has "
    "used every insertion it can take, or every site id (check, PUT: code collection_full, permanent), "
    "or it was created without a site_field (sites, mirrors)",
    413: "the request body is larger than NEARDUP_MAX_BODY_BYTES",
    422: "the request is invalid: the message and `detail` say which field and what to change",
    503: "the store cannot be reached or timed out; retry after Retry-After seconds",
}
_ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    503: {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}},
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that can answer these error statuses."""
    documented: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorOut, "description": _ERROR_DESCRIPTIONS[status]}
        if status in _ERROR_HEADERS:
            entry["headers"] = _ERROR_HEADERS[status]
        documented[status] = entry
    return documented


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONBytesResponse:
    return JSONBytesResponse(
        {"error": code, "message": message, **extra}, status_code=status, headers=headers
    )


def invalid(loc: Sequence[str | int], message: str) -> RequestValidationError:
    """A 422 about one field, for checks that need the settings (sizes, lengths) and so cannot live in
    the static pydantic models. Raise it from a route."""
    return RequestValidationError([{"type": "value_error", "loc": tuple(loc), "msg": message, "input": None}])


def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NearDupError)
    if isinstance(exc, NotFound):
        return error_response(404, "not_found", exc.message)
    if isinstance(exc, CollectionConflict):
        return error_response(409, "conflict", exc.message)
    if isinstance(exc, CollectionFull):
        return error_response(409, "collection_full", exc.message)
    if isinstance(exc, InvalidInput):
        return error_response(422, "invalid_request", exc.message)
    if isinstance(exc, StoreUnavailable):
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc.message)
        return _unavailable(exc.message, exc.retry_after)
    # A NearDupError subclass this module does not know yet: still the client's to read, not a crash.
    log.error("unmapped domain error %s on %s %s", type(exc).__name__, request.method, request.url.path)
    return error_response(400, "bad_request", exc.message)


def _unavailable(message: str, retry_after: int) -> JSONBytesResponse:
    return error_response(
        503,
        "store_unavailable",
        f"{message}; retry in {retry_after} s",
        headers={"Retry-After": str(max(1, retry_after))},
    )


def _redis_down(request: Request, exc: Exception) -> Response:
    # The domain should wrap these in StoreUnavailable; this catches any call that slips through.
    log.warning("store error on %s %s: %r", request.method, request.url.path, exc)
    return _unavailable("the store cannot be reached", DEFAULT_RETRY_AFTER)


#: Errors that mean the store failed, wherever they are raised: the domain's StoreUnavailable, the
#: client library's connection errors and timeouts (loading included), and the socket errors the
#: storage layer's StoreDown is raised from.
STORE_FAILURES: tuple[type[BaseException], ...] = (
    StoreUnavailable,
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
)


def store_failure_behind(exc: BaseException) -> BaseException | None:
    """The store failure that caused ``exc`` (``exc`` itself, or an exception it was raised from or
    while handling), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, STORE_FAILURES):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


#: The integers an answer can hold as numbers (JSON parsers, ours included, stop at 64 bits).
_INT64 = range(-(2**63), 2**64)


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > MAX_ECHO_CHARS:
        return value[:MAX_ECHO_CHARS] + "..."
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return _short(str(value))  # a number too big to answer as a number is echoed as text
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return None  # dicts and lists could be the whole request body: do not echo them


def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    detail = []
    for error in exc.errors():
        item: dict[str, Any] = {"loc": list(error.get("loc", ())), "msg": str(error.get("msg", ""))}
        if error.get("type") == "json_invalid":
            ctx = error.get("ctx") or {}
            position = item["loc"][1] if len(item["loc"]) > 1 else "?"
            item = {
                "loc": ["body"],
                "msg": f"not valid JSON at byte {position}: {ctx.get('error', 'decode error')}",
            }
        elif item["loc"] == ["body"] and isinstance(error.get("input"), (bytes, str)):
            # FastAPI hands the raw bytes on when the Content-Type is not JSON.
            item["msg"] = "send a JSON object with the header Content-Type: application/json"
        elif "input" in error and _short(error["input"]) is not None:
            item["input"] = _short(error["input"])
        detail.append(item)
    first = detail[0] if detail else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"])
    message = f"{where}: {first['msg']}" if where else str(first["msg"])
    if len(detail) > 1:
        message += f" (and {len(detail) - 1} more problem{'s' if len(detail) > 2 else ''})"
    return error_response(422, "invalid_request", message, detail=detail)


def allowed_methods(request: Request) -> list[str]:
    """The methods the OpenAPI document lists for this request's path (Starlette's own Allow names the
    methods of the first route that matched, not those of every route on the path)."""
    for template, operations in request.app.openapi()["paths"].items():
        if _path_pattern(template).fullmatch(request.scope["path"]):
            return sorted(method.upper() for method in operations)
    return []


@functools.lru_cache(maxsize=64)
def _path_pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)))


def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if exc.status_code == 404 and message == "Not Found" and "\n" in request.scope["path"]:
        # Route patterns stop at a line break, so an id or name holding one (%0A) matches no route:
        # say what is wrong with the request rather than that the endpoint does not exist.
        return error_response(
            422,
            "invalid_request",
            "path: the path contains a line break (%0A); ids and names cannot contain one",
            detail=[{"loc": ["path"], "msg": "ids and names cannot contain a line break"}],
        )
    if exc.status_code == 404 and message == "Not Found":
        message = f"no such endpoint: {request.method} {request.url.path}; see /docs"
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}; see /docs"
        # Starlette's Allow names the methods of the first route whose path matched; a path served by
        # several routes (GET and POST /v1/collections) allows the methods of all of them.
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    code = _HTTP_CODES.get(exc.status_code, "error")
    return error_response(exc.status_code, code, message, headers=headers)


class CatchAllMiddleware:
    """Innermost middleware: an exception no handler knows is a bug on our side, not something the
    client can fix. Log its trace with an id, answer a JSON 500 that quotes the id and holds no trace.

    A middleware rather than ``add_exception_handler(Exception, ...)``: Starlette re-raises after
    such a handler, so uvicorn would log every trace a second time."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            if response_started or being_cancelled():
                raise  # the server is cancelling this request: nobody waits for an answer
            # Not a cancellation of this request: one leaked out of the store client while the store
            # went away. The server would answer its bare 500; the store failed, so it is a 503.
            log.warning("store call interrupted on %s %s", scope.get("method"), scope.get("path"))
            await _unavailable("the store call was interrupted", DEFAULT_RETRY_AFTER)(scope, receive, send)
        except Exception as exc:
            error_id = uuid.uuid4().hex[:12]
            log.error(
                "unexpected error %s on %s %s", error_id, scope.get("method"), scope.get("path"), exc_info=exc
            )
            if response_started:
                raise  # too late for a clean answer; the server closes the connection
            if store_failure_behind(exc) is not None:
                # A failure of ours, but one the store's failure set off: the client can retry.
                response = _unavailable(
                    f"internal error {error_id} while the store failed", DEFAULT_RETRY_AFTER
                )
            else:
                response = error_response(
                    500, "internal_error", f"internal error {error_id}: it has been logged; please report it"
                )
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of known errors on ``app`` (the catch-all is ``CatchAllMiddleware``)."""
    app.add_exception_handler(NearDupError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RedisConnectionError, _redis_down)
    app.add_exception_handler(RedisTimeoutError, _redis_down)
