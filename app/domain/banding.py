"""From texts to what the store keeps: signatures, 64-bit band keys and the empty-document mask, as
numpy arrays and the raw little-endian bytes the scripts read. CPU work, run off the event loop."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neardup import sketch
from neardup.domain import fingerprints
from neardup.domain.models import CollectionParams

#: The stored sketch of a document: a tag byte naming its kind, its band keys (8 bytes each, little-endian)
#: and what verification reads: for ``verify="estimate"`` a mode byte and the bins
#: (``sketch.adaptive_sketches``), for ``verify="exact"`` the sorted 32-bit shingle hashes, 4 bytes each.
#: This module is the one definition of those bytes (golden vectors: tests/native and
#: tests/storage/test_layout_golden.py).
ESTIMATE_TAG = b"\x03"
EXACT_TAG = b"\x02"
#: Mixed into each band key's hash, per kind of sketch.
ESTIMATE_SALT = 0x6E6431642D763300
EXACT_SALT = 0x6E6431642D763200
#: Mode bytes of the estimate sketch's bins: 0 (dense: two bit planes) or a short document's code width.
ADAPTIVE_MODES = frozenset({0, *range(3, 17)})


def _tag(params: CollectionParams) -> bytes:
    return EXACT_TAG if params.verify == "exact" else ESTIMATE_TAG


@dataclass(frozen=True)
class Sketches:
    """A batch's sketches. ``signatures``: the MinHash slots the band keys come from (not stored).
    ``bins``: estimate mode, (n, 1 + bins / 4) uint8 (the mode byte, then the bins). ``sets``/``offsets``:
    exact mode, the sorted shingle hashes of document i are sets[offsets[i]:offsets[i + 1]]."""

    signatures: sketch.U32Array  # (n, rows * bands rounded up)
    band_keys: sketch.U64Array  # (n, bands)
    empty: npt.NDArray[np.bool_]  # (n,)
    tag: bytes
    bins: npt.NDArray[np.uint8] | None = None
    sets: sketch.U32Array | None = None
    offsets: npt.NDArray[np.int64] | None = None
    #: Passage blobs (neardup.domain.fingerprints), one per document; () where passages are off.
    passages: tuple[bytes, ...] = ()

    def stored(self, i: int) -> bytes:
        """What the store keeps of document i (compared byte for byte to tell an unchanged retry)."""
        head = self.tag + bytes(self.band_keys[i].astype("<u8", copy=False).tobytes())
        if self.bins is not None:
            return head + bytes(self.bins[i].tobytes())
        assert self.sets is not None and self.offsets is not None
        part = self.sets[self.offsets[i] : self.offsets[i + 1]]
        return head + bytes(part.astype("<u4", copy=False).tobytes())

    @property
    def signature_bytes(self) -> bytes:
        """Every document's ``stored`` bytes, one after the other."""
        n = len(self.empty)
        if self.bins is not None:  # all of one size: one (n, size) matrix, not a Python step per document
            keys = np.ascontiguousarray(self.band_keys, dtype="<u8").view(np.uint8).reshape(n, -1)
            tag = np.full((n, 1), self.tag[0], dtype=np.uint8)
            return np.hstack([tag, keys, self.bins]).tobytes()
        return b"".join(self.stored(i) for i in range(n))

    @property
    def signature_offsets(self) -> list[int] | None:
        """Where each stored sketch starts in ``signature_bytes`` (n + 1 entries) when they differ in
        size (exact mode); None when they are all of one size."""
        if self.sets is None or self.offsets is None:
            return None
        fixed = 1 + 8 * self.band_keys.shape[1]
        return [fixed * i + 4 * int(o) for i, o in enumerate(self.offsets.tolist())]

    @property
    def band_key_bytes(self) -> bytes:
        return self.band_keys.astype("<u8", copy=False).tobytes()

    @property
    def empty_flags(self) -> bytes:
        return (self.empty.view(np.uint8) + ord("0")).tobytes()


