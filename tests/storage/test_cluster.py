"""What only a cluster has, on the session's real 3-node cluster: keys spread over every shard with the
state alone on one slot, signatures grouped as the state says; a check that dies between its phases
leaves nothing that corrupts results and a retry converges; an abandoned reservation does not stay
pending; a node that goes away turns into StoreUnavailable promptly and the service recovers when it
comes back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from neardup.domain import CollectionParams, Document, DocumentNotFound, Index, StoreUnavailable
from neardup.storage import ClusterStore, keys, records
from neardup.storage.errors import StoreDown
from neardup.storage.keys import CollectionKeys
from neardup.testing import LocalCluster
from tests.domain.test_index import text, variant

pytestmark = pytest.mark.anyio


@pytest.fixture
async def cstore(cluster_url: str) -> Any:
    store = ClusterStore.from_url(cluster_url, timeout=1.0)
    try:
        yield store
    finally:
        await store.close()


def keys_per_node(cluster: LocalCluster) -> list[list[bytes]]:
    out = []
    for url in cluster.urls:
        client = redis.Redis.from_url(url)
        try:
            out.append(sorted(client.keys("*")))
        finally:
            client.close()
    return out


async def test_a_collection_spreads_over_every_shard(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("big"))
    for start in range(0, 600, 200):
        await index.check("big", [Document(f"d{i}", text(5000 + i, 40)) for i in range(start, start + 200)])
    per_node = keys_per_node(valkey_cluster)
    total = sum(len(keys) for keys in per_node)
    assert all(len(keys) > total / 5 for keys in per_node), [len(k) for k in per_node]
    tagged = [node for node, keys in enumerate(per_node) if b"nd:{big}:state" in keys]
    assert len(tagged) == 1  # the state (sequence and stamps) lives on one slot, nothing else does
    # the band and id families carry their own tags (each family one slot); no other data key has one
    k = (await index.registry.get("big")).keys
    families = (k.band_family_prefix.encode(), k.id_family_prefix.encode())
    untagged = [
        key for keys in per_node for key in keys if b"{big}" not in key and not key.startswith(families)
    ]
    assert untagged and all(b"{" not in key for key in untagged)
    assert all(any(key.startswith(f) for keys in per_node for key in keys) for f in families)
    # signatures are grouped by the state's sg, as on one server (keys.sig_group_size)
    sig_group = keys.sig_group_size(CollectionParams.create("big").stored_bytes)
    assert sig_group == 134
    sig_keys = {key for keys in per_node for key in keys if key.startswith(k.sig_prefix.encode())}
    assert sig_keys == {f"{k.sig_prefix}{n}".encode() for n in range(600 // sig_group + 1)}
    for i in (100, 300, 599):  # read back where they were written: each copy finds its original
        [again] = await index.check("big", [Document("again", text(5000 + i, 40))], insert=False)
        assert again.duplicate_of == f"d{i}"


def die_at_stamp(cstore: ClusterStore, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Every check dies between append and stamp (as if the service were killed there) until the
    returned function is called."""
    real = cstore._routing.run_state_script

    async def dies_at_stamp(name: str, k: Any, args: Any) -> Any:
        if name.startswith("cluster_stamp"):
            raise StoreDown("killed between append and stamp")
        return await real(name, k, args)

    monkeypatch.setattr(cstore._routing, "run_state_script", dies_at_stamp)
    return lambda: monkeypatch.setattr(cstore._routing, "run_state_script", real)


async def test_a_put_that_dies_between_append_and_stamp_is_written_again_by_its_retry(
    cstore: ClusterStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry finds its own copy stored with the same text and metadata, but never stamped: it must
    # not keep that invisible copy (as it keeps a live unchanged one) but write the document again.
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("c", threshold=0.7))
    restore = die_at_stamp(cstore, monkeypatch)
    with pytest.raises(StoreUnavailable):
        await index.put("c", Document("a", text(23), {"k": 1}))
    restore()
    assert await index.query("c", text(23)) == []
    await index.put("c", Document("a", text(23), {"k": 1}))
    assert [m.id for m in await index.query("c", text(23))] == ["a"]
    stored = await index.get_document("c", "a")
    assert await index.put("c", Document("a", text(23), {"k": 1})) == stored  # now live: kept as it is


