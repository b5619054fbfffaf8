"""Passage fingerprints of a text and the stored passage blob (docs/design.md, "Passages").

A text's words (with their code point offsets), the 64-bit hash of every word ``K``-gram and the
k-grams winnowing selects with a window of ``W`` k-grams come from the native core
(``native/passages.cpp``). Guarantee (winnowing): two texts that share a run of at least
``GUARANTEE_WORDS`` = W + K - 1 words (after lower-casing; punctuation and white space are not words)
share at least one selected fingerprint, so a verbatim passage that long is always a candidate.

Passage blob (little-endian), what the store keeps per document; a collection keeps one format for
life (``CollectionParams.passage_format``: 3 for collections created since it exists, 2 or 1 before)::

    format 1: u8 1 | u32 words | u32 m | m x 8-byte key | m x u8 word step | m x u32 start
              | m x u16 length | ceil(words / 2) x u8 word nibbles
    format 2: u8 2 | u32 words | u32 m | m x 5-byte key | m x u8 word step | m x varint start step
              | m x varint length | ceil(words / 2) x u8 word nibbles
    format 3: u8 3 | varint words | varint m | m x 4-byte key | then as format 2; kept by the store
              with 3-byte keys (:func:`stored`)

``key``: a selected k-gram's hash, all 64 bits (format 1), the low 40 (format 2) or the low 32 (format
3): what the passage index is keyed by, the only part the scripts read; ``word step``: its first word
minus the previous selected one's
(the first: its first word; winnowing keeps steps <= W); ``start``: its first code point in the text as
stored (format 2: minus the previous selected k-gram's, as an unsigned LEB128 varint: 7 bits a byte, low
first, the high bit set on every byte but the last); ``length``: its code points (format 1: capped at
65,535; format 2: a varint); ``nibble``: the top 4 bits of each word's hash (word 2i in the low 4 bits of
byte i, word 2i+1 in the high), so a passage's edges are found word by word (a word of another text
agrees by chance one time in 16).

Format 2 is ~6 bytes per selected k-gram smaller: starts and lengths are mostly one byte, and 40-bit keys
still tell apart the k-grams of ~10^6 documents (two distinct k-grams share a key with probability
2^-40: ~8 pairs among 4 million keys, each costing one spurious posting read, never a span: alignment
needs the words around a hit to agree). Format 3's index is keyed by 32 bits (its postings are packed
records, see neardup.storage.keys): a text's key meets an unrelated stored k-gram's with probability
2^-32 each, about one spurious posting read per search of 1,500 words among the ~2.4 million keys of
100,000 documents, which again costs a read and never a span; its stored blobs keep the low 24 bits of
each key, enough to pair a source's ~30 selected k-grams with a text's ~1,500 (a spurious pair once in
~360 sources, and one hit never makes a span without the words around it agreeing) and to name the
key's index group (the index stops splitting at 2^24 groups, ~4 billion postings).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from neardup import _native

#: Words per k-gram, and k-grams per winnowing window.
K = 5
W = 21
#: A shared run of this many words always shares a selected fingerprint.
GUARANTEE_WORDS = W + K - 1
#: The passage format new collections get; every format here stays readable.
BLOB_VERSION = 3
BLOB_VERSIONS = (1, 2, 3)
#: Bytes of a fingerprint key in the passage index and the blob the service sends, per format.
KEY_BYTES = {1: 8, 2: 5, 3: 4}
#: Bytes of a fingerprint key in the blob as the store keeps it (:func:`stored`), per format.
STORED_KEY_BYTES = {1: 8, 2: 5, 3: 3}
_HEADER = struct.Struct("<BII")

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Features:
    """``starts``/``ends``: code points of each word; ``grams``: hash of the k-gram starting at each word
    (``len(starts) - K + 1`` of them, none below K words); ``selected``: winnowed k-gram indices;
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


def _check_version(version: int) -> None:
    if version not in BLOB_VERSIONS:
        raise ValueError(f"unknown passage blob format {version}")


def _low(keys: U64, width: int) -> U64:
    return keys if width == 8 else keys & np.uint64((1 << (8 * width)) - 1)


def truncated(keys: U64, version: int = BLOB_VERSION) -> U64:
    """Keys as a stored blob of format ``version`` holds them (format 2: the low 40 bits, format 3: the
    low 24): what a text's k-grams are matched with."""
    _check_version(version)
    return _low(keys, STORED_KEY_BYTES[version])


def wanted(keys: U64, version: int = BLOB_VERSION) -> bytes:
    """The distinct keys of a text as the passage index is keyed (:func:`key_bytes`), for a search."""
    _check_version(version)
    return key_bytes(np.unique(_low(keys, KEY_BYTES[version])), version)


def key_bytes(keys: U64, version: int = BLOB_VERSION) -> bytes:
    """Keys as the passage index holds them: the low KEY_BYTES[version] bytes of each, little-endian
    (the first 4 pick a group of the index)."""
    _check_version(version)
    width = KEY_BYTES[version]
    raw = np.ascontiguousarray(keys, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :width].tobytes()


