"""Python client of the neardup HTTP API: ``Client`` (blocking) and ``AsyncClient`` (asyncio), over httpx.

Both have the same methods as the API, return typed results (frozen dataclasses), send an API key as
``Authorization: Bearer`` and retry with exponential backoff on 503/429 (honouring ``Retry-After``) and
on connection errors::

    from neardup.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as nd:
        nd.create_collection("pages", threshold=0.7)
        result = nd.check("pages", "a", "The quick brown fox ...")
        for result in nd.check_many("pages", ({"id": i, "text": t} for i, t in docs), batch_size=500):
            if result.duplicate:
                print(result.id, "duplicates", result.duplicate_of)

Errors are :class:`NeardupError` subclasses carrying the HTTP status, the service's error code and its
message. A retried ``check`` of the same id, text and metadata keeps the stored copy and its place, and
gets the first answer again; a document never matches itself.

The module needs httpx alone (the base install, ``pip install neardup``): it imports nothing of the
service. Each endpoint is written once, as a generator that yields the request it needs and receives
the answer (``_Api``); ``Client`` and ``AsyncClient`` only run those generators over blocking or asyncio
I/O, with the same retry policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import random
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass, field
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar
from urllib.parse import quote

import httpx

from neardup import __version__

__all__ = [
    "DEFAULT_URL",
    "AsyncClient",
    "AuthError",
    "CheckResult",
    "Client",
    "Collection",
    "Conflict",
    "DocumentInput",
    "InvalidRequest",
    "Match",
    "MirrorPair",
    "NeardupError",
    "NotFound",
    "SiteMirrors",
    "SiteShare",
    "StoredDocument",
    "Unavailable",
]

DEFAULT_URL = "http://127.0.0.1:8000"
#: Statuses worth retrying: the store is down (503) or a rate limit says to wait (429).
RETRY_STATUSES = frozenset({429, 503})
#: The longest wait between two attempts, whatever Retry-After says.
MAX_BACKOFF = 30.0

Metadata = dict[str, Any]
#: A document for ``check_many``: a mapping with ``id``, ``text`` and optionally ``metadata``.
DocumentInput = Mapping[str, Any]


# --- errors ------------------------------------------------------------------------------------------


class NeardupError(Exception):
    """Root of the client's errors::

    NeardupError          (status 0: no answer, e.g. the service is unreachable after retries)
    ├── InvalidRequest    422, 413, 400: the message says what to change
    ├── NotFound          404: unknown collection or document
    ├── Conflict          409: a collection exists with other parameters
    ├── AuthError         401, 403: missing or wrong API key
    └── Unavailable       503, 429: still refused after every retry
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.status = status
        self.code = code
        self.message = message


class InvalidRequest(NeardupError):
    pass


class NotFound(NeardupError):
    pass


class Conflict(NeardupError):
    pass


class AuthError(NeardupError):
    pass


class Unavailable(NeardupError):
    pass


def _error_for(response: httpx.Response) -> NeardupError:
    try:
        body = response.json()
        code, message = str(body.get("error", "error")), str(body.get("message", response.text))
    except ValueError:
        code, message = "error", response.text[:200] or response.reason_phrase
    status = response.status_code
    kind: type[NeardupError] = NeardupError
    if status == 404:
        kind = NotFound
    elif status == 409:
        kind = Conflict
    elif status in (401, 403):
        kind = AuthError
    elif status in RETRY_STATUSES:
        kind = Unavailable
    elif status in (400, 413, 422):
        kind = InvalidRequest
    return kind(status, code, message)


# --- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collection:
    """A collection's parameters (fixed at creation) and its number of documents."""

    name: str
    threshold: float
    num_perm: int
    shingle: Literal["word", "char"]
    size: int
    bands: int
    rows: int
    seed: int
    documents: int | None
    passages: bool = False
    site_field: str | None = None
    verify: Literal["estimate", "exact"] = "estimate"
    ttl_seconds: int | None = None
    max_documents: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Collection:
        return cls(
            name=data["name"],
            threshold=float(data["threshold"]),
            num_perm=int(data["num_perm"]),
            shingle=data["shingle"],
            size=int(data["size"]),
            bands=int(data["bands"]),
            rows=int(data["rows"]),
            seed=int(data["seed"]),
            documents=None if data.get("documents") is None else int(data["documents"]),
            passages=bool(data.get("passages", False)),
            site_field=data.get("site_field"),
            verify=data.get("verify", "estimate"),
            ttl_seconds=data.get("ttl_seconds"),
            max_documents=data.get("max_documents"),
        )

    def candidate_probability(self, similarity: float) -> float:
        """The S-curve: P(s) = 1 - (1 - s^rows)^bands, the chance a pair of similarity s is a candidate."""
        return float(1.0 - (1.0 - similarity**self.rows) ** self.bands)


