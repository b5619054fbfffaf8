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
message. A retried ``check`` is safe: checking an id again replaces it, and a document never matches
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

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
    "NeardupError",
    "NotFound",
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
class StoredDocument:
    id: str
    metadata: Metadata | None
    inserted_at: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredDocument:
        return cls(data["id"], data.get("metadata"), float(data["inserted_at"]))


# --- what both clients share: requests, retry policy, decoding ---------------------------------------


def _collections(name: str | None = None) -> str:
    return "/v1/collections" if name is None else f"/v1/collections/{quote(name, safe='')}"


def _document(collection: str, doc_id: str) -> str:
    return f"{_collections(collection)}/documents/{quote(doc_id, safe='')}"


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"user-agent": "neardup-client/0.1", "accept": "application/json"}
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
        return _decode(self._send(method, path, json)[0])

    def _send(self, method: str, path: str, json: Any = None) -> tuple[httpx.Response, bool]:
        """The last response, and whether an earlier attempt may have been carried out already."""
        maybe_done = False
        for attempt in range(self._retry.retries + 1):
            last = attempt == self._retry.retries
            try:
                response = self._http.request(method, path, json=json)
            except _TRANSIENT as exc:
                if last:
                    raise NeardupError(0, "unreachable", f"{self._http.base_url}: {exc}") from exc
                maybe_done = maybe_done or _maybe_done(exc, None)
                time.sleep(self._retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                maybe_done = maybe_done or _maybe_done(None, response)
                time.sleep(self._retry.delay(attempt, response))
                continue
            return response, maybe_done
        raise AssertionError("unreachable")  # pragma: no cover

    # health
    def ready(self) -> bool:
        """True when the service answers and its store does."""
        try:
            self._http.get("/readyz").raise_for_status()
        except (httpx.HTTPError, httpx.TransportError):
            return False
        return True

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
    ) -> Collection:
        """Create, or return the existing one if its parameters are the same (Conflict otherwise).
        ``expected_documents``: capacity hint, the store sizes its tables for that many documents."""
        body = _without_none(
            name=name,
            threshold=threshold,
            num_perm=num_perm,
            shingle=shingle,
            size=size,
            bands=bands,
            rows=rows,
            expected_documents=expected_documents,
        )
        return Collection.from_json(self.request("POST", _collections(), body))

    def list_collections(self) -> list[Collection]:
        return [Collection.from_json(c) for c in self.request("GET", _collections())["collections"]]

    def get_collection(self, name: str) -> Collection:
        return Collection.from_json(self.request("GET", _collections(name)))

    def delete_collection(self, name: str) -> None:
        """Drop it; NotFound if it does not exist (a 404 after a retried attempt that may have dropped it
        counts as done)."""
        response, maybe_done = self._send("DELETE", _collections(name))
        if not (response.status_code == 404 and maybe_done):
            _decode(response)

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
    ) -> CheckResult:
        body = _without_none(
            id=id, text=text, metadata=metadata, insert=insert, min_similarity=min_similarity
        )
        return CheckResult.from_json(self.request("POST", f"{_collections(collection)}/check", body))

    def check_batch(
        self,
        collection: str,
        documents: Iterable[DocumentInput],
        *,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> list[CheckResult]:
        """One request; results in input order, later documents see the earlier ones."""
        body = _batch_body(list(documents), insert, min_similarity)
        data = self.request("POST", f"{_collections(collection)}/check/batch", body)
        return [CheckResult.from_json(r) for r in data["results"]]

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
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        batch: list[DocumentInput] = []
        for doc in documents:
            batch.append(doc)
            if len(batch) >= batch_size:
                yield from self.check_batch(collection, batch, insert=insert, min_similarity=min_similarity)
                batch = []
        if batch:
            yield from self.check_batch(collection, batch, insert=insert, min_similarity=min_similarity)

    def query(
        self, collection: str, text: str, *, limit: int = 10, min_similarity: float | None = None
    ) -> list[Match]:
        body = _without_none(text=text, limit=limit, min_similarity=min_similarity)
        data = self.request("POST", f"{_collections(collection)}/query", body)
        return [Match.from_json(m) for m in data["matches"]]

    # documents
    def put(self, collection: str, id: str, text: str, *, metadata: Metadata | None = None) -> StoredDocument:
        """Insert or replace without checking."""
        body = _without_none(text=text, metadata=metadata)
        return StoredDocument.from_json(self.request("PUT", _document(collection, id), body))

    insert = put

    def get(self, collection: str, id: str) -> StoredDocument:
        return StoredDocument.from_json(self.request("GET", _document(collection, id)))

    def delete(self, collection: str, id: str) -> None:
        """Delete a document; NotFound if it (or its collection) does not exist. A 404 after a retried
        attempt that may have deleted it counts as done once the collection is found to exist."""
        response, maybe_done = self._send("DELETE", _document(collection, id))
        if response.status_code == 404 and maybe_done:
            self.get_collection(collection)  # NotFound if the collection is what is missing
            return
        _decode(response)


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
        return _decode((await self._send(method, path, json))[0])

    async def _send(self, method: str, path: str, json: Any = None) -> tuple[httpx.Response, bool]:
        maybe_done = False
        for attempt in range(self._retry.retries + 1):
            last = attempt == self._retry.retries
            try:
                response = await self._http.request(method, path, json=json)
            except _TRANSIENT as exc:
                if last:
                    raise NeardupError(0, "unreachable", f"{self._http.base_url}: {exc}") from exc
                maybe_done = maybe_done or _maybe_done(exc, None)
                await asyncio.sleep(self._retry.delay(attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                maybe_done = maybe_done or _maybe_done(None, response)
                await asyncio.sleep(self._retry.delay(attempt, response))
                continue
            return response, maybe_done
        raise AssertionError("unreachable")  # pragma: no cover

    async def ready(self) -> bool:
        try:
            (await self._http.get("/readyz")).raise_for_status()
        except (httpx.HTTPError, httpx.TransportError):
            return False
        return True

    async def create_collection(
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
    ) -> Collection:
        body = _without_none(
            name=name,
            threshold=threshold,
            num_perm=num_perm,
            shingle=shingle,
            size=size,
            bands=bands,
            rows=rows,
            expected_documents=expected_documents,
        )
        return Collection.from_json(await self.request("POST", _collections(), body))

    async def list_collections(self) -> list[Collection]:
        data = await self.request("GET", _collections())
        return [Collection.from_json(c) for c in data["collections"]]

    async def get_collection(self, name: str) -> Collection:
        return Collection.from_json(await self.request("GET", _collections(name)))

    async def delete_collection(self, name: str) -> None:
        response, maybe_done = await self._send("DELETE", _collections(name))
        if not (response.status_code == 404 and maybe_done):
            _decode(response)

    async def check(
        self,
        collection: str,
        id: str,
        text: str,
        *,
        metadata: Metadata | None = None,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> CheckResult:
        body = _without_none(
            id=id, text=text, metadata=metadata, insert=insert, min_similarity=min_similarity
        )
        return CheckResult.from_json(await self.request("POST", f"{_collections(collection)}/check", body))

    async def check_batch(
        self,
        collection: str,
        documents: Iterable[DocumentInput],
        *,
        insert: bool = True,
        min_similarity: float | None = None,
    ) -> list[CheckResult]:
        body = _batch_body(list(documents), insert, min_similarity)
        data = await self.request("POST", f"{_collections(collection)}/check/batch", body)
        return [CheckResult.from_json(r) for r in data["results"]]

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
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")

        async def documents_of() -> AsyncIterator[DocumentInput]:
            if isinstance(documents, AsyncIterable):
                async for doc in documents:
                    yield doc
            else:
                for doc in documents:
                    yield doc

        batch: list[DocumentInput] = []
        async for doc in documents_of():
            batch.append(doc)
            if len(batch) >= batch_size:
                for result in await self.check_batch(
                    collection, batch, insert=insert, min_similarity=min_similarity
                ):
                    yield result
                batch = []
        if batch:
            for result in await self.check_batch(
                collection, batch, insert=insert, min_similarity=min_similarity
            ):
                yield result

    async def query(
        self, collection: str, text: str, *, limit: int = 10, min_similarity: float | None = None
    ) -> list[Match]:
        body = _without_none(text=text, limit=limit, min_similarity=min_similarity)
        data = await self.request("POST", f"{_collections(collection)}/query", body)
        return [Match.from_json(m) for m in data["matches"]]

    async def put(
        self, collection: str, id: str, text: str, *, metadata: Metadata | None = None
    ) -> StoredDocument:
        body = _without_none(text=text, metadata=metadata)
        return StoredDocument.from_json(await self.request("PUT", _document(collection, id), body))

    insert = put

    async def get(self, collection: str, id: str) -> StoredDocument:
        return StoredDocument.from_json(await self.request("GET", _document(collection, id)))

    async def delete(self, collection: str, id: str) -> None:
        response, maybe_done = await self._send("DELETE", _document(collection, id))
        if response.status_code == 404 and maybe_done:
            await self.get_collection(collection)  # NotFound if the collection is what is missing
            return
        _decode(response)
