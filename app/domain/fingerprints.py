"""Passage fingerprints of a text and the stored passage blob (docs/design.md, "Passages").

A text's words (with their code point offsets), the 64-bit hash of every word ``K``-gram and the
k-grams winnowing selects with a window of ``W`` k-grams come from the native core
(``native/passages.cpp``). Guarantee (winnowing): two texts that share a run of at least
``GUARANTEE_WORDS`` = W + K - 1 words (after lower-casing; punctuation and white space are not words)
share at least one selected fingerprint, so a verbatim passage that long is always a candidate.

Passage blob (little-endian), what the store keeps per document; a collection keeps one format for
life (``CollectionParams.passage_format``: 2 for collections created since it exists, 1 before)::

    format 1: u8 1 | u32 words | u32 m | m x 8-byte key | m x u8 word step | m x u32 start
              | m x u16 length | ceil(words / 2) x u8 word nibbles
    format 2: u8 2 | u32 words | u32 m | m x 5-byte key | m x u8 word step | m x varint start step
              | m x varint length | ceil(words / 2) x u8 word nibbles

``key``: a selected k-gram's hash, all 64 bits (format 1) or the low 40 (format 2): the passage index's
field, the only part the scripts read; ``word step``: its first word minus the previous selected one's
(the first: its first word; winnowing keeps steps <= W); ``start``: its first code point in the text as
stored (format 2: minus the previous selected k-gram's, as an unsigned LEB128 varint: 7 bits a byte, low
first, the high bit set on every byte but the last); ``length``: its code points (format 1: capped at
65,535; format 2: a varint); ``nibble``: the top 4 bits of each word's hash (word 2i in the low 4 bits of
byte i, word 2i+1 in the high), so a passage's edges are found word by word (a word of another text
agrees by chance one time in 16).

Format 2 is ~6 bytes per selected k-gram smaller: starts and lengths are mostly one byte, and 40-bit keys
still tell apart the k-grams of ~10^6 documents (two distinct k-grams share a key with probability
2^-40: ~8 pairs among 4 million keys, each costing one spurious posting read, never a span: alignment
needs the words around a hit to agree).
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
BLOB_VERSION = 2
BLOB_VERSIONS = (1, 2)
#: Bytes of a fingerprint key in the passage index and the blob, per format.
KEY_BYTES = {1: 8, 2: 5}
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


def truncated(keys: U64, version: int = BLOB_VERSION) -> U64:
    """Keys as format ``version`` holds them (format 2: the low 40 bits)."""
    _check_version(version)
    bits = 8 * KEY_BYTES[version]
    return keys if bits == 64 else keys & np.uint64((1 << bits) - 1)


def key_bytes(keys: U64, version: int = BLOB_VERSION) -> bytes:
    """Keys as the store holds them: the low KEY_BYTES[version] bytes of each, little-endian (the first
    4 pick a group of the index)."""
    _check_version(version)
    width = KEY_BYTES[version]
    raw = np.ascontiguousarray(keys, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :width].tobytes()


def unpack_keys(raw: bytes, version: int = BLOB_VERSION) -> U64:
    """Keys as :func:`key_bytes` wrote them."""
    _check_version(version)
    width = KEY_BYTES[version]
    m = len(raw) // width
    padded = np.zeros((m, 8), np.uint8)
    padded[:, :width] = np.frombuffer(raw, np.uint8, m * width).reshape(m, width)
    return padded.view("<u8").reshape(m).astype(np.uint64)


def blob(text: str, version: int = BLOB_VERSION) -> bytes:
    """The passage blob of a text, straight from the native core (the same bytes as
    ``pack(features(text), version)``; b"": fewer than K words, nothing to index)."""
    _check_version(version)
    return bytes(_native.passage_blob(text, K, W, version))


def _varints(values: npt.NDArray[np.int64]) -> bytes:
    out = bytearray()
    for v in values.tolist():
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
    return b"".join(
        (
            _HEADER.pack(version, len(f.starts), len(sel)),
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


def unpack(blob: bytes) -> Source:
    """Either format; ValueError for another version."""
    version, words, m = _HEADER.unpack_from(blob)
    _check_version(version)
    width = KEY_BYTES[version]
    if len(blob) < _HEADER.size + m * (width + 1):
        raise ValueError("truncated passage blob")
    at = _HEADER.size
    keys = unpack_keys(blob[at : at + m * width], version)
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
    packed = np.frombuffer(blob, np.uint8, (words + 1) // 2, at)
    nibbles = np.empty(2 * len(packed), np.uint8)
    nibbles[0::2], nibbles[1::2] = packed & 15, packed >> 4
    return Source(
        words, keys, np.cumsum(steps, dtype=np.int64), start,
        start + length, nibbles[:words],
    )  # fmt: skip
