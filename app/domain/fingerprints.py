"""Passage fingerprints of a text and the stored passage blob (docs/design.md, "Passages").

A text's words (with their code point offsets), the 64-bit hash of every word ``K``-gram and the
k-grams winnowing selects with a window of ``W`` k-grams come from the native core
(``native/passages.cpp``). Guarantee (winnowing): two texts that share a run of at least
``GUARANTEE_WORDS`` = W + K - 1 words (after lower-casing; punctuation and white space are not words)
share at least one selected fingerprint, so a verbatim passage that long is always a candidate.

Passage blob, format version 1 (little-endian), what the store keeps per document::

    u8 version (1) | u32 words | u32 m | m x 8-byte key | m x u8 word step | m x u32 start | m x u16 length
    | ceil(words / 2) x u8 word nibbles (word 2i in the low 4 bits of byte i, word 2i+1 in the high)

``key``: a selected k-gram's hash (the scripts only read these); ``word step``: its
first word minus the previous selected one's (the first: its first word; winnowing keeps steps <= W);
``start``/``length``: code points of the k-gram in the text as stored (length capped at 65,535);
``nibble``: the top 4 bits of each word's hash, so a passage's edges are found word by word (a word of
another text agrees by chance one time in 16).
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
BLOB_VERSION = 1
KEY_BYTES = 8
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


def key_bytes(keys: U64) -> bytes:
    """Keys as the store holds them: 8 raw little-endian bytes each (the low 32 bits pick a group)."""
    return keys.astype("<u8").tobytes()


def blob(text: str) -> bytes:
    """The passage blob of a text, straight from the native core (the same bytes as
    ``pack(features(text))``; b"": fewer than K words, nothing to index)."""
    return bytes(_native.passage_blob(text, K, W))


def pack(f: Features) -> bytes:
    """The passage blob of a document (b"": fewer than K words, nothing to index)."""
    sel = f.selected
    if len(sel) == 0:
        return b""
    steps = np.diff(sel, prepend=np.uint32(0)).astype(np.uint8)
    starts = f.starts[sel].astype("<u4")
    lengths = np.minimum(f.ends[sel + (K - 1)] - f.starts[sel], 65535).astype("<u2")
    return b"".join(
        (
            _HEADER.pack(BLOB_VERSION, len(f.starts), len(sel)),
            key_bytes(f.keys[sel]),
            steps.tobytes(),
            starts.tobytes(),
            lengths.tobytes(),
            _pack_nibbles(f.nibbles),
        )
    )


def _pack_nibbles(nibbles: npt.NDArray[np.uint8]) -> bytes:
    padded = np.zeros(len(nibbles) + len(nibbles) % 2, np.uint8)
    padded[: len(nibbles)] = nibbles
    return (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8).tobytes()


@dataclass(frozen=True)
class Source:
    """A stored document's passage blob, decoded: its word count and, per selected k-gram, its key,
    first word, and code point start and end in the stored text."""

    words: int
    keys: U64
    word: npt.NDArray[np.int64]
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    nibbles: npt.NDArray[np.uint8]


def unpack(blob: bytes) -> Source:
    version, words, m = _HEADER.unpack_from(blob)
    if version != BLOB_VERSION:
        raise ValueError(f"unknown passage blob format {version}")
    at = _HEADER.size
    keys = np.frombuffer(blob, "<u8", m, at).astype(np.uint64)
    at += m * KEY_BYTES
    steps = np.frombuffer(blob, np.uint8, m, at)
    at += m
    start = np.frombuffer(blob, "<u4", m, at).astype(np.int64)
    at += 4 * m
    length = np.frombuffer(blob, "<u2", m, at).astype(np.int64)
    at += 2 * m
    packed = np.frombuffer(blob, np.uint8, (words + 1) // 2, at)
    nibbles = np.empty(2 * len(packed), np.uint8)
    nibbles[0::2], nibbles[1::2] = packed & 15, packed >> 4
    return Source(
        words, keys, np.cumsum(steps, dtype=np.int64), start,
        start + length, nibbles[:words],
    )  # fmt: skip