@dataclass(frozen=True)
class Match:
    """A verified match; ``similarity`` is the estimated Jaccard similarity."""

    id: str
    similarity: float
    metadata: Metadata | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Match:
        return cls(data["id"], float(data["similarity"]), data.get("metadata"))


@dataclass(frozen=True)
class CheckResult:
    """``matches``: earlier documents, best first; ``duplicate_of``: the earliest of them."""

    id: str
    duplicate: bool
    duplicate_of: str | None
    matches: list[Match] = field(default_factory=list)
    inserted: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            id=data["id"],
            duplicate=bool(data["duplicate"]),
            duplicate_of=data.get("duplicate_of"),
            matches=[Match.from_json(m) for m in data.get("matches", ())],
            inserted=bool(data.get("inserted", False)),
        )


@dataclass(frozen=True)
class Copy:
    """Another stored document holding a passage, and where it is there."""

    id: str
    source_start: int
    source_end: int
    metadata: Metadata | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Copy:
        return cls(data["id"], data["source_start"], data["source_end"], data.get("metadata"))


@dataclass(frozen=True)
class Span:
    """A passage: code points of the text (``start``, ``end`` exclusive) and of the stored text it is
    attributed to; ``also_in`` the first of the other stored documents holding it, ``also_in_count``
    how many they are."""

    start: int
    end: int
    source_start: int
    source_end: int
    also_in: list[Copy] = field(default_factory=list)
    also_in_count: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Span:
        return cls(
            data["start"],
            data["end"],
            data["source_start"],
            data["source_end"],
            [Copy.from_json(c) for c in data["also_in"]],
            int(data["also_in_count"]),
        )


@dataclass(frozen=True)
class PassageSource:
    """A stored document that is the best source of passages of the text; ``containment``: the
    estimated share of the text's word 5-grams found in it; ``spans``: the passages attributed to it,
    in the text's order."""

    id: str
    containment: float
    spans: list[Span]
    metadata: Metadata | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PassageSource:
        spans = [Span.from_json(s) for s in data["spans"]]
        return cls(data["id"], float(data["containment"]), spans, data.get("metadata"))


@dataclass(frozen=True)
class Passages:
    """``sources``: each the best source of its passages (other copies under each span's ``also_in``),
    at most ``limit``; ``coverage``: share of the text's characters inside their spans;
    ``coverage_all``: the same without ``limit``; ``more_sources``: sources of further passages past
    ``limit``; ``documents``: stored documents found holding a passage."""

    coverage: float
    sources: list[PassageSource]
    coverage_all: float = 0.0
    more_sources: int = 0
    documents: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Passages:
        return cls(
            float(data["coverage"]),
            [PassageSource.from_json(s) for s in data["sources"]],
            float(data["coverage_all"]),
            int(data["more_sources"]),
            int(data["documents"]),
        )


@dataclass(frozen=True)
class StoredDocument:
    id: str
    metadata: Metadata | None
    inserted_at: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredDocument:
        return cls(data["id"], data.get("metadata"), float(data["inserted_at"]))


@dataclass(frozen=True)
class SiteShare:
    """Another site seen from the asked one: ``shared`` of the asked site's pages have a verified
    near-duplicate on it (``share`` = shared / the asked site's pages); ``other_shared`` of its
    ``pages`` have one on the asked site (``share_of_other``)."""

    site: str
    pages: int
    shared: int
    share: float
    other_shared: int
    share_of_other: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SiteShare:
        return cls(
            data["site"],
            int(data["pages"]),
            int(data["shared"]),
            float(data["share"]),
            int(data.get("other_shared", 0)),
            float(data["share_of_other"]),
        )


@dataclass(frozen=True)
class SiteMirrors:
    """A site's pages (0: none stored) and the sites sharing pages with it, best first."""

    site: str
    pages: int
    mirrors: list[SiteShare]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SiteMirrors:
        return cls(data["site"], int(data["pages"]), [SiteShare.from_json(m) for m in data["mirrors"]])