def sketch_texts(params: CollectionParams, texts: Sequence[str], threads: int = 1) -> Sketches:
    passages = tuple(fingerprints.blob(t) for t in texts) if params.passages else ()
    # Only the bands * rows slots that make the band keys are computed (the first slots of the hash
    # family, so the keys are those of the full signature); nothing else of the signature is stored.
    slots = max(16, -(-params.bands * params.rows // 8) * 8)
    options = {
        "num_perm": min(params.num_perm, slots),
        "shingle": params.shingle,
        "size": params.size,
        "seed": params.seed,
    }
    if params.verify == "exact":
        signatures, sets, offsets = sketch.exact_sketches(texts, threads=threads, **options)  # type: ignore[arg-type]
        keys = sketch.band_keys(signatures, params.bands, params.rows, salt=EXACT_SALT)
        return Sketches(
            signatures, keys, sketch.is_empty(signatures), EXACT_TAG, sets=sets, offsets=offsets,
            passages=passages,
        )  # fmt: skip
    signatures, bins = sketch.adaptive_sketches(texts, threads=threads, bins=params.bins, **options)  # type: ignore[arg-type]
    keys = sketch.band_keys(signatures, params.bands, params.rows, salt=ESTIMATE_SALT)
    return Sketches(signatures, keys, sketch.is_empty(signatures), ESTIMATE_TAG, bins=bins, passages=passages)


def stored_band_keys(params: CollectionParams, signature: bytes) -> bytes:
    """Band keys of a stored sketch (to remove its entries); b'' for an empty or unreadable one."""
    size = 8 * params.bands
    if len(signature) < 1 + size or signature[:1] != _tag(params):
        return b""
    keys = signature[1 : 1 + size]
    return b"" if keys == bytes(size) else keys


def readable(params: CollectionParams, signature: bytes) -> bool:
    """Whether a stored sketch has this collection's kind and size (anything else is skipped)."""
    fixed = 1 + 8 * params.bands
    if signature[:1] != _tag(params):
        return False
    if params.verify == "exact":
        return len(signature) >= fixed and (len(signature) - fixed) % 4 == 0
    if len(signature) > fixed and signature[fixed] not in ADAPTIVE_MODES:
        return False
    return len(signature) == params.stored_bytes


Scorer = Callable[[int, Sequence[int], float], list[float]]


def candidate_scorer(params: CollectionParams, batch: Sketches, fetched: Sequence[bytes]) -> Scorer:
    """``score(i, rows, floor)``: similarity of row i with each row of one pool of every sketch a
    candidate can point at, the batch's documents (rows 0..n-1) then the ``fetched`` stored sketches
    (already ``readable``; an empty batch scores stored sketches with each other). Estimate mode: the
    estimate; exact mode: the exact Jaccard where it is >= floor, 0.0 where it is below."""
    fixed = 1 + 8 * params.bands
    if params.verify == "estimate":
        assert batch.bins is not None
        stride = batch.bins.shape[1]
        stored = np.frombuffer(b"".join(f[fixed:] for f in fetched), dtype=np.uint8).reshape(-1, stride)
        bins = np.concatenate([batch.bins, stored])
        b = params.bins
        return lambda i, rows, floor: sketch.adaptive_similarity(bins[i], bins, rows, bins=b).tolist()
    assert batch.sets is not None and batch.offsets is not None
    sizes = np.array([(len(f) - fixed) // 4 for f in fetched], dtype=np.int64)
    offsets = np.concatenate([batch.offsets, batch.offsets[-1] + np.cumsum(sizes)]).astype(np.int64)
    flat = np.concatenate(
        [batch.sets, np.frombuffer(b"".join(f[fixed:] for f in fetched), dtype="<u4").astype(np.uint32)]
    )
    return lambda i, rows, floor: sketch.exact_similarity(
        flat[offsets[i] : offsets[i + 1]], flat, offsets, rows, floor=floor
    ).tolist()


def earlier_in_batch(band_keys: sketch.U64Array, empty: npt.NDArray[np.bool_]) -> dict[int, set[int]]:
    """For each document i, the earlier documents j < i of the batch sharing a band key with it."""
    n, bands = band_keys.shape
    if n < 2:
        return {}
    flat = band_keys.ravel()
    owner = np.repeat(np.arange(n), bands)
    keep = ~np.repeat(empty, bands)
    flat, owner = flat[keep], owner[keep]
    order = np.lexsort((owner, flat))
    flat, owner = flat[order], owner[order]
    same = np.flatnonzero(flat[1:] == flat[:-1])
    out: dict[int, set[int]] = {}
    if same.size == 0:
        return out
    # Runs of equal keys: consecutive positions in ``same`` (only real collisions get here).
    for run in np.split(same, np.flatnonzero(np.diff(same) != 1) + 1):
        members = sorted(set(owner[run[0] : run[-1] + 2].tolist()))
        for a, later in enumerate(members):
            if a:
                out.setdefault(later, set()).update(members[:a])
    return out
