"""API keys: who may call the service (401) and who may write (403).

``NEARDUP_API_KEYS`` lists keys with their access, ``rw:KEY`` (read and write) or ``ro:KEY`` (read
only), separated by commas; unset or empty means no authentication. Clients send
``Authorization: Bearer KEY``. A presented key is compared with *every* configured key, through
SHA-256 digests and ``hmac.compare_digest``, so neither the time taken nor an early exit tells an
attacker how close a guess was, or which key (or how long a key) it matched.

What a read-only key may do: every GET, ``query``, and ``check``/``check/batch`` with
``"insert": false`` (they store nothing: a check without insert is a query that also tells whether
the text is a duplicate). Everything that stores or deletes needs a read-write key.

Open without a key: ``/healthz`` and ``/readyz`` (what orchestrators probe: a Kubernetes probe cannot
read a Secret, and the answers say only "alive"/"ready"), the API's documentation (``/docs``,
``/openapi.json``), which describes the API and holds no data, and the static web page (``/``,
``/web/*``), which asks for a key and sends it with its own calls.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from starlette.types import ASGIApp, Receive, Scope, Send

from neardup.api.errors import error_response

Access = Literal["rw", "ro"]
#: The scope key where the authentication middleware leaves the caller's access for the routes.
SCOPE_KEY = "neardup.access"
#: Paths anyone may call, with or without keys configured (see the module docstring). The web page
#: (``/`` and its two files) is static and asks its user for a key, which its calls then send.
OPEN_PATHS = frozenset(
    {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/"}
)
#: The page's files: one plain file name under /web/, never a deeper path or a dot segment (the path
#: is percent-decoded, so a prefix test alone would also let "/web/%2E%2E/v1/..." through).
OPEN_ASSET = re.compile(r"/web/[A-Za-z0-9_-]+\.[a-z]+\Z")
#: The shortest key accepted: a guessable key is worse than none, it looks like protection.
MIN_KEY_LENGTH = 16
#: Characters a key may use: visible ASCII without the list separator (a key travels in a header).
_KEY_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - {","}

#: The OpenAPI name of the security scheme.
SCHEME = "bearer"
#: Operation extension that says which access a route needs: "read", "write", or "write if insert".
ACCESS_EXTENSION = "x-neardup-access"
READ = {ACCESS_EXTENSION: "read"}
WRITE = {ACCESS_EXTENSION: "write"}
WRITE_IF_INSERT = {ACCESS_EXTENSION: "write if insert"}


class ApiKeyError(ValueError):
    """A malformed ``NEARDUP_API_KEYS``; the message never contains a key."""


@dataclass(frozen=True)
class ApiKeys:
    """The configured keys, kept as SHA-256 digests (a key in memory dumps or reprs helps nobody)."""

    digests: tuple[tuple[bytes, Access], ...]

    @classmethod
    def parse(cls, spec: str) -> ApiKeys:
        """``rw:KEY1,ro:KEY2``; white space around entries is ignored, empty entries too."""
        digests: list[tuple[bytes, Access]] = []
        for position, entry in enumerate(spec.split(","), start=1):
            entry = entry.strip()
            if not entry:
                continue
            access, sep, key = entry.partition(":")
            if not sep or access not in ("rw", "ro"):
                raise ApiKeyError(
                    f"api_keys entry {position} must be 'rw:KEY' (read-write) or 'ro:KEY' (read-only)"
                )
            if len(key) < MIN_KEY_LENGTH:
                raise ApiKeyError(
                    f"api_keys entry {position}: the key has {len(key)} characters; use at least "
                    f"{MIN_KEY_LENGTH} (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
                )
            if not set(key) <= _KEY_CHARS:
                raise ApiKeyError(f"api_keys entry {position}: a key is visible ASCII without ',' or spaces")
            digests.append((_digest(key), "rw" if access == "rw" else "ro"))
        seen = [digest for digest, _ in digests]
        if len(set(seen)) != len(seen):
            raise ApiKeyError("api_keys lists the same key twice")
        return cls(tuple(digests))

    def __bool__(self) -> bool:
        return bool(self.digests)

    def access_of(self, presented: str) -> Access | None:
        """The access of the presented key, or None. Always compares against every key."""
        candidate = _digest(presented)
        found: Access | None = None
        for digest, access in self.digests:
            if hmac.compare_digest(candidate, digest):
                found = access
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def _bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class AuthMiddleware:
    """Refuses calls without a known key (401 with ``WWW-Authenticate: Bearer``) when keys are
    configured, and records the caller's access in the scope for the per-route write check."""

    def __init__(self, app: ASGIApp, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys:
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPEN_PATHS or OPEN_ASSET.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        token = _bearer_token(scope["headers"])
        access = self.keys.access_of(token) if token is not None else None
        if access is None:
            message = (
                "send an API key: Authorization: Bearer <key>"
                if token is None
                else "the API key is not valid: check Authorization: Bearer <key>"
            )
            response = error_response(
                401,
                "unauthorized",
                message,
                headers={"WWW-Authenticate": 'Bearer realm="neardup"'},
            )
            await response(scope, receive, send)
            return
        scope[SCOPE_KEY] = access
        await self.app(scope, receive, send)


class Forbidden(Exception):
    """A read-only key asked for a write; mapped to 403 by :func:`install_auth`."""

    def __init__(self, action: str) -> None:
        super().__init__(action)
        self.message = f"this API key is read-only: {action} needs a read-write key"


def require_write(scope: Scope, action: str) -> None:
    """Raise :class:`Forbidden` if the caller has a read-only key (no keys configured: anyone writes)."""
    if scope.get(SCOPE_KEY) == "ro":
        raise Forbidden(action)


def route_access(method: str, openapi_extra: dict[str, Any] | None) -> str:
    """The access a route declared (``READ``/``WRITE``/``WRITE_IF_INSERT``); by default GETs read and
    every other method writes, so a route that forgets to say is protected, not open."""
    declared = (openapi_extra or {}).get(ACCESS_EXTENSION)
    if isinstance(declared, str):
        return declared
    return "read" if method in ("GET", "HEAD", "OPTIONS") else "write"


def _forbidden(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, Forbidden)
    return error_response(403, "forbidden", exc.message)


def install_auth(app: FastAPI, keys: ApiKeys) -> None:
    """The 403 handler and, when keys are configured, the bearer scheme in the OpenAPI document.
    The middleware is added by the app factory (its place among the others matters)."""
    app.add_exception_handler(Forbidden, _forbidden)
    if not keys:
        return

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schema.setdefault("components", {})["securitySchemes"] = {
                SCHEME: {"type": "http", "scheme": "bearer", "description": "an API key of NEARDUP_API_KEYS"}
            }
            for path, operations in schema.get("paths", {}).items():
                if path in OPEN_PATHS:
                    continue
                for operation in operations.values():
                    operation["security"] = [{SCHEME: []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
