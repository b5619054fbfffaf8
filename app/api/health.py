"""Liveness, readiness and Prometheus metrics: the routes orchestrators and scrapers call."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from neardup.api.deps import Ctx
from neardup.api.errors import error_response, error_responses
from neardup.api.models import Status
from neardup.api.responses import JSONBytesResponse

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Status,
    responses=error_responses(503),
    summary="The process is alive (and its embedded store can be kept running)",
)
async def healthz(request: Request) -> Response:
    """200 while the service can serve, even with its store down for a while (``/readyz`` says that).
    503 when the embedded Valkey died and could not be started again: only restarting the service
    can help, and an orchestrator's liveness probe should do it."""
    status = request.app.state.supervision.status()
    if status is not None and status.failed:
        return error_response(503, "store_failed", status.message, headers={"Retry-After": "1"})
    return JSONBytesResponse({"status": "ok"})


@router.get(
    "/readyz",
    response_model=Status,
    responses=error_responses(503),
    summary="The store answers",
)
async def readyz(ctx: Ctx) -> Response:
    await ctx.service.ping()  # StoreUnavailable becomes a 503 with Retry-After in neardup.api.errors
    return JSONBytesResponse({"status": "ready"})


@router.get(
    "/metrics",
    summary="Prometheus metrics (text format)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **error_responses(401)},
)
async def metrics(ctx: Ctx) -> Response:
    body, content_type = ctx.metrics.exposition()
    return Response(body, media_type=content_type)
