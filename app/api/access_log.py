"""Outermost middleware: gives every request an id (the client's ``X-Request-ID`` if it is sane, else a
new one), returns it in ``X-Request-ID``, makes it visible to every log record of the request, and
writes one access-log record per request (``neardup.access``, JSON with ``--log-format json``)."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from neardup.logs import ACCESS_LOGGER, request_id

log = logging.getLogger(ACCESS_LOGGER)

HEADER = b"x-request-id"
#: What a client-chosen id may look like: short, printable, no spaces, nothing a log parser could trip on.
SANE_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_of(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == HEADER:
            if SANE_ID.fullmatch(value):
                return str(value.decode("ascii"))
            break
    return new_request_id()


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        sent = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, rid.encode("ascii"))]}
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if log.isEnabledFor(logging.INFO):
                route = scope.get("route")
                client = scope.get("client")
                log.info(
                    "%s %s %d",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "route": getattr(route, "path", None),
                        "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                        "response_bytes": sent,
                        "client": f"{client[0]}:{client[1]}" if client else None,
                    },
                )
            request_id.reset(token)
