"""Routes that look for near-duplicates: check one, check a batch (in order), query (read-only), and
passages (read-only: which stored texts contain passages of a text)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from neardup.api.auth import READ, WRITE_IF_INSERT
from neardup.api.convert import check_dict, match_dict, passages_dict
from neardup.api.deps import CollectionCtx
from neardup.api.errors import error_responses
from neardup.api.metrics import Metrics
from neardup.api.models import (
    BatchCheckRequest,
    BatchCheckResultOut,
    CheckRequest,
    CheckResultOut,
    PassagesRequest,
    PassagesResultOut,
    QueryRequest,
    QueryResultOut,
)
from neardup.api.responses import JSONBytesResponse
from neardup.api.routing import OrjsonRoute
from neardup.domain import CheckResult, Document

router = APIRouter(prefix="/v1/collections/{name}", tags=["checks"], route_class=OrjsonRoute)

_ERRORS = error_responses(401, 403, 404, 409, 413, 422, 503)


def _count(metrics: Metrics, results: list[CheckResult]) -> None:
    inserted = duplicates = 0
    for result in results:
        inserted += result.inserted
        duplicates += result.duplicate
    metrics.record_checks(len(results), inserted, duplicates)


@router.post(
    "/check",
    response_model=CheckResultOut,
    responses=_ERRORS,
    openapi_extra=WRITE_IF_INSERT,
    summary="Check one document (and insert it)",
)
async def check(ctx: CollectionCtx, body: CheckRequest) -> Response:
    """Verified matches among documents inserted before this one, best first; `duplicate_of` is the
    earliest of them. With `insert` (the default) the document is stored, replacing its id's old
    version; a document never matches itself. The same text and metadata as the stored version keep
    that version and its place (a retried check gets the first answer again). A read-only API key may
    check with `"insert": false`."""
    if body.insert:
        ctx.require_write("check with insert")
    ctx.limits.check_document(("body",), body.id, body.text, body.metadata)
    results = await ctx.service.check(
        ctx.name,
        [Document(body.id, body.text, body.metadata)],
        insert=body.insert,
        min_similarity=body.min_similarity,
    )
    _count(ctx.metrics, results)
    return JSONBytesResponse(check_dict(results[0]))


@router.post(
    "/check/batch",
    response_model=BatchCheckResultOut,
    responses=_ERRORS,
    openapi_extra=WRITE_IF_INSERT,
    summary="Check a batch of documents, in order",
)
async def check_batch(ctx: CollectionCtx, body: BatchCheckRequest) -> Response:
    """Results in input order; a later document of the batch sees the earlier ones (as if they had
    been sent one by one). Up to NEARDUP_MAX_BATCH_DOCUMENTS documents per request."""
    if body.insert:
        ctx.require_write("check/batch with insert")
    ctx.limits.check_batch(body.documents)
    results = await ctx.service.check(
        ctx.name,
        [Document(doc.id, doc.text, doc.metadata) for doc in body.documents],
        insert=body.insert,
        min_similarity=body.min_similarity,
    )
    _count(ctx.metrics, results)
    return JSONBytesResponse({"results": [check_dict(result) for result in results]})


@router.post(
    "/query",
    response_model=QueryResultOut,
    responses=error_responses(401, 404, 413, 422, 503),
    openapi_extra=READ,
    summary="Find stored near-duplicates of a text",
)
async def query(ctx: CollectionCtx, body: QueryRequest) -> Response:
    """Read-only: verified matches of `text`, best first, at most `limit`."""
    ctx.limits.check_document(("body",), None, body.text, None)
    ctx.limits.check_query_limit(body.limit)
    matches = await ctx.service.query(
        ctx.name, body.text, limit=body.limit, min_similarity=body.min_similarity
    )
    return JSONBytesResponse({"matches": [match_dict(match) for match in matches]})


@router.post(
    "/passages",
    response_model=PassagesResultOut,
    responses=error_responses(401, 404, 409, 413, 422, 503),
    openapi_extra=READ,
    summary="Find stored texts that contain passages of a text",
)
async def passages(ctx: CollectionCtx, body: PassagesRequest) -> Response:
    """Read-only, in a collection created with `"passages": true`: the stored documents that contain
    passages of `text` (copied, or lightly edited), at most `limit`, each with its `containment` and
    the passages attributed to it as code point offsets in both texts (`end` exclusive). Each passage
    goes to its best source, the source adding the most text first; the other stored documents holding
    it are grouped under it (`also_in`, `also_in_count`) instead of taking places. `coverage` is the
    share of the text inside the spans returned, `coverage_all` the same without `limit`. Passages
    shorter than `min_words` words are left out. A collection created without passages answers 409."""
    ctx.limits.check_document(("body",), None, body.text, None)
    ctx.limits.check_query_limit(body.limit)
    result = await ctx.service.passages(ctx.name, body.text, limit=body.limit, min_words=body.min_words)
    return JSONBytesResponse(passages_dict(result))
