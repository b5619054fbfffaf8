"""From texts to what the store keeps: signatures, 64-bit band keys and the empty-document mask, as
numpy arrays and the raw little-endian bytes the scripts read. CPU work, run off the event loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neardup import sketch
from neardup.domain import fingerprints
from neardup.domain.models import CollectionParams


@dataclass(frozen=True)
class Sketches:
    signatures: sketch.U32Array  # (n, num_perm)
    band_keys: sketch.U64Array  # (n, bands)
    empty: npt.NDArray[np.bool_]  # (n,)
    #: Passage blobs (neardup.domain.fingerprints), one per document; () where passages are off.
    passages: tuple[bytes, ...] = ()

    @property
    def signature_bytes(self) -> bytes:
        return self.signatures.astype("<u4", copy=False).tobytes()

    @property
    def band_key_bytes(self) -> bytes:
        return self.band_keys.astype("<u8", copy=False).tobytes()

    @property
    def empty_flags(self) -> bytes:
        return (self.empty.view(np.uint8) + ord("0")).tobytes()


def sketch_texts(params: CollectionParams, texts: Sequence[str], threads: int = 1) -> Sketches:
    signatures = sketch.signatures(
        texts,
        num_perm=params.num_perm,
        shingle=params.shingle,
        size=params.size,
        seed=params.seed,
        threads=threads,
    )
    empty = sketch.is_empty(signatures)
    passages = tuple(fingerprints.blob(t) for t in texts) if params.passages else ()
    return Sketches(signatures, sketch.band_keys(signatures, params.bands, params.rows), empty, passages)


def stored_band_keys(params: CollectionParams, signature: bytes) -> bytes:
    """Band keys of a stored signature (to remove its entries); b'' for an empty or unreadable one."""
    if len(signature) != 4 * params.num_perm:
        return b""
    matrix = np.frombuffer(signature, dtype="<u4").astype(np.uint32).reshape(1, -1)
    if bool(sketch.is_empty(matrix)[0]):
        return b""
    return sketch.band_keys(matrix, params.bands, params.rows).astype("<u8", copy=False).tobytes()


def signature_matrix(signatures: Sequence[bytes], num_perm: int) -> sketch.U32Array:
    """Stack raw stored signatures (all of ``num_perm`` slots) into a (n, num_perm) uint32 matrix."""
    if not signatures:
        return np.empty((0, num_perm), dtype=np.uint32)
    flat = np.frombuffer(b"".join(signatures), dtype="<u4").astype(np.uint32)
    return flat.reshape(len(signatures), num_perm)


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