@dataclass(frozen=True)
class MirrorPair:
    """Two sites; ``site`` is the one with the larger share (shared / pages)."""

    site: str
    other: str
    pages: int
    other_pages: int
    shared: int
    other_shared: int
    share: float
    share_of_other: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MirrorPair:
        return cls(
            data["site"],
            data["other"],
            int(data["pages"]),
            int(data["other_pages"]),
            int(data["shared"]),
            int(data.get("other_shared", 0)),
            float(data["share"]),
            float(data["share_of_other"]),
        )


# --- what both clients share: requests, retry policy, decoding ---------------------------------------


def _collections(name: str | None = None) -> str:
    return "/v1/collections" if name is None else f"/v1/collections/{_segment(name)}"


def _segment(value: str) -> str:
    """One path segment. "." and ".." are sent as %2E: left as they are, the URL would be normalized
    (DELETE .../documents/.. would drop the collection)."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def _document(collection: str, doc_id: str) -> str:
    return f"{_collections(collection)}/documents/{_segment(doc_id)}"


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"user-agent": f"neardup-client/{__version__}", "accept": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _without_none(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _batch_body(docs: list[DocumentInput], insert: bool, min_similarity: float | None) -> dict[str, Any]:
    documents = []
    for doc in docs:
        item: dict[str, Any] = {"id": str(doc["id"]), "text": doc["text"]}
        if doc.get("metadata") is not None:
            item["metadata"] = doc["metadata"]
        documents.append(item)
    return _without_none(documents=documents, insert=insert, min_similarity=min_similarity)


@dataclass(frozen=True)
class _Retry:
    """Exponential backoff with full jitter; a server's Retry-After wins when it asks for longer."""

    retries: int
    backoff: float

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        wait = random.uniform(0, self.backoff * 2**attempt)
        if response is not None:
            with contextlib.suppress(ValueError):  # an HTTP date: keep our own delay
                wait = max(wait, float(response.headers.get("retry-after", 0)))
        return min(wait, MAX_BACKOFF)


#: Errors raised before the request could have been processed or while waiting for an answer.
_TRANSIENT = (httpx.TransportError,)
#: Of those, the ones raised before anything was sent: the service never saw the request.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def _maybe_done(exc: Exception | None, response: httpx.Response | None) -> bool:
    """Whether a failed attempt may still have been carried out: it was sent and its answer was lost,
    or the service answered 503 (its store call failed, possibly after the store had done it)."""
    if exc is not None:
        return not isinstance(exc, _NOT_SENT)
    return response is not None and response.status_code == 503


