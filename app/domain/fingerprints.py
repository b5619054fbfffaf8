"""Passage fingerprints of a text and the stored passage blob (docs/design.md, "Passages").

A text's words (with their code point offsets), the 64-bit hash of every word ``K``-gram and the
k-grams a stored document selects, every ``W``-th from a phase its k-grams give, come from the native
core (``native/passages.cpp``). Guarantee: any ``W`` consecutive k-grams of a document hold a selected
one, and a search reads the postings of every k-gram of the text, so a stored document sharing a run of
at least ``GUARANTEE_WORDS`` = W + K - 1 words with the text (after lower-casing; punctuation and white
space are not words) is always a candidate.

Passage blob (little-endian), what the store keeps per document, byte for byte as the service sends it::

    u8 3 | varint words | varint m | m x 4-byte key | m x u8 word step | m x varint start step
    | m x varint length | ceil(words / 2) x u8 word nibbles

``3``: BLOB_FORMAT, which a reader checks first; ``key``: a selected k-gram's hash, its low 32 bits
(KEY_BYTES): what the passage index is keyed by, the only part the scripts read; ``word step``: its
first word minus the previous selected one's (the first: its first word; sampling keeps steps <= W);
``start step``: its first code point in the text as stored minus the previous selected k-gram's, and
``length``: its code points, each an unsigned LEB128 varint (7 bits a byte, low first, the high bit set
on every byte but the last); ``nibble``: the top 4 bits of each word's hash (word 2i in the low 4 bits
of byte i, word 2i+1 in the high), so a passage's edges are found word by word (a word of another text
agrees by chance one time in 16). ``words`` and ``m`` are varints too.

Keys are 32 bits everywhere: in the index (its postings are packed records, see neardup.storage.keys),
in the blob as stored, and where a text's k-grams are matched with a source's (:func:`key_values`). A
text's key meets an unrelated stored k-gram's with probability 2^-32 each, about one spurious posting
read per search of 1,500 words among the ~2.4 million keys of 100,000 documents, which costs a read and
never a span (alignment needs the words around a hit to agree). The store keeps the blob as sent, whole
keys included, because its keys are how a document's postings are found again when it goes: the whole
key names its index group at any level (and is what an index on a Redis Cluster needs to find it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neardup import _native

#: Words per k-gram, and the sampling's stride: one k-gram in W is selected.
K = 5
W = 21
#: A run of this many words a stored document shares with a text always holds one of its selected k-grams.
GUARANTEE_WORDS = W + K - 1
#: The first byte of every passage blob.
BLOB_FORMAT = 3
#: Bytes of a fingerprint key in the passage index and in the blob (as sent and as stored).
KEY_BYTES = 4

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Features:
    """``starts``/``ends``: code points of each word; ``grams``: hash of the k-gram starting at each word
    (``len(starts) - K + 1`` of them, none below K words); ``selected``: sampled k-gram indices;
    ``nibbles``: the top 4 bits of each word's hash."""

    starts: U32
    ends: U32
    grams: U64
    selected: U32
    nibbles: npt.NDArray[np.uint8]

    @property
    def keys(self) -> U64:
        """The key of every k-gram: its hash."""
        return self.grams


def features(text: str) -> Features:
    starts, ends, grams, selected, nibbles = _native.passage_features(text, K, W)
    return Features(starts, ends, grams, selected, nibbles)


def key_values(keys: U64) -> U64:
    """K-gram hashes as the index and a blob hold them, the low KEY_BYTES bytes of each: what a text's
    k-grams are matched with a source's on."""
    low: U64 = keys & np.uint64((1 << (8 * KEY_BYTES)) - 1)
    return low


def wanted(keys: U64) -> bytes:
    """The distinct keys of a text as the passage index is keyed (:func:`key_bytes`), for a search."""
    return key_bytes(np.unique(key_values(keys)))


