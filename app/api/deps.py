"""The one dependency each route takes: what the running app built at start-up (service, settings,
limits, metrics), the caller's access, and for routes under ``/v1/collections/{name}`` the validated
collection name.

One dependency per route, ``async def``, on purpose. FastAPI resolves every dependency of every
request again, ~15 us each here, and runs plain ``def`` ones in its thread pool, a hop that costs more
CPU than checking a small document; with five small dependencies per route that was a third of a
single check's CPU (bench/bench_service.py single-check runs, profiled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request
from starlette.types import Scope

from neardup.api.auth import require_write
from neardup.api.errors import invalid
from neardup.api.limits import Limits
from neardup.api.metrics import Metrics
from neardup.domain import Index
from neardup.domain.models import COLLECTION_NAME_PATTERN, collection_name_problem
from neardup.settings import Settings


@dataclass(frozen=True)
class Runtime:
    """What the app factory's lifespan builds once and keeps on ``app.state.runtime``."""

    service: Index
    settings: Settings
    limits: Limits
    metrics: Metrics


@dataclass(frozen=True)
class Context(Runtime):
    """One request's view of the app: its runtime and the caller (for write checks)."""

    scope: Scope

    def require_write(self, action: str) -> None:
        """Raise Forbidden (403) when the caller holds a read-only API key."""
        require_write(self.scope, action)


@dataclass(frozen=True)
class CollectionContext(Context):
    """A request under ``/v1/collections/{name}``: ``name`` is a valid collection name."""

    name: str


async def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    default = request.app.state.default_collection
    if not default.ready:  # the store was down at start-up: create `default` as soon as it is back
        await default.ensure(runtime.service)
    return runtime


async def context(request: Request) -> Context:
    rt = await _runtime(request)
    return Context(rt.service, rt.settings, rt.limits, rt.metrics, request.scope)


async def collection_context(
    request: Request,
    name: Annotated[
        str,
        Path(
            description="the collection's name",
            examples=["default"],
            # Documented for clients; checked below, with a message that says what to change.
            json_schema_extra={"pattern": COLLECTION_NAME_PATTERN},
        ),
    ],
) -> CollectionContext:
    if request.scope["path"].endswith("\n"):
        # Starlette matches routes with `$`, which also matches before a final line break: without
        # this, ".../documents/a%0A" would silently address document "a", and ".../default%0A" the
        # collection "default". Neither ids nor names can contain a line break, so refuse the path.
        raise invalid(("path",), "the path ends with a line break (%0A); ids and names cannot contain one")
    if problem := collection_name_problem(name):
        raise invalid(("path", "name"), problem)
    rt = await _runtime(request)
    return CollectionContext(rt.service, rt.settings, rt.limits, rt.metrics, request.scope, name)


def document_id(ctx: Context, doc_id: str) -> str:
    """``doc_id`` if the limits allow it, else a 422 naming the path segment."""
    if problem := ctx.limits.id_problem(doc_id):
        raise invalid(("path", "doc_id"), problem)
    return doc_id


Ctx = Annotated[Context, Depends(context)]
CollectionCtx = Annotated[CollectionContext, Depends(collection_context)]