def _decode(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise _error_for(response)
    if response.status_code == 204 or not response.content:
        return None
    return response.json()


@dataclass(frozen=True)
class _Request:
    """What an endpoint asks its client to send. ``probe``: one attempt, no retry, and a transport
    error is an answer (``response`` None) rather than an exception."""

    method: str
    path: str
    json: Any = None
    probe: bool = False


@dataclass(frozen=True)
class _Answer:
    """The last response, and whether an earlier attempt may have been carried out already."""

    response: httpx.Response | None
    maybe_done: bool = False


class _Attempts:
    """The retry loop of one request, without its I/O: both clients drive it the same way.

    ``next_step(response, exc)`` after each attempt returns ``None`` when the answer is final (see
    ``answer``), else the seconds to wait before the next attempt."""

    def __init__(self, request: _Request, retry: _Retry, base_url: object) -> None:
        self.request = request
        self.retry = retry
        self.base_url = base_url
        self.attempt = 0
        self.maybe_done = False
        self.answer = _Answer(None)

    def next_step(self, response: httpx.Response | None, exc: Exception | None) -> float | None:
        last = self.request.probe or self.attempt == self.retry.retries
        if exc is not None:
            if self.request.probe:
                return None
            if last:
                raise NeardupError(0, "unreachable", f"{self.base_url}: {exc}") from exc
            self.maybe_done = self.maybe_done or _maybe_done(exc, None)
        elif response is not None and (last or response.status_code not in RETRY_STATUSES):
            self.answer = _Answer(response, self.maybe_done)
            return None
        else:
            self.maybe_done = self.maybe_done or _maybe_done(None, response)
        wait = self.retry.delay(self.attempt, response)
        self.attempt += 1
        return wait


T = TypeVar("T")
P = ParamSpec("P")
#: An endpoint: yields the requests it needs, receives their answers, returns its result.
_Op = Generator[_Request, _Answer, T]


def _call(method: str, path: str, json: Any = None) -> _Op[Any]:
    """One request with retries; its decoded JSON body (None for 204), or the error it answered."""
    answer = yield _Request(method, path, json)
    assert answer.response is not None
    return _decode(answer.response)


def _lost_404(answer: _Answer) -> bool:
    """A 404 after an attempt that may have been carried out: the deletion was done by that attempt."""
    return answer.response is not None and answer.response.status_code == 404 and answer.maybe_done


# --- the API, written once ---------------------------------------------------------------------------


class _Api:
    """Every endpoint, once. Each method is a generator (see ``_Op``); ``Client`` and ``AsyncClient``
    expose it as a blocking method or a coroutine with the same signature and docstring."""

    def ready(self) -> _Op[bool]:
        """True when the service answers and its store does (one attempt, no retry)."""
        answer = yield _Request("GET", "/readyz", probe=True)
        return answer.response is not None and answer.response.is_success

    # collections
    def create_collection(
        self,
        name: str,
        *,
        threshold: float | None = None,
        num_perm: int | None = None,
        shingle: Literal["word", "char"] | None = None,
        size: int | None = None,
        bands: int | None = None,
        rows: int | None = None,
        expected_documents: int | None = None,
        passages: bool | None = None,
        site_field: str | None = None,
        verify: Literal["estimate", "exact"] | None = None,
        ttl_seconds: int | None = None,
        max_documents: int | None = None,
    ) -> _Op[Collection]:
        """Create, or return the existing one if its parameters are the same (Conflict otherwise).
        ``verify``: ``"estimate"`` (the default: a fixed-size sketch per document) or ``"exact"`` (the
        exact Jaccard of the shingle sets, 4 bytes per distinct shingle). ``ttl_seconds`` and
        ``max_documents``: retention (documents stop matching after that long, or beyond the most recent).
        ``expected_documents``: capacity hint, the store sizes its tables for that many documents.
        ``passages``: also index stored documents for :meth:`passages` (fixed at creation).
        ``site_field``: the metadata field naming each document's site (mirror detection: ``site``,
        ``mirrors``)."""
        body = _without_none(
            name=name,
            threshold=threshold,
            num_perm=num_perm,
            shingle=shingle,
            size=size,
            bands=bands,
            rows=rows,
            expected_documents=expected_documents,
            passages=passages,
            site_field=site_field,
            verify=verify,
            ttl_seconds=ttl_seconds,
            max_documents=max_documents,
        )
        return Collection.from_json((yield from _call("POST", _collections(), body)))

    def list_collections(self) -> _Op[list[Collection]]:
        data = yield from _call("GET", _collections())
        return [Collection.from_json(c) for c in data["collections"]]

    def get_collection(self, name: str) -> _Op[Collection]:
        return Collection.from_json((yield from _call("GET", _collections(name))))

    def delete_collection(self, name: str) -> _Op[None]:
        """Drop it; NotFound if it does not exist (a 404 after a retried attempt that may have dropped it
        counts as done)."""
        answer = yield _Request("DELETE", _collections(name))
        if not _lost_404(answer):
            assert answer.response is not None
            _decode(answer.response)

    # checks
    def check(
        self,
        collection: str,
        id: str,
        text: str,
        *,
        metadata: Metadata | None = None,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> _Op[CheckResult]:
        """Check one document against the earlier ones (and store it, unless ``insert=False``)."""
        body = _without_none(
            id=id, text=text, metadata=metadata, insert=insert, min_similarity=min_similarity
        )
        return CheckResult.from_json((yield from _call("POST", f"{_collections(collection)}/check", body)))

    def check_batch(
        self,
        collection: str,
        documents: Iterable[DocumentInput],
        *,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> _Op[list[CheckResult]]:
        """One request; results in input order, later documents see the earlier ones."""
        body = _batch_body(list(documents), insert, min_similarity)
        data = yield from _call("POST", f"{_collections(collection)}/check/batch", body)
        return [CheckResult.from_json(r) for r in data["results"]]

    def query(
        self, collection: str, text: str, *, limit: int = 10, min_similarity: float | None = None
    ) -> _Op[list[Match]]:
        """The stored documents similar to ``text``, best first; nothing is stored."""
        body = _without_none(text=text, limit=limit, min_similarity=min_similarity)
        data = yield from _call("POST", f"{_collections(collection)}/query", body)
        return [Match.from_json(m) for m in data["matches"]]

    def passages(
        self, collection: str, text: str, *, limit: int = 10, min_words: int | None = None
    ) -> _Op[Passages]:
        """The stored documents that contain passages of ``text``, best first, with the passages'
        offsets in both texts; nothing is stored. The collection needs ``passages=True``."""
        body = _without_none(text=text, limit=limit, min_words=min_words)
        return Passages.from_json((yield from _call("POST", f"{_collections(collection)}/passages", body)))

    # sites
    def site(self, collection: str, site: str) -> _Op[SiteMirrors]:
        """A site's pages and the sites sharing them, best first (a collection with a site_field;
        Conflict otherwise). ``site`` is a host, or a URL standing for its host."""
        data = yield from _call("GET", f"{_collections(collection)}/sites/{_segment(site)}")
        return SiteMirrors.from_json(data)

    def mirrors(
        self, collection: str, *, min_share: float = 0.5, min_pages: int = 1, limit: int = 100
    ) -> _Op[list[MirrorPair]]:
        """Pairs of sites where either direction's share reaches ``min_share``, both with at least
        ``min_pages`` pages, ranked by share."""
        params = f"min_share={min_share!r}&min_pages={min_pages}&limit={limit}"
        data = yield from _call("GET", f"{_collections(collection)}/mirrors?{params}")
        return [MirrorPair.from_json(p) for p in data["pairs"]]

    # documents
    def put(
        self, collection: str, id: str, text: str, *, metadata: Metadata | None = None
    ) -> _Op[StoredDocument]:
        """Insert or replace without checking."""
        body = _without_none(text=text, metadata=metadata)
        return StoredDocument.from_json((yield from _call("PUT", _document(collection, id), body)))

    def get(self, collection: str, id: str) -> _Op[StoredDocument]:
        return StoredDocument.from_json((yield from _call("GET", _document(collection, id))))

    def delete(self, collection: str, id: str) -> _Op[None]:
        """Delete a document; NotFound if it (or its collection) does not exist. A 404 after a retried
        attempt that may have deleted it counts as done once the collection is found to exist."""
        answer = yield _Request("DELETE", _document(collection, id))
        if _lost_404(answer):
            yield from self.get_collection(collection)  # NotFound if the collection is what is missing
            return
        assert answer.response is not None
        _decode(answer.response)


def _expose(method: Any, op: Callable[..., Any], owner: str) -> None:
    """Give ``method`` the name, docstring and signature of the endpoint it runs, returning what the
    endpoint's generator returns (``_Op[X]`` becomes ``X``), so help() and IDEs show the real call."""
    functools.update_wrapper(method, op)
    del method.__wrapped__
    method.__qualname__ = f"{owner}.{op.__name__}"
    returns = str(op.__annotations__.get("return", "Any")).removeprefix("_Op[").removesuffix("]")
    method.__annotations__ = {**op.__annotations__, "return": returns}
    method.__signature__ = inspect.signature(op).replace(return_annotation=returns)


def _blocking(op: Callable[Concatenate[_Api, P], _Op[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(op(_API, *args, **kwargs))

    _expose(method, op, "Client")
    return method


def _coroutine(
    op: Callable[Concatenate[_Api, P], _Op[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(op(_API, *args, **kwargs))

    _expose(method, op, "AsyncClient")
    return method


_API = _Api()


def _batches(documents: Iterable[T], size: int) -> Iterator[list[T]]:
    if size < 1:
        raise ValueError("batch_size must be at least 1")
    batch: list[T] = []
    for doc in documents:
        batch.append(doc)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


# --- the blocking client -----------------------------------------------------------------------------


class Client:
    """Blocking client. ``api_key`` defaults to ``$NEARDUP_API_KEY``; ``retries`` attempts after the
    first on 503/429 and connection errors, waiting ``backoff * 2^attempt`` seconds (jittered)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("NEARDUP_API_KEY")
        self._http = httpx.Client(
            base_url=url.rstrip("/"), headers=_headers(key), timeout=timeout, transport=transport
        )
        self._retry = _Retry(retries, backoff)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, json: Any = None) -> Any:
        """One API call with retries; returns the decoded JSON body (None for 204)."""
        return self._run(_call(method, path, json))

    def _run(self, op: _Op[T]) -> T:
        try:
            request = next(op)
            while True:
                request = op.send(self._send(request))
        except StopIteration as done:
            result: T = done.value
            return result

    def _send(self, request: _Request) -> _Answer:
        attempts = _Attempts(request, self._retry, self._http.base_url)
        while True:
            response, error = None, None
            try:
                response = self._http.request(request.method, request.path, json=request.json)
            except _TRANSIENT as exc:
                error = exc
            wait = attempts.next_step(response, error)
            if wait is None:
                return attempts.answer
            time.sleep(wait)

    ready = _blocking(_Api.ready)
    create_collection = _blocking(_Api.create_collection)
    list_collections = _blocking(_Api.list_collections)
    get_collection = _blocking(_Api.get_collection)
    delete_collection = _blocking(_Api.delete_collection)
    check = _blocking(_Api.check)
    check_batch = _blocking(_Api.check_batch)
    query = _blocking(_Api.query)
    passages = _blocking(_Api.passages)
    site = _blocking(_Api.site)
    mirrors = _blocking(_Api.mirrors)
    put = _blocking(_Api.put)
    insert = put
    get = _blocking(_Api.get)
    delete = _blocking(_Api.delete)

    def check_many(
        self,
        collection: str,
        documents: Iterable[DocumentInput],
        *,
        batch_size: int = 500,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> Iterator[CheckResult]:
        """Any number of documents (an iterable is read lazily), sent ``batch_size`` at a time; yields
        each result as soon as its batch is answered, in input order."""
        for batch in _batches(documents, batch_size):
            yield from self.check_batch(collection, batch, insert=insert, min_similarity=min_similarity)


# --- the asyncio client ------------------------------------------------------------------------------


class AsyncClient:
    """The same methods as :class:`Client`, as coroutines; ``check_many`` is an async generator."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get("NEARDUP_API_KEY")
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"), headers=_headers(key), timeout=timeout, transport=transport
        )
        self._retry = _Retry(retries, backoff)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, json: Any = None) -> Any:
        """One API call with retries; returns the decoded JSON body (None for 204)."""
        return await self._run(_call(method, path, json))

    async def _run(self, op: _Op[T]) -> T:
        try:
            request = next(op)
            while True:
                request = op.send(await self._send(request))
        except StopIteration as done:
            result: T = done.value
            return result

    async def _send(self, request: _Request) -> _Answer:
        attempts = _Attempts(request, self._retry, self._http.base_url)
        while True:
            response, error = None, None
            try:
                response = await self._http.request(request.method, request.path, json=request.json)
            except _TRANSIENT as exc:
                error = exc
            wait = attempts.next_step(response, error)
            if wait is None:
                return attempts.answer
            await asyncio.sleep(wait)

    ready = _coroutine(_Api.ready)
    create_collection = _coroutine(_Api.create_collection)
    list_collections = _coroutine(_Api.list_collections)
    get_collection = _coroutine(_Api.get_collection)
    delete_collection = _coroutine(_Api.delete_collection)
    check = _coroutine(_Api.check)
    check_batch = _coroutine(_Api.check_batch)
    query = _coroutine(_Api.query)
    passages = _coroutine(_Api.passages)
    site = _coroutine(_Api.site)
    mirrors = _coroutine(_Api.mirrors)
    put = _coroutine(_Api.put)
    insert = put
    get = _coroutine(_Api.get)
    delete = _coroutine(_Api.delete)

    async def check_many(
        self,
        collection: str,
        documents: Iterable[DocumentInput] | AsyncIterable[DocumentInput],
        *,
        batch_size: int = 500,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> AsyncIterator[CheckResult]:
        """Documents from a plain or an async iterable, ``batch_size`` per request, results streamed in
        input order."""
        if not isinstance(documents, AsyncIterable):
            for batch in _batches(documents, batch_size):
                for result in await self.check_batch(
                    collection, batch, insert=insert, min_similarity=min_similarity
                ):
                    yield result
            return
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        pending: list[DocumentInput] = []
        async for doc in documents:
            pending.append(doc)
            if len(pending) >= batch_size:
                for result in await self.check_batch(
                    collection, pending, insert=insert, min_similarity=min_similarity
                ):
                    yield result
                pending = []
        if pending:
            for result in await self.check_batch(
                collection, pending, insert=insert, min_similarity=min_similarity
            ):
                yield result
