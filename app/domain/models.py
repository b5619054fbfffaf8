"""Value types of the domain: collection parameters (validated, fixed at creation) and what a check,
query or fetch returns. Plain frozen dataclasses: the API layer turns them into its own models."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from neardup import sketch
from neardup.domain.errors import InvalidInput, InvalidParameters

Shingle = Literal["word", "char"]
Verify = Literal["estimate", "exact"]
Metadata = dict[str, Any]

#: Collection names go into Redis key names (inside ``{...}`` hash tags and between ":"), so braces,
#: colons and spaces are out. The one definition of the rule: the API's schema pattern, the checks of
#: the domain and of the API, and their message all come from these two lines.
COLLECTION_NAME_RULE = "1-64 characters of letters, digits, '_', '.' or '-', starting with a letter or digit"
COLLECTION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # ECMA 262 (JSON Schema): $ is the very end
COLLECTION_NAME = re.compile(COLLECTION_NAME_PATTERN[1:-1])  # used with fullmatch: "a\n" must not pass
#: Longest document id, in UTF-8 bytes (URLs fit). Ids live in compact hashes whose values stay under
#: the server's hash-max-listpack-value (600 on the embedded server).
MAX_ID_BYTES = 512
MAX_SHINGLE_SIZE = sketch.MAX_SHINGLE_SIZE
#: Bands are chosen for recall at the threshold (``sketch.recall_bands``): P(t) of at least this, with
#: at most num_perm // 5 bands; verification on the stored sketch then removes the extra candidates. At
#: t = 0.8, k = 128: b=16, r=6, P(0.8) = 0.992 (0.995 took 18 bands: 12% more band work per document in
#: Valkey and fewer bins in the byte budget, for 0.4% more pairs at t).
RECALL_AT_THRESHOLD = 0.99
#: Bytes the estimate sketch leaves unused of its budget, 4 * num_perm bytes (what num_perm 32-bit MinHash
#: slots would take), for the bucket entries of its bands: at num_perm 128 and t = 0.8 (16 bands, 1,408
#: bins) a document stays within the 1,000-byte memory budget (tests/storage/test_memory.py).
MEMORY_RESERVE = 16


def default_bins(num_perm: int, bands: int) -> int:
    """Bins of an estimate sketch: as many 2-bit bins (a multiple of 64, at most 4096) as fit beside the
    tag byte, the band keys and the mode byte in 4 * num_perm bytes (less ``MEMORY_RESERVE``)."""
    room = 4 * num_perm - MEMORY_RESERVE - 2 - 8 * bands
    return max(64, min(4096, room * 8 // sketch.BITS_PER_BIN // 64 * 64))


#: Bounds of the optional retention and size limit of a collection.
MAX_TTL_SECONDS = 10 * 365 * 86400
MAX_DOCUMENTS = 2**31
#: Largest capacity hint: 2^27 documents already size a band table of 2^27 groups at 16 bands.
MAX_EXPECTED_DOCUMENTS = 2**27
#: Longest ``site_field`` name, and longest site name kept (longer ones are cut).
MAX_SITE_FIELD = 128
MAX_SITE_BYTES = 256


@dataclass(frozen=True)
class CollectionParams:
    """Parameters of one collection. Build with :meth:`create` (fills ``bands``/``rows`` from the
    threshold); direct construction validates too but needs every field.

    - ``threshold``: estimated Jaccard at or above which two documents are near-duplicates (0 < t < 1).
    - ``num_perm``: signature length (16..1024); memory and CPU grow with it, the estimate's error shrinks.
    - ``shingle``/``size``: features are word ``size``-grams or character ``size``-grams.
    - ``bands``/``rows``: LSH banding, ``bands * rows <= num_perm``; two documents become candidates
      when they agree on all ``rows`` slots of at least one band.
    - ``seed``: hash family; part of the stored format.
    - ``ttl_seconds``: optional retention; a document stops matching this long after its insertion
      and its entries are reclaimed by later writes.
    - ``max_documents``: optional bound; only the most recent ``max_documents`` insertions match (a
      replaced or deleted document still used its place in that window), older ones are reclaimed.
    - ``verify``: what is stored per document to verify candidates (part of the stored format; fixed
      at creation): ``"estimate"`` keeps ``bins`` one-permutation bins of 2 bits, or for a short
      document (at most bins / 4 distinct shingles) every shingle in the same bytes, and decides on
      the estimated Jaccard (``sketch.adaptive_sketches``); ``"exact"`` keeps the sorted 32-bit hashes
      of every shingle and decides on the exact Jaccard of the shingle hash sets.
    - ``passages``: also index every stored document for passage search (which stored texts contain
      passages of a text, where; docs/design.md, "Passages"). Costs memory per stored document.
    - ``expected_documents``: optional capacity hint; the store sizes its band table for that many
      documents at creation, so it need not grow by splitting while the collection stays below it
      (about a third less server work per insertion; a collection far smaller than its hint uses
      more memory per document). Changes no result.
    - ``site_field``: optional metadata field naming each document's site (its host when the value is
      an absolute URL, see :func:`site_of`); the collection then counts, per pair of sites, the pages
      of one with a verified near-duplicate on the other (mirror detection, docs/design.md "Sites").
      Documents without the field belong to no site.
    """

    name: str
    threshold: float
    num_perm: int
    shingle: Shingle
    size: int
    bands: int
    rows: int
    seed: int = sketch.DEFAULT_SEED
    ttl_seconds: int | None = None
    max_documents: int | None = None
    expected_documents: int | None = None
    verify: Verify = "estimate"
    bins: int = 0
    passages: bool = False
    site_field: str | None = None

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def create(
        cls,
        name: str,
        threshold: float = 0.8,
        num_perm: int = 128,
        shingle: Shingle = "word",
        size: int = 5,
        bands: int | None = None,
        rows: int | None = None,
        seed: int = sketch.DEFAULT_SEED,
        ttl_seconds: int | None = None,
        max_documents: int | None = None,
        expected_documents: int | None = None,
        verify: Verify = "estimate",
        passages: bool = False,
        site_field: str | None = None,
    ) -> CollectionParams:
        """Validate and fill bands/rows (``sketch.optimal_bands``) when not given; raises
        :class:`InvalidParameters` with a message saying what to change."""
        _check_name(name)
        _check_threshold(threshold)
        _check_num_perm(num_perm)
        _check_verify(verify)
        if (bands is None) != (rows is None):
            # Given one alone, derive the other so the banding uses as many slots as it can.
            if bands is not None:
                _check_positive("bands", bands)
                rows = max(1, num_perm // bands)
            else:
                assert rows is not None
                _check_positive("rows", rows)
                bands = max(1, num_perm // rows)
        if bands is None or rows is None:
            bands, rows = sketch.recall_bands(
                float(threshold), num_perm, RECALL_AT_THRESHOLD, max_bands(num_perm)
            )
        bins = default_bins(num_perm, bands) if verify == "estimate" else 0
        return cls(
            name,
            float(threshold),
            num_perm,
            shingle,
            size,
            bands,
            rows,
            seed,
            ttl_seconds,
            max_documents,
            expected_documents,
            verify,
            bins,
            passages,
            site_field,
        )

    def to_dict(self) -> dict[str, Any]:
        """The parameters as the registry entry keeps them (every field)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectionParams:
        """From a registry entry's parameters (validated: a value this release rejects raises)."""
        return cls(**data)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the stored sketch of a document: the tag byte and the band keys, then the estimate
        sketch's mode byte and bins; exact mode adds 4 bytes per distinct shingle to this fixed part."""
        if self.verify == "exact":
            return 1 + 8 * self.bands
        return 1 + 8 * self.bands + 1 + self.bins // 4

    def candidate_probability(self, similarity: float) -> float:
        """The S-curve at ``similarity``: chance that a pair of that Jaccard becomes a candidate."""
        return float(sketch.collision_probability(similarity, self.bands, self.rows))


