"""Routes of ``/v1/collections``: create (idempotent), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from neardup.api.auth import WRITE
from neardup.api.convert import collection_dict, params_dict
from neardup.api.deps import CollectionCtx, Ctx
from neardup.api.errors import error_responses, invalid
from neardup.api.models import CollectionCreate, CollectionList, CollectionOut
from neardup.api.responses import JSONBytesResponse
from neardup.api.routing import OrjsonRoute
from neardup.domain import CollectionNotFound, CollectionParams
from neardup.domain.models import collection_name_problem

router = APIRouter(prefix="/v1/collections", tags=["collections"], route_class=OrjsonRoute)


@router.post(
    "",
    response_model=CollectionOut,
    status_code=201,
    responses={
        200: {"model": CollectionOut, "description": "exists already with the same parameters"},
        **error_responses(401, 403, 409, 413, 422, 503),
    },
    openapi_extra=WRITE,
    summary="Create a collection",
)
async def create_collection(ctx: Ctx, body: CollectionCreate) -> Response:
    """Parameters left out take the server's defaults; `bands` and `rows` are chosen from the
    threshold (minimizing false positive + false negative probability) unless given."""
    if problem := collection_name_problem(body.name):
        raise invalid(("body", "name"), problem)
    params = CollectionParams.create(
        body.name,
        threshold=ctx.settings.default_threshold if body.threshold is None else body.threshold,
        num_perm=ctx.settings.default_num_perm if body.num_perm is None else body.num_perm,
        shingle=ctx.settings.default_shingle if body.shingle is None else body.shingle,
        size=ctx.settings.default_size if body.size is None else body.size,
        bands=body.bands,
        rows=body.rows,
        ttl_seconds=body.ttl_seconds,
        max_documents=body.max_documents,
        expected_documents=body.expected_documents,
        verify=body.verify or "estimate",
        passages=bool(body.passages),
        site_field=body.site_field,
    )
    stored, created = await ctx.service.create_collection(params)
    if created:
        return JSONBytesResponse(params_dict(stored, 0), status_code=201)
    return JSONBytesResponse(params_dict(stored, await _documents(ctx, stored.name)), status_code=200)


async def _documents(ctx: Ctx, name: str) -> int | None:
    try:
        return (await ctx.service.get_collection(name)).documents
    except CollectionNotFound:  # deleted between the two calls: still report what was asked for
        return None


@router.get(
    "", response_model=CollectionList, responses=error_responses(401, 503), summary="List collections"
)
async def list_collections(ctx: Ctx) -> Response:
    infos = await ctx.service.list_collections()
    return JSONBytesResponse({"collections": [collection_dict(info) for info in infos]})


@router.get(
    "/{name}",
    response_model=CollectionOut,
    responses=error_responses(401, 404, 422, 503),
    summary="A collection's parameters and size",
)
async def get_collection(ctx: CollectionCtx) -> Response:
    return JSONBytesResponse(collection_dict(await ctx.service.get_collection(ctx.name)))


@router.delete(
    "/{name}",
    status_code=204,
    responses=error_responses(401, 403, 404, 422, 503),
    openapi_extra=WRITE,
    summary="Delete a collection and all its documents",
)
async def delete_collection(ctx: CollectionCtx) -> Response:
    await ctx.service.delete_collection(ctx.name)
    return Response(status_code=204)
