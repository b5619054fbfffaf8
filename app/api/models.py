"""Pydantic models of the v1 API: request bodies (validated) and response shapes (documented).

Limits that depend on the settings (text bytes, id length, metadata bytes, batch length) are checked
by ``neardup.api.limits`` in the routes, not here: these models are built once, at import time.
Responses are written as plain dicts by the routes (see ``neardup.api.convert``); the response models
below exist for the OpenAPI schema and for clients that want to read it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat

from neardup.domain.models import COLLECTION_NAME_PATTERN, COLLECTION_NAME_RULE
from neardup.domain.passage_search import ALSO_IN_SHOWN

Metadata = dict[str, Any]


def _json_integer(value: Any) -> Any:
    """Request fields are strict (a boolean is true or false, not 0): an integer field takes JSON's
    integers: 3 and 3.0 (JSON Schema calls both integers), not "3", true or 3.5."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be an integer")
        return int(value)
    return value


_INTEGER = BeforeValidator(_json_integer)


_ID = Field(
    min_length=1,
    description="the document's id: unique per collection, no control characters, "
    "at most NEARDUP_MAX_ID_LENGTH bytes of UTF-8",
)
_TEXT = Field(description="the document's text (UTF-8); its size is capped by NEARDUP_MAX_TEXT_BYTES")
_METADATA = Field(default=None, description="any JSON object, returned with matches and fetches")
_MIN_SIMILARITY = Field(
    default=None,
    gt=0.0,
    le=1.0,
    description="report matches at or above this estimated Jaccard instead of the collection's threshold",
)


class RequestBody(BaseModel):
    # Unknown fields are refused: a misspelt "insert" or "threshold" must not be silently ignored.
    model_config = ConfigDict(extra="forbid")


# --- collections ------------------------------------------------------------------------------------


class CollectionCreate(RequestBody):
    name: str = Field(
        min_length=1,
        max_length=64,
        description=COLLECTION_NAME_RULE,
        examples=["pages"],
        # Documented, not enforced here: the route refuses other names with a clearer message.
        json_schema_extra={"pattern": COLLECTION_NAME_PATTERN},
    )
    threshold: StrictFloat | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="near-duplicate threshold on estimated Jaccard (default 0.8)",
    )
    num_perm: Annotated[int, Field(ge=16, le=1024, multiple_of=8), _INTEGER] | None = Field(
        default=None, description="signature length (default 128)"
    )
    shingle: Literal["word", "char"] | None = Field(
        default=None, description="features: word n-grams or character n-grams (default word)"
    )
    size: Annotated[int, Field(ge=1, le=64), _INTEGER] | None = Field(
        default=None, description="n of the n-grams (default 5)"
    )
    bands: Annotated[int, Field(ge=1, le=1024), _INTEGER] | None = Field(
        default=None, description="LSH bands; chosen from the threshold if unset"
    )
    rows: Annotated[int, Field(ge=1, le=1024), _INTEGER] | None = Field(
        default=None, description="slots per band; chosen from the threshold if unset"
    )
    ttl_seconds: Annotated[int, Field(ge=1, le=315_360_000), _INTEGER] | None = Field(
        default=None,
        description="retention: a document stops matching this many seconds after its insertion, and "
        "its entries are reclaimed (default: kept forever)",
    )
    max_documents: Annotated[int, Field(ge=1, le=2**31), _INTEGER] | None = Field(
        default=None,
        description="keep only the most recent insertions: older ones stop matching and are "
        "reclaimed (default: no limit)",
    )
    verify: Literal["estimate", "exact"] | None = Field(
        default=None,
        description="how candidates are decided (default estimate): 'estimate' stores a fixed-size "
        "sketch per document (one-permutation bins, or every shingle of a short document) and decides "
        "on the estimated Jaccard; 'exact' stores the sorted 32-bit hashes of every shingle (4 bytes "
        "per distinct shingle) and decides on the exact Jaccard of the shingle sets",
    )
    expected_documents: Annotated[int, Field(ge=1, le=2**27), _INTEGER] | None = Field(
        default=None,
        description="capacity hint: the band table is sized for this many documents up front, so "
        "inserts up to it skip the table's growth (about a third less server work each); a collection "
        "far smaller than its hint uses more memory per document. Changes no result.",
    )
    site_field: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="mirror detection: the metadata field naming each document's site (its lower-cased "
        "host when the value is an absolute URL); the collection then counts, per pair of sites, the "
        "pages of one with a verified near-duplicate on the other (GET .../sites/{site}, .../mirrors). "
        "Fixed at creation",
    )

    passages: StrictBool | None = Field(
        default=None,
        description="also index every stored document for passage search (POST .../passages: which "
        "stored texts contain passages of a text, where, and how much); fixed at creation, costs memory "
        "per stored document (default: false)",
    )


class CollectionOut(BaseModel):
    name: str
    threshold: float
    num_perm: int
    shingle: Literal["word", "char"]
    size: int
    bands: int
    rows: int
    seed: int
    ttl_seconds: int | None = Field(default=None, description="retention in seconds, if any")
    max_documents: int | None = Field(default=None, description="most recent insertions kept, if limited")
    expected_documents: int | None = Field(default=None, description="capacity hint, if given")
    verify: Literal["estimate", "exact"] = Field(default="estimate", description="verification mode")
    bins: int = Field(default=0, description="one-permutation bins of the estimate sketch (0 in exact mode)")
    passages: bool = Field(default=False, description="whether stored documents are indexed for passages")
    site_field: str | None = Field(default=None, description="the metadata field naming sites, if any")
    documents: int | None = Field(default=None, description="number of documents stored")


class CollectionList(BaseModel):
    collections: list[CollectionOut]


# --- checks and queries -----------------------------------------------------------------------------