@dataclass(frozen=True)
class CollectionInfo:
    """A collection's parameters and its current number of documents."""

    params: CollectionParams
    documents: int


@dataclass(frozen=True)
class Document:
    """A document to check or store. ``id`` is the client's key (1..MAX_ID_BYTES UTF-8 bytes); ``metadata`` is
    any JSON object, returned with matches and fetches."""

    id: str
    text: str
    metadata: Metadata | None = None


@dataclass(frozen=True)
class Match:
    """A verified match: ``similarity`` is the estimated Jaccard from the full signatures."""

    id: str
    similarity: float
    metadata: Metadata | None = None


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking one document. ``matches``: verified matches among documents inserted
    before this one, best first. ``duplicate_of``: the earliest inserted of them (None if no match).
    ``inserted``: whether the document is now stored (False when checked with insert=False)."""

    id: str
    duplicate: bool
    duplicate_of: str | None
    matches: list[Match] = field(default_factory=list)
    inserted: bool = False


@dataclass(frozen=True)
class StoredDocument:
    """A stored document as fetched: its metadata and when it was (last) inserted, Unix seconds."""

    id: str
    metadata: Metadata | None
    inserted_at: float


# --- validation -------------------------------------------------------------------------------------


def is_collection_name(name: object) -> bool:
    return isinstance(name, str) and COLLECTION_NAME.fullmatch(name) is not None


def collection_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a collection, or None."""
    if is_collection_name(name):
        return None
    shown = name[:80] if isinstance(name, str) else name
    return f"collection name must be {COLLECTION_NAME_RULE}; got {shown!r}"


