"""Routes of ``/v1/collections/{name}/documents/{doc_id}``: insert or replace without checking, fetch,
delete. The id segment takes the rest of the path, so ids with a (URL-encoded) ``/`` work too."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.responses import Response

from neardup.api.auth import WRITE
from neardup.api.convert import document_dict
from neardup.api.deps import CollectionCtx, document_id
from neardup.api.errors import error_responses
from neardup.api.models import DocumentOut, DocumentPut
from neardup.api.responses import JSONBytesResponse
from neardup.api.routing import OrjsonRoute
from neardup.domain import Document

DocId = Annotated[str, Path(description="the document's id (URL-encoded)")]

router = APIRouter(prefix="/v1/collections/{name}/documents", tags=["documents"], route_class=OrjsonRoute)


@router.put(
    "/{doc_id:path}",
    response_model=DocumentOut,
    responses=error_responses(401, 403, 404, 409, 413, 422, 503),
    openapi_extra=WRITE,
    summary="Insert or replace a document, unchecked",
)
async def put_document(ctx: CollectionCtx, doc_id: DocId, body: DocumentPut) -> Response:
    """Stores the document without reporting matches; it still takes its place in first-seen order,
    so later checks report it as the earlier copy."""
    doc_id = document_id(ctx, doc_id)
    ctx.limits.check_document(("body",), None, body.text, body.metadata)
    stored = await ctx.service.put(ctx.name, Document(doc_id, body.text, body.metadata))
    ctx.metrics.documents_inserted.inc()
    return JSONBytesResponse(document_dict(stored))


@router.get(
    "/{doc_id:path}",
    response_model=DocumentOut,
    responses=error_responses(401, 404, 422, 503),
    summary="A stored document's metadata",
)
async def get_document(ctx: CollectionCtx, doc_id: DocId) -> Response:
    stored = await ctx.service.get_document(ctx.name, document_id(ctx, doc_id))
    return JSONBytesResponse(document_dict(stored))


@router.delete(
    "/{doc_id:path}",
    status_code=204,
    responses=error_responses(401, 403, 404, 422, 503),
    openapi_extra=WRITE,
    summary="Delete a document",
)
async def delete_document(ctx: CollectionCtx, doc_id: DocId) -> Response:
    await ctx.service.delete_document(ctx.name, document_id(ctx, doc_id))
    return Response(status_code=204)
