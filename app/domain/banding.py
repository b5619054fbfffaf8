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

#: First byte of every stored format-2 sketch (format 1 sketches are the bare 4 * num_perm bytes).
FORMAT2_TAG = b"\x02"
#: First byte of every stored format-3 sketch; its byte after the band keys is the bins' mode.
FORMAT3_TAG = b"\x03"
TAGS = {2: FORMAT2_TAG, 3: FORMAT3_TAG}


@dataclass(frozen=True)
class Sketches:
    """A batch's sketches. ``signatures``: the MinHash slots the band keys come from (and, in format 1,
    verification). ``bins``: format 2 estimate mode, (n, bins * 2 / 8) uint8; format 3, (n, 1 + bins / 4)
    uint8 (the mode byte, then the bins). ``sets``/``offsets``:
    format 2 exact mode, the sorted shingle hashes of document i are sets[offsets[i]:offsets[i + 1]]."""

    signatures: sketch.U32Array  # (n, num_perm)
    band_keys: sketch.U64Array  # (n, bands)
    empty: npt.NDArray[np.bool_]  # (n,)
    sketch_format: int = 1
    bins: npt.NDArray[np.uint8] | None = None
    sets: sketch.U32Array | None = None
    offsets: npt.NDArray[np.int64] | None = None
    #: Passage blobs (neardup.domain.fingerprints), one per document; () where passages are off.
    passages: tuple[bytes, ...] = ()

    def stored(self, i: int) -> bytes:
        """What the store keeps of document i (compared byte for byte to tell an unchanged retry)."""
        if self.sketch_format == 1:
            return bytes(self.signatures[i].astype("<u4", copy=False).tobytes())
        head = TAGS[self.sketch_format] + bytes(self.band_keys[i].astype("<u8", copy=False).tobytes())
        if self.bins is not None:
            return head + bytes(self.bins[i].tobytes())
        assert self.sets is not None and self.offsets is not None
        part = self.sets[self.offsets[i] : self.offsets[i + 1]]
        return head + bytes(part.astype("<u4", copy=False).tobytes())

    @property
    def signature_bytes(self) -> bytes:
        """Every document's ``stored`` bytes, one after the other."""
        if self.sketch_format == 1:
            return self.signatures.astype("<u4", copy=False).tobytes()
        n = len(self.empty)
        if self.bins is not None:  # all of one size: one (n, size) matrix, not a Python step per document
            keys = np.ascontiguousarray(self.band_keys, dtype="<u8").view(np.uint8).reshape(n, -1)
            tag = np.full((n, 1), TAGS[self.sketch_format][0], dtype=np.uint8)
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
    # Format 2 stores no slots: only the bands * rows that make its band keys are computed (the first
    # slots of the same hash family, so the keys are those of the full signature).
    slots = params.num_perm if params.sketch_format == 1 else max(16, -(-params.bands * params.rows // 8) * 8)
    options = {
        "num_perm": min(params.num_perm, slots),
        "shingle": params.shingle,
        "size": params.size,
        "seed": params.seed,
    }
    if params.sketch_format == 1:
        signatures = sketch.signatures(texts, threads=threads, **options)  # type: ignore[arg-type]
        empty = sketch.is_empty(signatures)
        keys = sketch.band_keys(signatures, params.bands, params.rows)
        return Sketches(signatures, keys, empty, passages=passages)
    if params.verify == "exact":
        signatures, sets, offsets = sketch.exact_sketches(texts, threads=threads, **options)  # type: ignore[arg-type]
        keys = sketch.band_keys(signatures, params.bands, params.rows, sketch_format=2)
        return Sketches(
            signatures, keys, sketch.is_empty(signatures), 2, sets=sets, offsets=offsets, passages=passages
        )
    if params.sketch_format == 3:
        signatures, bins = sketch.adaptive_sketches(texts, threads=threads, bins=params.bins, **options)  # type: ignore[arg-type]
    else:
        signatures, bins = sketch.estimate_sketches(texts, threads=threads, bins=params.bins, **options)  # type: ignore[arg-type]
    keys = sketch.band_keys(signatures, params.bands, params.rows, sketch_format=params.sketch_format)
    return Sketches(
        signatures, keys, sketch.is_empty(signatures), params.sketch_format, bins=bins, passages=passages
    )


def stored_band_keys(params: CollectionParams, signature: bytes) -> bytes:
    """Band keys of a stored sketch (to remove its entries); b'' for an empty or unreadable one."""
    if params.sketch_format != 1:
        size = 8 * params.bands
        if len(signature) < 1 + size or signature[:1] != TAGS[params.sketch_format]:
            return b""
        keys = signature[1 : 1 + size]
        return b"" if keys == bytes(size) else keys
    if len(signature) != 4 * params.num_perm:
        return b""
    matrix = np.frombuffer(signature, dtype="<u4").astype(np.uint32).reshape(1, -1)
    if bool(sketch.is_empty(matrix)[0]):
        return b""
    return sketch.band_keys(matrix, params.bands, params.rows).astype("<u8", copy=False).tobytes()


def readable(params: CollectionParams, signature: bytes) -> bool:
    """Whether a stored sketch has this collection's format and size (anything else is skipped)."""
    if params.sketch_format == 1:
        return len(signature) == 4 * params.num_perm
    fixed = 1 + 8 * params.bands
    if signature[:1] != TAGS[params.sketch_format]:
        return False
    if params.verify == "exact":
        return len(signature) >= fixed and (len(signature) - fixed) % 4 == 0
    if params.sketch_format == 3 and len(signature) > fixed and signature[fixed] not in ADAPTIVE_MODES:
        return False
    return len(signature) == params.stored_bytes


def signature_matrix(signatures: Sequence[bytes], num_perm: int) -> sketch.U32Array:
    """Stack raw stored format-1 signatures (all of ``num_perm`` slots) into a (n, num_perm) matrix."""
    if not signatures:
        return np.empty((0, num_perm), dtype=np.uint32)
    flat = np.frombuffer(b"".join(signatures), dtype="<u4").astype(np.uint32)
    return flat.reshape(len(signatures), num_perm)


#: Mode bytes of format 3's bins: 0 (dense, format 2's planes) or a sparse document's code width.
ADAPTIVE_MODES = frozenset({0, *range(3, 17)})

Scorer = Callable[[int, Sequence[int], float], list[float]]


def candidate_scorer(params: CollectionParams, batch: Sketches, fetched: Sequence[bytes]) -> Scorer:
    """``score(i, rows, floor)``: similarity of row i with each row of one pool of every sketch a
    candidate can point at, the batch's documents (rows 0..n-1) then the ``fetched`` stored sketches
    (already ``readable``; an empty batch scores stored sketches with each other). Format 1 and 2
    estimate: the estimate; exact mode: the exact Jaccard where it is >= floor, 0.0 where it is below."""
    fixed = 1 + 8 * params.bands
    if params.sketch_format == 1:
        matrix = np.concatenate([batch.signatures, signature_matrix(fetched, params.num_perm)])
        return lambda i, rows, floor: sketch.similarity(matrix[i], matrix, rows).tolist()
    if params.verify == "estimate":
        assert batch.bins is not None
        stride = batch.bins.shape[1]
        stored = np.frombuffer(b"".join(f[fixed:] for f in fetched), dtype=np.uint8).reshape(-1, stride)
        bins = np.concatenate([batch.bins, stored])
        b = params.bins
        if params.sketch_format == 3:
            return lambda i, rows, floor: sketch.adaptive_similarity(bins[i], bins, rows, bins=b).tolist()
        return lambda i, rows, floor: sketch.bbit_similarity(
            bins[i], bins, rows, bins=b, bits=sketch.BITS_PER_BIN
        ).tolist()
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