class CheckRequest(RequestBody):
    id: str = _ID
    text: str = _TEXT
    metadata: Metadata | None = _METADATA
    insert: StrictBool = Field(default=True, description="store the document after checking it")
    min_similarity: StrictFloat | None = _MIN_SIMILARITY


class BatchDocument(RequestBody):
    id: str = _ID
    text: str = _TEXT
    metadata: Metadata | None = _METADATA


class BatchCheckRequest(RequestBody):
    documents: list[BatchDocument] = Field(
        min_length=1, description="checked in order: a later document sees the earlier ones"
    )
    insert: StrictBool = Field(default=True, description="store the documents after checking them")
    min_similarity: StrictFloat | None = _MIN_SIMILARITY


class QueryRequest(RequestBody):
    text: str = _TEXT
    limit: Annotated[int, Field(ge=1), _INTEGER] = Field(
        default=10, description="most matches to return (capped by NEARDUP_MAX_QUERY_LIMIT)"
    )
    min_similarity: StrictFloat | None = _MIN_SIMILARITY


class PassagesRequest(RequestBody):
    text: str = _TEXT
    limit: Annotated[int, Field(ge=1), _INTEGER] = Field(
        default=10, description="most sources to return (capped by NEARDUP_MAX_QUERY_LIMIT)"
    )
    min_words: Annotated[int, Field(ge=1, le=100_000), _INTEGER] | None = Field(
        default=None, description="shortest span reported, in words of the text (default: 20)"
    )


class CopyOut(BaseModel):
    id: str
    metadata: Metadata | None = None
    source_start: int = Field(description="first code point of the passage in this stored text")
    source_end: int = Field(description="code point after the passage in this stored text")


class SpanOut(BaseModel):
    start: int = Field(description="first code point of the passage in the text")
    end: int = Field(description="code point after the passage in the text")
    source_start: int = Field(description="first code point of the passage in the stored text")
    source_end: int = Field(description="code point after the passage in the stored text")
    also_in: list[CopyOut] = Field(
        description="other stored documents holding this passage, most evidence first (at most "
        f"{ALSO_IN_SHOWN})"
    )
    also_in_count: int = Field(description="how many other stored documents hold this passage (all of them)")


class PassageSourceOut(BaseModel):
    id: str
    metadata: Metadata | None = None
    containment: float = Field(
        description="estimated share of the text's word 5-grams found in this source (also in passages "
        "attributed to another source)"
    )
    spans: list[SpanOut] = Field(description="the passages attributed to this source, in the text's order")


class PassagesResultOut(BaseModel):
    coverage: float = Field(description="share of the text's characters inside the spans returned")
    coverage_all: float = Field(
        description="share of the text's characters inside the spans of every source found, also those "
        "past `limit`"
    )
    sources: list[PassageSourceOut] = Field(
        description="each the best source of its passages, the one adding the most text first; a further "
        "copy of a passage is listed under the passage (`also_in`), never as a source"
    )
    more_sources: int = Field(description="sources of further passages left out by `limit`")
    documents: int = Field(
        description="stored documents found holding a passage of the text: sources, copies under a "
        "passage and those past `limit`"
    )


class MatchOut(BaseModel):
    id: str
    similarity: float = Field(description="estimated Jaccard similarity from the full signatures")
    metadata: Metadata | None = None


class CheckResultOut(BaseModel):
    id: str
    duplicate: bool
    duplicate_of: str | None = Field(description="the earliest inserted match: the canonical copy")
    matches: list[MatchOut] = Field(description="verified matches among earlier documents, best first")
    inserted: bool


class BatchCheckResultOut(BaseModel):
    results: list[CheckResultOut]


class QueryResultOut(BaseModel):
    matches: list[MatchOut]


# --- documents --------------------------------------------------------------------------------------


class DocumentPut(RequestBody):
    text: str = _TEXT
    metadata: Metadata | None = _METADATA


class DocumentOut(BaseModel):
    id: str
    metadata: Metadata | None
    inserted_at: float = Field(description="when the document was (last) inserted, Unix seconds")


# --- sites ------------------------------------------------------------------------------------------


class SiteShareOut(BaseModel):
    site: str
    pages: int
    shared: int = Field(description="pages of the asked site with a verified near-duplicate on this one")
    share: float = Field(description="shared / the asked site's pages")
    other_shared: int = Field(description="pages of this site with a near-duplicate on the asked one")
    share_of_other: float = Field(description="other_shared / this site's pages")


class SiteOut(BaseModel):
    site: str
    pages: int = Field(description="documents of this site stored (0: none)")
    mirrors: list[SiteShareOut] = Field(description="sites sharing pages with it, best first")


class MirrorPairOut(BaseModel):
    site: str = Field(description="the side with the larger share")
    other: str
    pages: int
    other_pages: int
    shared: int = Field(description="pages of site with a verified near-duplicate on other")
    other_shared: int = Field(description="pages of other with a verified near-duplicate on site")
    share: float = Field(description="shared / pages")
    share_of_other: float = Field(description="other_shared / other_pages")


class MirrorList(BaseModel):
    pairs: list[MirrorPairOut]


# --- health -----------------------------------------------------------------------------------------


class Status(BaseModel):
    status: str


# --- errors -----------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(description="where the problem is: body, path or query, then field names")
    msg: str
    input: Any = Field(default=None, description="the offending value, shortened (absent for big values)")


class ErrorOut(BaseModel):
    """Every error answer: a code and a message that says what to change."""

    error: str = Field(description="a stable code: not_found, conflict, invalid_request, unauthorized, ...")
    message: str = Field(description="what went wrong and what to change, for people")
    detail: list[ErrorDetail] | None = Field(default=None, description="validation errors, one per field")