def _check_name(name: object) -> None:
    if problem := collection_name_problem(name):
        raise InvalidParameters(problem)


def _check_threshold(threshold: object) -> None:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not math.isfinite(threshold)
        or not 0.0 < threshold < 1.0
    ):
        raise InvalidParameters(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")


def _check_num_perm(num_perm: object) -> None:
    if isinstance(num_perm, bool) or not isinstance(num_perm, int):
        raise InvalidParameters(f"num_perm must be an integer, got {num_perm!r}")
    if not sketch.MIN_PERM <= num_perm <= sketch.MAX_PERM or num_perm % 8:
        # Signatures are processed 8 slots at a time (the SIMD kernels and their tails rely on it).
        raise InvalidParameters(
            f"num_perm must be a multiple of 8 from {sketch.MIN_PERM} to {sketch.MAX_PERM}, got {num_perm}"
        )


def max_bands(num_perm: int) -> int:
    """Most bands chosen from the threshold: the band keys stay within 40% of the stored bytes."""
    return max(1, num_perm // 5)


def _check_verify(verify: object) -> None:
    if verify not in ("estimate", "exact"):
        raise InvalidParameters(f"verify must be 'estimate' or 'exact', got {verify!r}")


def _check_positive(label: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameters(f"{label} must be a positive integer, got {value!r}")


def _validate(p: CollectionParams) -> None:
    _check_name(p.name)
    _check_threshold(p.threshold)
    _check_num_perm(p.num_perm)
    if p.shingle not in ("word", "char"):
        raise InvalidParameters(f"shingle must be 'word' or 'char', got {p.shingle!r}")
    _check_positive("size", p.size)
    if p.size > MAX_SHINGLE_SIZE:
        raise InvalidParameters(f"size must be at most {MAX_SHINGLE_SIZE}, got {p.size}")
    _check_positive("bands", p.bands)
    _check_positive("rows", p.rows)
    if p.bands * p.rows > p.num_perm:
        raise InvalidParameters(
            f"bands*rows = {p.bands * p.rows} exceeds num_perm = {p.num_perm}: "
            "lower bands or rows, or raise num_perm"
        )
    if isinstance(p.seed, bool) or not isinstance(p.seed, int) or not 0 <= p.seed < 2**64:
        raise InvalidParameters(f"seed must be an integer from 0 to 2**64-1, got {p.seed!r}")
    _check_verify(p.verify)
    if p.verify == "estimate":
        if isinstance(p.bins, bool) or not isinstance(p.bins, int) or not 64 <= p.bins <= 4096 or p.bins % 64:
            raise InvalidParameters(f"bins must be a multiple of 64 from 64 to 4096, got {p.bins!r}")
    elif p.bins != 0:
        raise InvalidParameters("bins is only for verify='estimate'")
    if p.ttl_seconds is not None:
        _check_positive("ttl_seconds", p.ttl_seconds)
        if p.ttl_seconds > MAX_TTL_SECONDS:
            raise InvalidParameters(
                f"ttl_seconds must be at most {MAX_TTL_SECONDS} (10 years), got {p.ttl_seconds}"
            )
    if p.max_documents is not None:
        _check_positive("max_documents", p.max_documents)
        if p.max_documents > MAX_DOCUMENTS:
            raise InvalidParameters(f"max_documents must be at most {MAX_DOCUMENTS}, got {p.max_documents}")
    if not isinstance(p.passages, bool):
        raise InvalidParameters(f"passages must be true or false, got {p.passages!r}")
    if p.expected_documents is not None:
        _check_positive("expected_documents", p.expected_documents)
        if p.expected_documents > MAX_EXPECTED_DOCUMENTS:
            raise InvalidParameters(
                f"expected_documents must be at most {MAX_EXPECTED_DOCUMENTS}, got {p.expected_documents}"
            )
    if p.site_field is not None and (
        not isinstance(p.site_field, str) or not 1 <= len(p.site_field) <= MAX_SITE_FIELD
    ):
        raise InvalidParameters(
            f"site_field must be the name of a metadata field, 1 to {MAX_SITE_FIELD} characters, "
            f"got {p.site_field!r}"
        )


def site_of(metadata: Metadata | None, site_field: str | None) -> str | None:
    """The site a document belongs to: its metadata's ``site_field`` value; the lower-cased host when
    that value is an absolute URL (``https://Example.org/a`` -> ``example.org``), else the value itself
    (a string, or an integer as decimal), cut to MAX_SITE_BYTES bytes of UTF-8. None without the field,
    or when it is empty or not a string or integer."""
    if site_field is None or not metadata:
        return None
    value = metadata.get(site_field)
    if isinstance(value, str):
        return _site_of_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


@lru_cache(maxsize=65_536)
def _site_of_text(value: str) -> str | None:
    # Cached: a check derives the site of every match it verifies, and stored pages recur as matches.
    text = value.strip()
    at = text.find("://")
    if at >= 0:
        host = _url_host(text[: _authority_end(text, at + 3)])
        if host is not None:
            text = host
    if not text:
        return None
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_SITE_BYTES:
        text = raw[:MAX_SITE_BYTES].decode("utf-8", "ignore")
    return text


def _authority_end(text: str, start: int) -> int:
    """Where urlsplit ends the authority (netloc) of ``text``, searching from ``start``: at the first
    ``/``, ``?`` or ``#``. The host depends on nothing after it."""
    end = len(text)
    for delimiter in "/?#":
        at = text.find(delimiter, start, end)
        if at >= 0:
            end = at
    return end


@lru_cache(maxsize=65_536)
def _url_host(head: str) -> str | None:
    """The host of a URL cut after its authority (``https://Example.org:80``), lower-cased, without
    trailing dots; None when urlsplit finds none. Cached on that head, which the pages of one site
    share: urlsplit of every new page's whole URL was most of the service's cost of counting sites."""
    try:
        host = urlsplit(head).hostname  # lower-cased already
    except ValueError:
        return None
    return host.rstrip(".") if host else None


def check_document(doc: Document) -> None:
    """Raise :class:`InvalidInput` if the document cannot be stored as given."""
    if not isinstance(doc.id, str) or not doc.id:
        raise InvalidInput("document id must be a non-empty string")
    if len(doc.id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise InvalidInput(f"document id must be at most {MAX_ID_BYTES} bytes of UTF-8, got {doc.id[:80]!r}")
    if not isinstance(doc.text, str):
        raise InvalidInput(f"text of document {doc.id!r} must be a string")
    if doc.metadata is not None and not isinstance(doc.metadata, dict):
        raise InvalidInput(f"metadata of document {doc.id!r} must be a JSON object or null")


def encode_metadata(doc_id: str, metadata: Metadata | None) -> bytes:
    """The metadata's JSON as it is stored (``neardup.storage.records``); b"" when there is none."""
    if metadata is None:
        return b""
    try:
        return orjson.dumps(metadata)
    except TypeError as error:
        raise InvalidInput(f"metadata of document {doc_id!r} is not JSON-serializable: {error}") from None