async def test_a_check_that_dies_between_append_and_stamp_converges_on_retry(
    cstore: ClusterStore, cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index(cstore)
    params = CollectionParams.create("c", threshold=0.7)
    await index.create_collection(params)
    base = text(21)
    await index.check("c", [Document("a", base)])

    restore = die_at_stamp(cstore, monkeypatch)
    with pytest.raises(StoreUnavailable):
        await index.check("c", [Document("a", text(22))])  # a replaced by an unrelated text, half-way
    restore()

    # Half-written: the new version is pending (ignored), the old one is gone from the id table.
    assert await index.query("c", text(22)) == []
    # The retry converges to one clean entry.
    [r] = await index.check("c", [Document("a", text(22))])
    assert not r.duplicate
    assert [m.id for m in await index.query("c", text(22))] == ["a"]
    assert await index.query("c", base) == []  # the replaced version never comes back
    [b] = await index.check("c", [Document("b", variant(text(22), 1))])
    assert b.duplicate_of == "a" and [m.id for m in b.matches] == ["a"]
    assert (await index.get_collection("c")).documents == 2
    # Every band entry left names a live version (the half-written ones were removed).
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        collection = await index.registry.get("c")
        found = await cstore.lookup(collection.keys, [b"a", b"b"])
        live = {f.ordinal for f in found if f}
        ordinals: set[int] = set()
        for node_keys in keys_per_node_from(client, collection.keys):
            for key in node_keys:
                for value in client.hvals(key):
                    w = keys.ORDINAL_WIDTH
                    ordinals.update(int.from_bytes(value[q : q + w], "big") for q in range(0, len(value), w))
        assert ordinals == live
    finally:
        client.close()


def keys_per_node_from(client: redis.RedisCluster, k: CollectionKeys) -> list[list[bytes]]:
    """The band group keys on each node (not the band families' shapes, which end with their tag)."""
    out = []
    for node in client.get_primaries():
        names = client.scan_iter(match=f"{k.band_prefix}*", target_nodes=node)
        out.append([key for key in names if not key.endswith(b"}")])
    return out


async def test_an_abandoned_reservation_is_made_dead_later(
    cstore: ClusterStore, cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 s: the collection's abandon time, decided at its creation
    monkeypatch.setattr(cstore._routing, "abandon_ms", lambda: 1000)
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("c", threshold=0.7))
    restore = die_at_stamp(cstore, monkeypatch)
    with pytest.raises(StoreUnavailable):
        await index.check("c", [Document("lost", text(31))])
    restore()
    k = (await index.registry.get("c")).keys
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        assert client.hlen(k.pending) == 1
        [ordinal] = client.hkeys(k.pending)
        await asyncio.sleep(1.1)
        await index.check("c", [Document("next", text(32))])
        assert client.hlen(k.pending) == 0
        assert client.hget(k.late, ordinal) == b"0"  # dead: never stamped
    finally:
        client.close()
    # Never committed, so never seen, by a check or by its id, though its id swap landed.
    [r] = await index.check("c", [Document("copy", text(31))], insert=False)
    assert not r.duplicate
    with pytest.raises(DocumentNotFound):
        await index.get_document("c", "lost")
    [again] = await index.check("c", [Document("lost", text(31))])  # its retry writes it again
    assert again.inserted and not again.duplicate
    [r] = await index.check("c", [Document("copy", text(31))], insert=False)
    assert r.duplicate_of == "lost"


async def test_a_node_that_goes_away_is_a_prompt_503_and_recovery_needs_no_restart(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("c", threshold=0.7))
    await index.check("c", [Document(f"d{i}", text(40 + i)) for i in range(20)])
    node = valkey_cluster.nodes[1]
    node.kill()
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await index.check("c", [Document(f"e{i}", text(80 + i)) for i in range(20)])
        with pytest.raises(StoreUnavailable):
            await index.ping()
        assert time.monotonic() - started < 8
    finally:
        node.start()
        valkey_cluster.wait_ok()
    for _ in range(50):  # the client learns the slot map again by itself
        try:
            [r] = await index.check("c", [Document("x", text(45))], insert=False)
            break
        except StoreUnavailable:
            time.sleep(0.1)
    assert r.duplicate_of == "d5"
    await index.ping()


async def test_an_unreachable_cluster_raises_store_down_promptly() -> None:
    from neardup.storage.embedded import find_free_port

    store = ClusterStore.from_url(f"redis://127.0.0.1:{find_free_port()}", timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(StoreDown):
            await store.ping()
        with pytest.raises(StoreDown):
            await store.get_collection("c")
        assert time.monotonic() - started < 5
    finally:
        await store.close()


async def test_seed_nodes_after_the_first_are_tried_too(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    from neardup.storage.embedded import find_free_port

    others = ",".join(url.removeprefix("redis://") for url in valkey_cluster.urls[1:])
    store = ClusterStore.from_url(f"redis://127.0.0.1:{find_free_port()},{others}", timeout=1.0)
    try:
        await store.ping()
        assert await store.create_collection("s", b"{}", "g") is None
    finally:
        await store.close()


def test_cluster_settings_are_validated() -> None:
    from pydantic import ValidationError

    from neardup.settings import Settings

    assert Settings(redis_url="redis://a:7000,b:7000", redis_cluster=True).redis_cluster
    assert Settings(redis_url="redis://a:7000", redis_cluster=True, min_replicas=1).min_replicas == 1
    assert Settings(redis_url="redis://a:7000", redis_cluster=True).min_replicas == 0
    for bad in (
        {"redis_cluster": True},  # no URL: the embedded server is not a cluster
        {"redis_cluster": True, "redis_url": "unix:///run/redis.sock"},
        {"redis_url": "redis://a:7000,b:7000"},  # a seed list without the cluster switch
        {"redis_url": "redis://a:7000", "min_replicas": 1},  # replication waits are the cluster store's
        {"redis_url": "redis://a:7000", "redis_cluster": True, "min_replicas": -1},
    ):
        with pytest.raises(ValidationError):
            Settings(**bad)


async def test_a_hung_node_is_a_prompt_503_not_a_pile_of_waiting_requests(
    cluster_url: str, valkey_cluster: LocalCluster
) -> None:
    import os
    import signal

    store = ClusterStore.from_url(cluster_url, timeout=0.5)
    index = Index(store)
    try:
        await index.create_collection(CollectionParams.create("c", threshold=0.7))
        await index.check("c", [Document(f"d{i}", text(60 + i)) for i in range(20)])
        pid = valkey_cluster.nodes[2].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the node answers nothing, but its connections stay open
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await index.check("c", [Document(f"e{i}", text(90 + i)) for i in range(20)])
            assert time.monotonic() - started < 4
        finally:
            os.kill(pid, signal.SIGCONT)
        valkey_cluster.wait_ok()
        for _ in range(50):
            try:
                [r] = await index.check("c", [Document("x", text(65))], insert=False)
                break
            except StoreUnavailable:
                time.sleep(0.1)
        assert r.duplicate_of == "d5"
    finally:
        await store.close()


# --- creating and dropping collections --------------------------------------------------------------


async def test_a_creation_that_died_before_its_registry_entry_is_completed_by_the_next(
    cstore: ClusterStore, cluster_url: str
) -> None:
    """The state is written first (atomically, on the collection's slot); a creation that died before
    the registry entry left a collection nobody could see. The next creation finds the state, writes
    the entry from it, and the collection works."""
    from neardup.domain.registry import encode_entry
    from neardup.storage import keys

    params = CollectionParams.create("half", threshold=0.7)
    entry = encode_entry(params, "g0000000000a")
    assert await cstore.list_collections() == []  # (connects the client)
    reply = await cstore._routing.run_state_script(
        "cluster_init", "half", ["g0000000000a", 0, 0, 64, 16, entry, keys.ORDINAL_WIDTH, 60_000, 0, 0]
    )
    assert reply == [b"created"]  # ... and the process died here
    index = Index(cstore)
    assert await index.create_collection(params) == (params, False)  # it exists, with these parameters
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        assert client.hget(keys.REGISTRY, "half") == entry
    finally:
        client.close()
    await index.check("half", [Document("a", text(50))])
    [found] = await index.check("half", [Document("b", variant(text(50), 1))], insert=False)
    assert found.duplicate_of == "a"


async def test_creating_again_never_resets_the_sequence_and_a_retry_is_created(
    cstore: ClusterStore, cluster_url: str
) -> None:
    from neardup.domain.registry import encode_entry

    params = CollectionParams.create("again", threshold=0.7)
    entry = encode_entry(params, "g0000000000b")
    assert await cstore.create_collection("again", entry, "g0000000000b") is None
    k = CollectionKeys("again", "g0000000000b")
    index = Index(cstore)
    await index.check("again", [Document(f"d{i}", text(60 + i)) for i in range(5)])
    # The same creation sent again (its answer was lost): created, and nothing is reset.
    assert await cstore.create_collection("again", entry, "g0000000000b") is None
    # Another creation of the name: told what exists, and nothing is reset either.
    other = encode_entry(params, "g0000000000c")
    assert await cstore.create_collection("again", other, "g0000000000c") == entry
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        assert client.hget(k.state, "seq") == b"5" and client.hget(k.state, "gen") == b"g0000000000b"
    finally:
        client.close()
    [found] = await index.check("again", [Document("x", text(62))], insert=False)
    assert found.duplicate_of == "d2"


async def test_racing_creators_agree_on_one_generation(cstore: ClusterStore, cluster_url: str) -> None:
    from neardup.storage import keys

    indexes = [Index(cstore) for _ in range(8)]
    outcomes = await asyncio.gather(
        *(ix.create_collection(CollectionParams.create("race", threshold=0.7)) for ix in indexes)
    )
    assert sum(created for _, created in outcomes) == 1
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        gen = client.hget(keys.state("race"), "gen")
        assert gen is not None and b'"gen":"' + gen + b'"' in client.hget(keys.REGISTRY, "race")
    finally:
        client.close()
    await indexes[3].check("race", [Document("a", text(70))])  # every index finds the same collection
    [found] = await indexes[5].check("race", [Document("b", text(70))], insert=False)
    assert found.duplicate_of == "a"


async def test_a_registry_entry_without_a_state_can_be_dropped(
    cstore: ClusterStore, cluster_url: str
) -> None:
    from neardup.storage import keys

    client = redis.RedisCluster.from_url(cluster_url)
    try:
        client.hset(keys.REGISTRY, "orphan", b'{"gen":"g0000000000d","params":{}}')
        assert await cstore.drop_collection("orphan") is True
        assert client.hget(keys.REGISTRY, "orphan") is None
        assert await cstore.drop_collection("orphan") is False
    finally:
        client.close()


async def test_a_retry_that_keeps_a_copy_completes_its_band_entries(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    """A stored copy that lost some band entries (here taken out of some buckets after the fact, as a
    data shard's failover without replication waits can lose appends). The retry finds the copy
    unchanged and keeps it (first seen): it must also put it back in every bucket, or the copy stays
    invisible to later near-duplicates through those bands."""
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("c", threshold=0.7))
    await index.check("c", [Document("a", text(80))])
    await index.check("c", [Document("other", text(81))])
    collection = await index.registry.get("c")
    [stored] = await cstore.lookup(collection.keys, [b"a"])
    assert stored is not None
    w = keys.ORDINAL_WIDTH
    o4 = stored.ordinal.to_bytes(w, "big")
    nodes = [redis.Redis.from_url(url) for url in valkey_cluster.urls]  # one plain client per node

    def band_groups() -> list[tuple[redis.Redis, bytes]]:
        return [(c, key) for c in nodes for key in c.scan_iter(match=f"{collection.keys.band_prefix}*")]

    def buckets_with_a() -> int:
        return sum(
            o4 in [value[p : p + w] for p in range(0, len(value), w)]
            for c, key in band_groups()
            for value in c.hvals(key)
        )

    try:
        assert buckets_with_a() == collection.params.bands
        removed = 0
        for c, key in band_groups():
            for field, value in c.hgetall(key).items():
                if value == o4 and removed < collection.params.bands - 3:
                    c.hdel(key, field)  # the appends that "did not land"
                    removed += 1
        assert buckets_with_a() == 3
        [retry] = await index.check("c", [Document("a", text(80))])  # the same document again
        assert not retry.duplicate
        assert buckets_with_a() == collection.params.bands  # complete again
    finally:
        for c in nodes:
            c.close()
    assert (await index.get_document("c", "a")).inserted_at == stored_inserted_at(stored.record)


def stored_inserted_at(record: bytes) -> float:
    from neardup.storage import records

    return records.unpack(record)[1]


async def test_the_document_count_matches_a_recount_after_a_stream_of_changes(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    """Inserts, replacements (same id, other text), unchanged retries, ids twice in a batch, deletes
    and deletes of absent ids, in a seeded random stream: the collection's document count equals a
    recount of the id table from scratch."""
    import random

    rng = random.Random(5)
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("count", threshold=0.7))
    texts: dict[str, str] = {}
    for _ in range(60):
        batch = []
        for _ in range(rng.randint(1, 8)):
            doc_id = f"d{rng.randrange(40)}"
            kind = rng.random()
            body = texts.get(doc_id) if kind < 0.3 and doc_id in texts else text(rng.randrange(10**6), 30)
            batch.append(Document(doc_id, body))
        results = await index.check("count", batch)
        for doc, result in zip(batch, results, strict=True):
            assert result.inserted
            texts[doc.id] = doc.text
        for _ in range(rng.randint(0, 3)):
            doc_id = f"d{rng.randrange(40)}"
            try:
                await index.delete_document("count", doc_id)
                texts.pop(doc_id, None)
            except DocumentNotFound:
                assert doc_id not in texts
    k = (await index.registry.get("count")).keys
    recount = 0
    for url in valkey_cluster.urls:
        node = redis.Redis.from_url(url)
        try:
            groups = [key for key in node.scan_iter(match=f"{k.id_prefix}*") if not key.endswith(b"}")]
            recount += sum(node.hlen(key) for key in groups)  # (not the id families' shapes)
        finally:
            node.close()
    assert recount == len(texts)
    assert (await index.get_collection("count")).documents == recount


def stored_contents(
    urls: list[str], name: str, gen: str | None = None
) -> tuple[dict[bytes, int], dict[int, bytes]]:
    """Straight from every primary among ``urls`` (plain per-node clients, each sees its own keys): the
    id table (id -> ordinal) and the records (ordinal -> record) of the collection's generation
    (``gen``, else the one its state names)."""
    ids: dict[bytes, int] = {}
    found: dict[int, bytes] = {}
    clients = [redis.Redis.from_url(url) for url in urls]
    try:
        primaries = [c for c in clients if c.info("replication")["role"] == "master"]
        gen = (
            gen
            or next(
                c.hget(key, "gen") for c in primaries for key in c.scan_iter(match=keys.state(name))
            ).decode()
        )
        k = CollectionKeys(name, gen)
        for client in primaries:
            for key in client.scan_iter(match=f"{k.id_prefix}*"):
                if key.endswith(b"}"):  # an id family's shape (L, S, N)
                    continue
                for doc_id, ordinal in client.hgetall(key).items():
                    assert doc_id not in ids, doc_id  # an id lives in one group only
                    ids[doc_id] = int(ordinal)
            for key in client.scan_iter(match=f"{k.doc_prefix}*"):
                group = int(key.decode().rsplit(":", 1)[1])
                for slot, record in client.hgetall(key).items():
                    found[group * keys.DOC_GROUP + int(slot)] = record
    finally:
        for client in clients:
            client.close()
    return ids, found


def assert_every_id_names_its_own_record(ids: dict[bytes, int], found: dict[int, bytes]) -> None:
    """No ordinal is named by two ids, and the record each id names carries that id."""
    named = sorted(ids.values())
    assert len(named) == len(set(named)), [o for o in set(named) if named.count(o) > 1]
    wrong = {
        i: records.record_id(found.get(o, b""))
        for i, o in ids.items()
        if records.record_id(found.get(o, b"")) != i
    }
    assert not wrong, wrong


async def test_ordinals_are_never_issued_twice_after_the_state_loses_reservations(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    # A failover of the state's shard to a replica that missed the last reservations and stamps, while
    # the data shards kept the documents written under them: the state hashes are put back as they
    # were 30 documents earlier (state, pending and late: what such a replica holds).
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("f", threshold=0.7))
    await index.check("f", [Document(f"d{i}", text(9000 + i), {"n": i}) for i in range(10)])
    k = (await index.registry.get("f")).keys
    holder = None
    for url in valkey_cluster.urls:
        candidate = redis.Redis.from_url(url)
        if list(candidate.scan_iter(match=k.state)):
            holder = candidate
        else:
            candidate.close()
    assert holder is not None
    try:
        before = {key: holder.hgetall(key) for key in (k.state, k.pending, k.late)}
        for start in range(10, 40, 5):  # 30 more, acknowledged, then "lost" by the state
            await index.check(
                "f", [Document(f"d{i}", text(9000 + i), {"n": i}) for i in range(start, start + 5)]
            )
        lost_seq = int(holder.hget(k.state, "seq"))
        for key, fields in before.items():
            holder.delete(key)
            if fields:
                holder.hset(key, mapping=fields)
        assert int(holder.hget(k.state, "seq")) == lost_seq - 30
        # New documents, one by one and in batches: their reservations start inside the lost range.
        await index.check("f", [Document("e0", text(9100), {"n": 100})])
        for start in range(1, 31, 6):
            await index.check(
                "f", [Document(f"e{i}", text(9100 + i), {"n": 100 + i}) for i in range(start, start + 6)]
            )
        assert int(holder.hget(k.state, "seq")) > lost_seq  # it jumped past every ordinal in use
    finally:
        holder.close()
    ids, found = stored_contents(valkey_cluster.urls, "f")
    assert len(ids) == 71
    assert_every_id_names_its_own_record(ids, found)
    for doc_id, n in [*((f"d{i}", i) for i in range(40)), *((f"e{i}", 100 + i) for i in range(31))]:
        stored = await index.get_document("f", doc_id)
        assert stored.metadata == {"n": n}, doc_id
        [match, *_] = await index.query("f", text(9000 + n))
        assert match.id == doc_id


async def test_an_id_whose_ordinal_went_to_another_document_neither_returns_nor_removes_its_data(
    cstore: ClusterStore, valkey_cluster: LocalCluster
) -> None:
    # Without replication waits (NEARDUP_MIN_REPLICAS=0) two failovers can lose, for document x, its
    # reservation (state shard) and its claimed signature and record (data shards) while its id swap
    # survives (another shard): x's ordinal is then free to claim, and y takes it.
    index = Index(cstore)
    await index.create_collection(CollectionParams.create("h", threshold=0.7))
    await index.check("h", [Document("w", text(9300), {"n": 0})])
    k = (await index.registry.get("h")).keys
    clients = [redis.Redis.from_url(url) for url in valkey_cluster.urls]
    try:
        [holder] = [c for c in clients if list(c.scan_iter(match=k.state))]
        before = {key: holder.hgetall(key) for key in (k.state, k.pending, k.late)}
        await index.check("h", [Document("x", text(9301), {"n": 1})])
        ids, _ = stored_contents(valkey_cluster.urls, "h")
        x = ids[b"x"]
        for key in (k.state, k.pending, k.late):
            holder.delete(key)
            if before[key]:
                holder.hset(key, mapping=before[key])
        sig_group = int(holder.hget(k.state, "sg") or 0)  # as the state says (keys.sig_group_size)
        assert sig_group == keys.sig_group_size(CollectionParams.create("h", threshold=0.7).stored_bytes)
        for prefix, group in ((k.sig_prefix, sig_group), (k.doc_prefix, keys.DOC_GROUP)):
            lost = 0
            for c in clients:
                lost += (
                    c.hdel(f"{prefix}{x // group}", str(x % group))
                    if list(c.scan_iter(match=f"{prefix}{x // group}"))
                    else 0
                )
            assert lost == 1
    finally:
        for c in clients:
            c.close()
    await index.check("h", [Document("y", text(9302), {"n": 2})])
    ids, found = stored_contents(valkey_cluster.urls, "h")
    assert ids[b"y"] == x == ids[b"x"]  # the fault: two ids name one ordinal, y's record is there
    with pytest.raises(DocumentNotFound):
        await index.get_document("h", "x")  # not y's record
    [again] = await index.check("h", [Document("x", text(9301), {"n": 1})])  # x written again ...
    assert again.inserted and not again.duplicate
    await index.delete_document("h", "x")  # ... and deleted: neither touches y
    ids, found = stored_contents(valkey_cluster.urls, "h")
    assert b"x" not in ids
    assert_every_id_names_its_own_record(ids, found)
    assert (await index.get_document("h", "y")).metadata == {"n": 2}
    assert [m.id for m in await index.query("h", text(9302))] == ["y"]


@pytest.mark.slow
async def test_a_write_fewer_replicas_confirm_is_a_503_and_its_retry_converges(tmp_path: Any) -> None:
    import os
    import signal

    cluster = LocalCluster(tmp_path / "replicated", nodes=3, replicas=1)
    cluster.start()
    store = ClusterStore.from_url(cluster.url, timeout=1.0, min_replicas=1)
    greedy = ClusterStore.from_url(cluster.url, timeout=1.0, min_replicas=2)  # more than any shard has
    replicas = [node.pid for node in cluster.nodes[3:] if node.pid is not None]
    try:
        index = Index(store)
        await index.create_collection(CollectionParams.create("r", threshold=0.7))
        await index.check("r", [Document("a", text(9400))])
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="acknowledged by 1 of the 2 replicas"):
            await Index(greedy).check("r", [Document("g", text(9401))])
        assert time.monotonic() - started < 4
        for pid in replicas:
            os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable, match="acknowledged by 0 of the 1 replicas"):
                await index.check("r", [Document("b", text(9402))])
        finally:
            for pid in replicas:
                os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(cluster.wait_ok, 30)
        [b] = await index.check("r", [Document("b", text(9402))])  # the retry
        assert b.inserted and not b.duplicate
        assert [m.id for m in await index.query("r", text(9402))] == ["b"]
        [c] = await index.check("r", [Document("c", variant(text(9402), 1))])
        assert c.duplicate_of == "b"
        assert (await index.get_collection("r")).documents == 3
    finally:
        for pid in replicas:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        await store.close()
        await greedy.close()
        cluster.stop()
