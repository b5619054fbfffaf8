"""ASGI middleware that refuses request bodies above a byte limit with a 413 that says what to do."""

from __future__ import annotations

import orjson
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large_message(max_bytes: int) -> str:
    return (
        f"request body exceeds {max_bytes} bytes: send fewer or smaller documents per request "
        "(server limit NEARDUP_MAX_BODY_BYTES)"
    )


class BodyTooLarge(HTTPException):
    """Raised inside ``receive`` when a streamed (chunked) body passes the limit. An HTTPException, so
    FastAPI's body reader passes it through to the 413 handler instead of turning it into a 400."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(status_code=413, detail=too_large_message(max_bytes))


class BodyLimitMiddleware:
    """Reject bodies larger than ``max_bytes``: by ``Content-Length`` before the route runs, and by
    counting the bytes of chunked bodies as they arrive (a client can omit or lie about the length)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse(send)
                    return
                break

        received = 0
        response_started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if response_started:
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = orjson.dumps(
            {
                "error": "body_too_large",
                "message": too_large_message(self.max_bytes),
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # The unread rest of the body would otherwise be parsed as the next request.
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
