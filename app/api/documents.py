"""Routes of ``/v1/collections/{name}/documents/{doc_id}``: insert or replace without checking, fetch,
delete. The id segment takes the rest of the path, so ids with a (URL-encoded) ``/`` work too."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.api.auth import WRITE
from app.api.convert import document_dict
from app.api.deps import CollectionName, DocumentId, LimitsDep, MetricsDep, ServiceDep
from app.api.errors import error_responses
from app.api.models import DocumentOut, DocumentPut
from app.api.responses import JSONBytesResponse
from app.api.routing import OrjsonRoute
from app.domain import Document

router = APIRouter(prefix="/v1/collections/{name}/documents", tags=["documents"], route_class=OrjsonRoute)


@router.put(
    "/{doc_id:path}",
    response_model=DocumentOut,
    responses=error_responses(401, 403, 404, 413, 422, 503),
    openapi_extra=WRITE,
    summary="Insert or replace a document, unchecked",
)
async def put_document(
    name: CollectionName,
    doc_id: DocumentId,
    body: DocumentPut,
    service: ServiceDep,
    limits: LimitsDep,
    metrics: MetricsDep,
) -> Response:
    """Stores the document without reporting matches; it still takes its place in first-seen order,
    so later checks report it as the earlier copy."""
    limits.check_document(("body",), None, body.text, body.metadata)
    stored = await service.put(name, Document(doc_id, body.text, body.metadata))
    metrics.documents_inserted.inc()
    return JSONBytesResponse(document_dict(stored))


@router.get(
    "/{doc_id:path}",
    response_model=DocumentOut,
    responses=error_responses(401, 404, 422, 503),
    summary="A stored document's metadata",
)
async def get_document(name: CollectionName, doc_id: DocumentId, service: ServiceDep) -> Response:
    return JSONBytesResponse(document_dict(await service.get_document(name, doc_id)))


@router.delete(
    "/{doc_id:path}",
    status_code=204,
    responses=error_responses(401, 403, 404, 422, 503),
    openapi_extra=WRITE,
    summary="Delete a document",
)
async def delete_document(name: CollectionName, doc_id: DocumentId, service: ServiceDep) -> Response:
    await service.delete_document(name, doc_id)
    return Response(status_code=204)