def key_bytes(keys: U64) -> bytes:
    """Keys as the passage index holds them: the low KEY_BYTES bytes of each, little-endian."""
    raw = np.ascontiguousarray(keys, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :KEY_BYTES].tobytes()


def unpack_keys(raw: bytes) -> U64:
    """Keys as :func:`key_bytes` wrote them."""
    keys: U64 = np.frombuffer(raw, "<u4", len(raw) // KEY_BYTES).astype(np.uint64)
    return keys


def blob(text: str) -> bytes:
    """The passage blob of a text, straight from the native core (the same bytes as
    ``pack(features(text))``; b"": fewer than K words, nothing to index)."""
    return bytes(_native.passage_blob(text, K, W))


def _varints(values: npt.NDArray[np.int64] | list[int]) -> bytes:
    out = bytearray()
    for v in values.tolist() if isinstance(values, np.ndarray) else values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def pack(f: Features) -> bytes:
    """The passage blob of a document (b"": fewer than K words, nothing to index)."""
    sel = f.selected
    if len(sel) == 0:
        return b""
    steps = np.diff(sel, prepend=np.uint32(0)).astype(np.uint8)
    starts = f.starts[sel].astype(np.int64)
    lengths = (f.ends[sel + (K - 1)] - f.starts[sel]).astype(np.int64)
    return b"".join(
        (
            bytes([BLOB_FORMAT]),
            _varints([len(f.starts), len(sel)]),
            key_bytes(f.keys[sel]),
            steps.tobytes(),
            _varints(np.diff(starts, prepend=0)),
            _varints(lengths),
            _pack_nibbles(f.nibbles),
        )
    )


def _pack_nibbles(nibbles: npt.NDArray[np.uint8]) -> bytes:
    padded = np.zeros(len(nibbles) + len(nibbles) % 2, np.uint8)
    padded[: len(nibbles)] = nibbles
    return (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8).tobytes()


@dataclass(frozen=True)
class Source:
    """A stored document's passage blob, decoded: its word count and, per selected k-gram, its key
    (:func:`key_values`), first word, and code point start and end in the stored text."""

    words: int
    keys: U64
    word: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    nibbles: npt.NDArray[np.uint8]


def header(blob: bytes) -> tuple[int, int, int]:
    """(words, m, offset of the keys) of a passage blob; ValueError for another format or a header cut
    short."""
    if not blob:
        raise ValueError("truncated passage blob")
    if blob[0] != BLOB_FORMAT:
        raise ValueError(f"unknown passage blob format {blob[0]}")
    counts, at = [], 1
    for _ in range(2):  # varints: 7 bits a byte, low first
        value = shift = 0
        while True:
            if at >= len(blob) or shift > 28:
                raise ValueError("truncated passage blob")
            byte = blob[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        counts.append(value)
    return counts[0], counts[1], at


def unpack(blob: bytes) -> Source:
    """A blob as stored (the bytes :func:`blob` gives); ValueError for another format, a blob cut short
    or one longer than its contents."""
    words, m, at = header(blob)
    if len(blob) < at + m * (KEY_BYTES + 1):
        raise ValueError("truncated passage blob")
    keys = unpack_keys(blob[at : at + m * KEY_BYTES])
    at += m * KEY_BYTES
    steps = np.frombuffer(blob, np.uint8, m, at)
    at += m
    start, length, at = _native.passage_positions(blob, m, at)
    if len(blob) < at + (words + 1) // 2:
        raise ValueError("truncated passage blob")
    if len(blob) != at + (words + 1) // 2:
        raise ValueError("a passage blob longer than its contents")
    packed = np.frombuffer(blob, np.uint8, (words + 1) // 2, at)
    nibbles = np.empty(2 * len(packed), np.uint8)
    nibbles[0::2], nibbles[1::2] = packed & 15, packed >> 4
    return Source(
        words, keys, np.cumsum(steps, dtype=np.int64), start,
        start + length, nibbles[:words],
    )  # fmt: skip