def unpack_keys(raw: bytes, version: int = BLOB_VERSION, width: int | None = None) -> U64:
    """Keys as :func:`key_bytes` wrote them (or ``width`` bytes each)."""
    _check_version(version)
    width = width or KEY_BYTES[version]
    m = len(raw) // width
    padded = np.zeros((m, 8), np.uint8)
    padded[:, :width] = np.frombuffer(raw, np.uint8, m * width).reshape(m, width)
    return padded.view("<u8").reshape(m).astype(np.uint64)


def blob(text: str, version: int = BLOB_VERSION) -> bytes:
    """The passage blob of a text, straight from the native core (the same bytes as
    ``pack(features(text), version)``; b"": fewer than K words, nothing to index)."""
    _check_version(version)
    return bytes(_native.passage_blob(text, K, W, version))


def _varints(values: npt.NDArray[np.int64] | list[int]) -> bytes:
    out = bytearray()
    for v in values.tolist() if isinstance(values, np.ndarray) else values:
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
    return bytes(out)


def pack(f: Features, version: int = BLOB_VERSION) -> bytes:
    """The passage blob of a document (b"": fewer than K words, nothing to index)."""
    _check_version(version)
    sel = f.selected
    if len(sel) == 0:
        return b""
    steps = np.diff(sel, prepend=np.uint32(0)).astype(np.uint8)
    starts = f.starts[sel].astype(np.int64)
    lengths = (f.ends[sel + (K - 1)] - f.starts[sel]).astype(np.int64)
    if version == 1:
        positions = [starts.astype("<u4").tobytes(), np.minimum(lengths, 65535).astype("<u2").tobytes()]
    else:
        positions = [_varints(np.diff(starts, prepend=0)), _varints(lengths)]
    if version == 3:
        header = bytes([version]) + _varints([len(f.starts), len(sel)])
    else:
        header = _HEADER.pack(version, len(f.starts), len(sel))
    return b"".join(
        (
            header,
            key_bytes(f.keys[sel], version),
            steps.tobytes(),
            *positions,
            _pack_nibbles(f.nibbles),
        )
    )


def _pack_nibbles(nibbles: npt.NDArray[np.uint8]) -> bytes:
    padded = np.zeros(len(nibbles) + len(nibbles) % 2, np.uint8)
    padded[: len(nibbles)] = nibbles
    return (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8).tobytes()


@dataclass(frozen=True)
class Source:
    """A stored document's passage blob, decoded: its word count and, per selected k-gram, its key (as
    its format holds it: see :func:`truncated`), first word, and code point start and end in the
    stored text."""

    words: int
    keys: U64
    word: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    nibbles: npt.NDArray[np.uint8]


def header(blob: bytes) -> tuple[int, int, int, int]:
    """(version, words, m, offset of the keys) of a passage blob of any format; ValueError for another
    version or a header cut short."""
    if not blob:
        raise ValueError("truncated passage blob")
    version = blob[0]
    _check_version(version)
    if version < 3:
        if len(blob) < _HEADER.size:
            raise ValueError("truncated passage blob")
        return (*_HEADER.unpack_from(blob), _HEADER.size)
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
    return version, counts[0], counts[1], at


def stored(blob: bytes) -> bytes:
    """The blob as the store keeps it: format 3 drops the high byte of each key (the index has the
    whole key; a text's k-grams are matched on 24 bits, which also name the key's index group), the
    other formats are kept as sent. The store's steps (ND.PASSAGES, _passages_lua.lua) do the same."""
    if not blob or blob[0] != 3:
        return blob
    _, _, m, at = header(blob)
    if len(blob) < at + 4 * m:
        raise ValueError("truncated passage blob")
    keys = np.frombuffer(blob, np.uint8, 4 * m, at).reshape(m, 4)[:, :3]
    return blob[:at] + keys.tobytes() + blob[at + 4 * m :]


def unpack(blob: bytes) -> Source:
    """A stored blob (:func:`stored`) of any format; ValueError for another version."""
    version, words, m, at = header(blob)
    width = STORED_KEY_BYTES[version]
    if len(blob) < at + m * (width + 1):
        raise ValueError("truncated passage blob")
    keys = unpack_keys(blob[at : at + m * width], version, width)
    at += m * width
    steps = np.frombuffer(blob, np.uint8, m, at)
    at += m
    if version == 1:
        start = np.frombuffer(blob, "<u4", m, at).astype(np.int64)
        at += 4 * m
        length = np.frombuffer(blob, "<u2", m, at).astype(np.int64)
        at += 2 * m
    else:
        start, length, at = _native.passage_positions(blob, m, at)
    if len(blob) < at + (words + 1) // 2:
        raise ValueError("truncated passage blob")
    if len(blob) != at + (words + 1) // 2:  # e.g. a format-3 blob as sent, not as stored
        raise ValueError("a passage blob longer than its contents")
    packed = np.frombuffer(blob, np.uint8, (words + 1) // 2, at)
    nibbles = np.empty(2 * len(packed), np.uint8)
    nibbles[0::2], nibbles[1::2] = packed & 15, packed >> 4
    return Source(
        words, keys, np.cumsum(steps, dtype=np.int64), start,
        start + length, nibbles[:words],
    )  # fmt: skip
