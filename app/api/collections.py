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
from neardup.domain import CollectionConflict, CollectionNotFound, CollectionParams
from neardup.domain.models import DEFAULT_SKETCH_FORMAT, collection_name_problem

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
    options = dict(
        threshold=ctx.settings.default_threshold if body.threshold is None else body.threshold,
        num_perm=ctx.settings.default_num_perm if body.num_perm is None else body.num_perm,
        shingle=ctx.settings.default_shingle if body.shingle is None else body.shingle,
        size=ctx.settings.default_size if body.size is None else body.size,
        bands=body.bands,
        rows=body.rows,
        ttl_seconds=body.ttl_seconds,
        max_documents=body.max_documents,
        expected_documents=body.expected_documents,
        passages=bool(body.passages),
        site_field=body.site_field,
    )
    params = CollectionParams.create(
        body.name,
        sketch_format=body.sketch_format,
        verify=body.verify or "estimate",
        **options,  # type: ignore[arg-type]
    )
    try:
        stored, created = await ctx.service.create_collection(params)
    except CollectionConflict:
        if body.sketch_format is not None or body.verify is not None:
            raise
        # The same request, without a format, that created this collection when the default was an
        # earlier format (1 before format 2, 2 before format 3): it is that collection, not a
        # conflict. Otherwise the first conflict stands.
        for earlier in range(DEFAULT_SKETCH_FORMAT - 1, 0, -1):
            legacy = CollectionParams.create(body.name, sketch_format=earlier, **options)  # type: ignore[arg-type]
            try:
                stored, created = await ctx.service.create_collection(legacy)
            except CollectionConflict:
                continue
            return JSONBytesResponse(params_dict(stored, await _documents(ctx, stored.name)), status_code=200)
        raise
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
