"""How a collection's keys are named and grouped on a Redis Cluster (band and id families that grow
inside their slots: see keys.py), and one node's share of a write, batched for ``cluster_ops.lua``."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from neardup.storage import keys


@lru_cache(maxsize=1 << 16)
def _id_hash(doc_id: bytes) -> int:
    # The same as _common.lua's id_hash, so both stores agree on where an id lives.
    return int(hashlib.sha1(doc_id).hexdigest()[:8], 16)


_GROUP = struct.Struct(">I")


def _varint(blob: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(blob):
            raise ValueError("truncated passage blob")
        byte = blob[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def passage_keys(passage_blob: bytes) -> npt.NDArray[np.uint32]:
    """The distinct 4-byte fingerprint keys of a passage blob (neardup.domain.fingerprints: a format
    byte, the words and the entry count m as varints, then m little-endian keys), in their first
    order."""
    _, at = _varint(passage_blob, 1)
    m, at = _varint(passage_blob, at)
    if len(passage_blob) < at + 4 * m:
        raise ValueError("truncated passage blob")
    every = np.frombuffer(passage_blob, "<u4", m, at)
    _, first = np.unique(every, return_index=True)
    return every[np.sort(first)].astype(np.uint32)


def unpack_band_keys(band_bytes: bytes) -> list[bytes]:
    """The 8-byte band keys packed one after another in ``band_bytes``."""
    return [band_bytes[p : p + 8] for p in range(0, len(band_bytes), 8)]


@dataclass
class NodeOps:
    """One node's share of a write (see cluster_ops.lua)."""

    band_prefix: str = ""  # the band family prefix (keys.CollectionKeys.band_family_prefix)
    band_families: int = 1
    band_level: int = 0  # the level a family's groups start at
    id_families: int = 1
    id_level: int = 0
    appends: bytearray = field(default_factory=bytearray)  # (12 + 5)-byte records, see cluster_ops.lua
    removals: bytearray = field(default_factory=bytearray)
    passage_prefix: str = ""  # the passage index's family prefix (collections with passages)
    passage_families: int = 1
    posting_appends: bytearray = field(default_factory=bytearray)  # records of the same shape
    posting_removals: bytearray = field(default_factory=bytearray)
    sets: list[bytes | str] = field(default_factory=list)
    deletes: list[bytes | str] = field(default_factory=list)
    swaps: list[bytes | str] = field(default_factory=list)
    swap_index: list[int] = field(default_factory=list)
    unlinks: list[bytes | str] = field(default_factory=list)
    claims: list[bytes | str] = field(default_factory=list)
    claim_index: list[int] = field(default_factory=list)
    #: a key of this node's (the first one grouped here): the slot its replication wait is sent for
    touch: str = ""

    def empty(self) -> bool:
        """Whether this node has nothing to write (it is only visited to wait for its replicas)."""
        sections = (self.sets, self.deletes, self.swaps, self.unlinks, self.claims)
        postings = self.posting_appends or self.posting_removals
        return not (self.appends or self.removals or postings or any(sections))

    def args(self) -> list[bytes | str | int]:
        out: list[bytes | str | int] = [
            self.band_prefix, bytes(self.appends), bytes(self.removals), keys.BUCKET_CAP, keys.ORDINAL_WIDTH,
            self.band_families, self.band_level, keys.CLUSTER_BAND_TARGET,
            self.id_families, self.id_level, keys.CLUSTER_ID_TARGET,
            self.passage_prefix, bytes(self.posting_appends), bytes(self.posting_removals),
            keys.POSTING_CAP, self.passage_families,
        ]  # fmt: skip
        sections = ((self.sets, 3), (self.deletes, 2), (self.swaps, 4), (self.unlinks, 1), (self.claims, 3))
        for values, width in sections:
            out.append(len(values) // width)
            out += values
        return out


#: Where a write's builder puts the ops of a key: the ops of the node that serves its slot.
OpsFor = Callable[[str], NodeOps]


@dataclass(frozen=True)
class Layout:
    """A collection generation's shape, as its state holds it (``bG``, ``bL``, ``iG``, ``iL``, ``sg``)."""

    band_families: int
    band_level: int  # the level each family's groups start at
    id_families: int
    id_level: int
    sig_group: int  # the state's ``sg``: sketches per signature hash
    passage_families: int = 0  # the state's ``pG``: 0 when the collection has passages off
    sites: bool = False  # the state's ``sS``: the collection has a site_field


class KeyGroups:
    """Key names of one collection generation on a cluster. A band key and an id are named by their
    family (the node finds the group there, _cluster_family.lua); sketches and records by their group."""

    def __init__(self, k: keys.CollectionKeys, layout: Layout) -> None:
        self.k = k
        self.band_families = layout.band_families
        self.band_level = layout.band_level
        self.band_mask = layout.band_families - 1
        self.id_families = layout.id_families
        self.id_level = layout.id_level
        self.id_mask = layout.id_families - 1
        self.sig_group = layout.sig_group
        self.passage_families = layout.passage_families
        self.passage_mask = max(1, layout.passage_families) - 1
        #: Whether the collection counts sites (its site keys: ``k.cluster_sites``, on the state slot).
        self.sites = layout.sites

    @property
    def passages(self) -> bool:
        """Whether the collection keeps passages."""
        return self.passage_families > 0

    @staticmethod
    def ordinal(ordinal: int) -> bytes:
        """An ordinal as a bucket holds it: ``ORDINAL_WIDTH`` bytes, big-endian."""
        return ordinal.to_bytes(keys.ORDINAL_WIDTH, "big")

    @staticmethod
    def ordinals_in(value: bytes) -> list[int]:
        """The ordinals of a bucket's value."""
        w = keys.ORDINAL_WIDTH
        wide = np.zeros((len(value) // w, 8), dtype=np.uint8)
        wide[:, 8 - w :] = np.frombuffer(value, dtype=np.uint8).reshape(-1, w)
        return wide.view(">u8").ravel().tolist()  # type: ignore[no-any-return]

    def family(self, n: int) -> str:
        """The shape key of band family ``n``: every key of the family shares its slot."""
        return f"{self.k.band_family_prefix}{n}}}"

    def band_record(self, field_: bytes) -> tuple[str, bytes]:
        """The shape key of the bucket's family and its packed (family, band key) record prefix."""
        family = int.from_bytes(field_[:4], "little") & self.band_mask
        return self.family(family), _GROUP.pack(family) + field_

    def add_band(self, ops_for: OpsFor, field_: bytes, o4: bytes, *, remove: bool = False) -> None:
        key, record = self.band_record(field_)
        ops = ops_for(key)
        ops.band_prefix = self.k.band_family_prefix
        ops.band_families, ops.band_level = self.band_families, self.band_level
        (ops.removals if remove else ops.appends).extend(record + o4)

    def remove_document(
        self, ops_for: OpsFor, ordinal: int, band_fields: list[bytes], passage_blob: bytes = b""
    ) -> None:
        """Take a stored version out: its band entries, signature and record, and its passages (its
        postings and blob, named by its stored ``passage_blob``; the id is the caller's)."""
        o4 = self.ordinal(ordinal)
        for f in band_fields:
            self.add_band(ops_for, f, o4, remove=True)
        for key, slot in (self.sig(ordinal), self.doc(ordinal)):
            ops_for(key).deletes.extend((key, slot))
        if passage_blob:
            self.add_postings(ops_for, [(ordinal, passage_blob)], remove=True)
            for key, part, _ in self.blob_parts(ordinal, passage_blob):
                ops_for(key).deletes.extend((key, part))

    # --- passages (docs/design.md, "Passages on a cluster") --------------------------------------------

    def passage_family(self, n: int) -> str:
        """The shape key of passage family ``n``."""
        return f"{self.k.passage_family_prefix}{n}}}"

    def add_postings(
        self, ops_for: OpsFor, documents: Sequence[tuple[int, bytes]], *, remove: bool = False
    ) -> None:
        """Post each (ordinal, passage blob) document's ordinal under every distinct key of its blob, or
        take it out (``remove``): the records are built with numpy and grouped by family, and
        ``ops_for`` is asked once per family, not once per key (a batch posts ~50 keys a document)."""
        parts = [(ordinal, passage_keys(blob)) for ordinal, blob in documents if blob]
        if not parts:
            return
        fingerprints = np.concatenate([found for _, found in parts])
        ordinals = np.repeat(np.array([o for o, _ in parts], np.uint64), [len(found) for _, found in parts])
        n = len(fingerprints)
        family = fingerprints & np.uint32(self.passage_mask)
        records = np.empty((n, 8 + keys.ORDINAL_WIDTH), np.uint8)
        records[:, :4] = family.astype(">u4").view(np.uint8).reshape(n, 4)
        records[:, 4:8] = fingerprints.astype("<u4").view(np.uint8).reshape(n, 4)
        records[:, 8:] = ordinals.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - keys.ORDINAL_WIDTH :]
        order = np.argsort(family, kind="stable")  # a family's records keep the documents' order
        distinct, starts = np.unique(family[order], return_index=True)
        ends = [*starts[1:].tolist(), n]
        for f, start, end in zip(distinct.tolist(), starts.tolist(), ends, strict=True):
            ops = ops_for(self.passage_family(f))
            ops.passage_prefix, ops.passage_families = self.k.passage_family_prefix, self.passage_families
            (ops.posting_removals if remove else ops.posting_appends).extend(
                records[order[start:end]].tobytes()
            )

    def add_blobs(
        self, ops_for: OpsFor, documents: Sequence[tuple[int, bytes]], *, claims: bool = False
    ) -> None:
        """Write each (ordinal, passage blob) document's blob parts (``claims``: only where absent or
        equal, cluster_ops.lua's claims)."""
        for ordinal, blob in documents:
            if blob:
                for key, part, value in self.blob_parts(ordinal, blob):
                    ops = ops_for(key)
                    (ops.claims if claims else ops.sets).extend((key, part, value))

    def blob(self, ordinal: int) -> tuple[str, str]:
        """The hash of a document's passage blob and the field of its first part."""
        group, slot = divmod(ordinal, keys.PASSAGE_GROUP)
        return f"{self.k.passage_blob_prefix}{group}", str(slot)

    def blob_parts(self, ordinal: int, passage_blob: bytes) -> list[tuple[str, str, bytes]]:
        """(hash, field, part) of each part of a blob, as one server keeps them: parts of PASSAGE_PART
        bytes, part j in the field ``ordinal % PASSAGE_GROUP + PASSAGE_GROUP * j``."""
        key = self.blob(ordinal)[0]
        base, size = ordinal % keys.PASSAGE_GROUP, keys.PASSAGE_PART
        return [
            (key, str(base + j * keys.PASSAGE_GROUP), passage_blob[j * size : (j + 1) * size])
            for j in range(max(1, -(-len(passage_blob) // size)))
        ]

    def ids(self, doc_id: bytes) -> str:
        """The shape key of the id's family (cluster_ids.lua and the swaps find its group there)."""
        return f"{self.k.id_family_prefix}{_id_hash(doc_id) & self.id_mask}}}"

    def add_swap(self, ops_for: OpsFor, doc_id: bytes, expected: bytes, new: bytes, tag: int) -> None:
        """A compare-and-set of the id (cluster_ops.lua's swaps), answered under ``tag``."""
        key = self.ids(doc_id)
        ops = ops_for(key)
        ops.id_families, ops.id_level = self.id_families, self.id_level
        ops.swaps.extend((key, doc_id, expected, new))
        ops.swap_index.append(tag)

    def sig(self, ordinal: int) -> tuple[str, str]:
        return f"{self.k.sig_prefix}{ordinal // self.sig_group}", str(ordinal % self.sig_group)

    def doc(self, ordinal: int) -> tuple[str, str]:
        return f"{self.k.doc_prefix}{ordinal // keys.DOC_GROUP}", str(ordinal % keys.DOC_GROUP)
