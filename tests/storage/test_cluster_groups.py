"""A cluster collection created without a capacity hint keeps its band and id groups in the listpack
encoding as it grows: each family (one slot) splits its own groups by linear hashing, so no group
passes the nodes' hash-max-listpack-entries (256) and no key is written outside its family's slot. Run
with few families and small targets (the test-size override), so tables of fixed groups would pass
256 fields per group after 64 documents (bands) and 512 documents (ids)."""

from __future__ import annotations

from binascii import crc_hqx

import pytest
import redis

from neardup.domain import CollectionParams, Document, Index
from neardup.storage import ClusterStore, keys
from neardup.testing import LocalCluster
from tests.domain.test_index import text

pytestmark = pytest.mark.anyio

FAMILIES = 4
TARGET = 8
ID_FAMILIES = 2
ID_TARGET = 8
DOCS = 1200
BATCH = 200


def slot(key: bytes) -> int:
    """The cluster slot of ``key`` (its hash tag's, where it has one)."""
    start = key.find(b"{")
    end = key.find(b"}", start + 1)
    if start >= 0 and end > start + 1:
        key = key[start + 1 : end]
    return crc_hqx(key, 0) & 16383


def family_keys(cluster: LocalCluster, prefix: str) -> dict[bytes, int]:
    """Every key (family shapes and groups) of a table: name -> the node that holds it."""
    out: dict[bytes, int] = {}
    for node, url in enumerate(cluster.urls):
        client = redis.Redis.from_url(url)
        try:
            out.update({key: node for key in client.scan_iter(match=f"{prefix}*", count=1000)})
        finally:
            client.close()
    return out


def encodings_and_sizes(cluster: LocalCluster, names: dict[bytes, int]) -> tuple[set[bytes], int]:
    found: set[bytes] = set()
    largest = 0
    clients = [redis.Redis.from_url(url) for url in cluster.urls]
    try:
        for key, node in names.items():
            found.add(clients[node].object("encoding", key))  # type: ignore[arg-type]
            largest = max(largest, int(clients[node].hlen(key)))  # type: ignore[arg-type]
    finally:
        for client in clients:
            client.close()
    return found, largest


async def test_a_collection_without_a_hint_keeps_listpack_groups_in_their_slots_as_it_grows(
    cluster_url: str, valkey_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keys, "CLUSTER_BAND_FAMILIES", FAMILIES)
    monkeypatch.setattr(keys, "CLUSTER_BAND_TARGET", TARGET)
    monkeypatch.setattr(keys, "CLUSTER_ID_FAMILIES", ID_FAMILIES)
    monkeypatch.setattr(keys, "CLUSTER_ID_TARGET", ID_TARGET)
    store = ClusterStore.from_url(cluster_url, timeout=10)
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("grows", threshold=0.7))
        k = (await index.registry.get("grows")).keys
        families = [f"{k.band_family_prefix}{f}}}".encode() for f in range(FAMILIES)]
        id_families = [f"{k.id_family_prefix}{f}}}".encode() for f in range(ID_FAMILIES)]
        early: dict[bytes, int] = {}
        for start in range(0, DOCS, BATCH):
            docs = [Document(f"d{i}", text(7000 + i, 40)) for i in range(start, start + BATCH)]
            answers = await index.check("grows", docs)
            assert all(a.duplicate_of is None for a in answers)
            if not early:
                early = family_keys(valkey_cluster, k.band_family_prefix)
                early |= family_keys(valkey_cluster, k.id_family_prefix)

        for prefix, shapes, target, per_document in (
            (k.band_family_prefix, families, TARGET, 16),
            (k.id_family_prefix, id_families, ID_TARGET, 1),
        ):
            grown = family_keys(valkey_cluster, prefix)
            groups = [key for key in grown if key not in shapes]
            # in fixed groups, 1,200 documents would be ~4,800 band fields or 600 ids per group
            assert len(groups) > DOCS * per_document // (4 * target)
            found, largest = encodings_and_sizes(valkey_cluster, grown)
            assert found == {b"listpack"} and largest <= 4 * target, (prefix, found, largest)
            # every key of a family sits in the family's slot, on the node that held it when it was small
            assert {slot(key) for key in grown} == {slot(f) for f in shapes}
            assert all(grown[key] == node for key, node in early.items() if key in grown)
            assert all(key in grown for key in shapes)

        # every document is found by its text and by its id
        for start in range(0, DOCS, BATCH):
            copies = [Document(f"copy{i}", text(7000 + i, 40)) for i in range(start, start + BATCH)]
            answers = await index.check("grows", copies, insert=False)
            assert [a.duplicate_of for a in answers] == [f"d{i}" for i in range(start, start + BATCH)]
        stored = await store.lookup(k, [f"d{i}".encode() for i in range(DOCS)])
        assert all(v is not None and f":d{i}".encode() in v.record for i, v in enumerate(stored))
    finally:
        await store.close()
