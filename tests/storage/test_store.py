"""The store against a real valkey-server and a real 3-node cluster (each test runs on both): round
trips, replace/delete, group splits, scripts reload. Signatures and band keys are random numpy arrays
here: the store does not care what they mean."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis

from neardup.storage import RedisStore, Store, records
from neardup.storage.keys import (
    BAND_GROUP_TARGET,
    CLUSTER_BAND_FAMILIES,
    CLUSTER_BAND_TARGET,
    CLUSTER_ID_FAMILIES,
    CLUSTER_ID_TARGET,
    ID_GROUP_TARGET,
    CollectionKeys,
    cluster_groups,
    initial_shape,
)
from neardup.storage.store import CheckBatch, CheckReply, Mode, NeedOldBands

pytestmark = pytest.mark.anyio

BANDS, PERM = 16, 128
rng = np.random.default_rng(7)


async def new_collection(store: Store, name: str = "c") -> CollectionKeys:
    assert await store.create_collection(name, b'{"params": 1}', "g1") is None
    return CollectionKeys(name, "g1")


def random_batch(n: int) -> tuple[np.ndarray, np.ndarray]:
    sigs = rng.integers(0, 2**32 - 2, size=(n, PERM), dtype=np.uint32)
    bands = rng.integers(1, 2**64 - 1, size=(n, BANDS), dtype=np.uint64)
    return sigs, bands


async def send(
    store: Store,
    k: CollectionKeys,
    ids: list[str],
    sigs: np.ndarray,
    bands: np.ndarray,
    mode: Mode = "insert",
    empty: list[bool] | None = None,
    old: dict[int, bytes] | None = None,
    expected: dict[int, int] | None = None,
) -> CheckReply | NeedOldBands:
    n = len(ids)
    flags = b"".join(b"1" if e else b"0" for e in (empty or [False] * n))
    batch = CheckBatch(
        bands=BANDS,
        band_keys=bands.astype("<u8").tobytes(),
        signatures=sigs.astype("<u4").tobytes(),
        empties=flags,
        ids=[i.encode() for i in ids],
        records=[b"0:%d:%s" % (len(i), i.encode()) for i in ids],
        expected=[b"%d" % (expected or {}).get(i, 0) if i in (expected or {}) else b"" for i in range(n)],
        old_bands=[(old or {}).get(i, b"") for i in range(n)],
    )
    return await store.check(k, mode, batch, max_candidates=256)


def test_a_check_batch_fills_in_unknown_stored_versions_and_rejects_ragged_lists() -> None:
    batch = CheckBatch(bands=1, band_keys=b"k" * 16, signatures=b"s" * 8, empties=b"00", ids=[b"a", b"b"],
                       records=[b"ra", b"rb"])  # fmt: skip
    assert len(batch) == 2 and batch.expected == [b"", b""] and batch.old_bands == [b"", b""]
    with pytest.raises(ValueError, match="one record"):
        CheckBatch(bands=1, band_keys=b"", signatures=b"", empties=b"0", ids=[b"a", b"b"], records=[b"r"])


async def test_collection_registry_round_trip(store: Store) -> None:
    assert await store.create_collection("a", b"A", "g1") is None
    assert await store.create_collection("a", b"other", "g2") == b"A"
    assert await store.get_collection("a") == (b"A", 0)
    assert await store.get_collection("nope") is None
    assert await store.create_collection("b", b"B", "g3") is None
    assert await store.list_collections() == [(b"A", 0), (b"B", 0)]
    assert await store.drop_collection("a") is True
    assert await store.drop_collection("a") is False
    assert await store.list_collections() == [(b"B", 0)]


async def test_later_document_sees_earlier_one_in_shared_bucket(store: Store) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(3)
    bands[1, 5] = bands[0, 5]  # doc 1 shares one bucket with doc 0; doc 2 shares nothing
    reply = await send(store, k, ["a", "b", "c"], sigs, bands)
    assert isinstance(reply, CheckReply)
    assert reply.ordinals == [1, 2, 3]
    assert reply.candidates == [[], [1], []]
    assert reply.fetched == {}  # the candidate is in the batch: the caller has its signature
    # A later batch gets the stored signature and record of its candidates.
    sigs2, bands2 = random_batch(1)
    bands2[0, 5] = bands[0, 5]
    reply2 = await send(store, k, ["d"], sigs2, bands2)
    assert isinstance(reply2, CheckReply)
    assert reply2.candidates == [[1, 2]]
    # The record as sent, stamped with the server's clock (TIME), not the sender's (0 here).
    signature, record = reply2.fetched[1]
    assert signature == sigs[0].astype("<u4").tobytes() and record.endswith(b":1:a")
    assert abs(records.inserted_ms(record) - reply.now_ms) < 60_000 and reply.now_ms > 1_700_000_000_000
    assert (await store.get_collection("c")) == (b'{"params": 1}', 4)


async def test_read_mode_writes_nothing(store: Store, sync_client: redis.Redis | redis.RedisCluster) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(2)
    await send(store, k, ["a"], sigs[:1], bands[:1])
    before = sorted(sync_client.keys())
    bands[1, 0] = bands[0, 0]
    reply = await send(store, k, ["q"], sigs[1:], bands[1:], mode="read")
    assert isinstance(reply, CheckReply)
    assert reply.ordinals == [0] and reply.candidates == [[1]]
    assert sorted(sync_client.keys()) == before
    assert sync_client.hget(k.state, "docs") == b"1"


async def test_empty_documents_have_no_band_entries(store: Store) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(2)
    bands[1] = bands[0]
    reply = await send(store, k, ["e", "f"], sigs, bands, empty=[True, False])
    assert isinstance(reply, CheckReply)
    assert reply.candidates == [[], []]  # f shares every key with e's (ignored) keys
    [found] = await store.lookup(k, [b"e"])
    assert found is not None and found.ordinal == 1  # stored all the same


async def test_replace_needs_old_bands_then_removes_old_entries(store: Store) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(2)
    await send(store, k, ["a"], sigs[:1], bands[:1])
    need = await send(store, k, ["a"], sigs[1:], bands[1:])
    assert isinstance(need, NeedOldBands)
    assert need.stored == {0: (1, sigs[0].astype("<u4").tobytes())}
    assert (await store.get_collection("c")) == (b'{"params": 1}', 1)  # nothing written yet
    reply = await send(store, k, ["a"], sigs[1:], bands[1:], old={0: bands[0].tobytes()}, expected={0: 1})
    assert isinstance(reply, CheckReply) and reply.ordinals == [2]
    # The old version's buckets are empty now; the new one is found in its own.
    probe = await send(store, k, ["q"], sigs[:1], bands[:1], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[]]
    probe = await send(store, k, ["q"], sigs[1:], bands[1:], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[2]]
    [found] = await store.lookup(k, [b"a"])
    assert found is not None and found.ordinal == 2 and found.signature == sigs[1].astype("<u4").tobytes()
    assert (await store.get_collection("c")) == (b'{"params": 1}', 1)


async def test_a_batch_sent_back_for_old_bands_leaves_its_new_ids_unwritten(store: Store) -> None:
    # "n" is new, "a" replaces a stored version: the first call must write nothing at all (the new
    # id included), and the second one stores both.
    k = await new_collection(store)
    sigs, bands = random_batch(3)
    await send(store, k, ["a"], sigs[:1], bands[:1])
    need = await send(store, k, ["n", "a"], sigs[1:], bands[1:])
    assert isinstance(need, NeedOldBands) and list(need.stored) == [1]
    assert await store.lookup(k, [b"n"]) == [None]
    assert (await store.get_collection("c")) == (b'{"params": 1}', 1)
    reply = await send(
        store, k, ["n", "a"], sigs[1:], bands[1:], old={1: bands[0].tobytes()}, expected={1: 1}
    )
    assert isinstance(reply, CheckReply) and reply.ordinals == [2, 3]
    found = await store.lookup(k, [b"n", b"a"])
    assert [f.ordinal if f else None for f in found] == [2, 3]


async def test_same_id_twice_in_a_batch_keeps_the_later(store: Store) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(2)
    reply = await send(store, k, ["a", "a"], sigs, bands)
    assert isinstance(reply, CheckReply) and reply.ordinals == [1, 2]
    probe = await send(store, k, ["q"], sigs[:1], bands[:1], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[]]
    assert (await store.get_collection("c")) == (b'{"params": 1}', 1)


async def test_delete_removes_everything(store: Store, sync_client: redis.Redis | redis.RedisCluster) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(2)
    bands[1, 3] = bands[0, 3]
    await send(store, k, ["a", "b"], sigs, bands)
    assert await store.delete(k, b"a", 1, bands[0].tobytes()) is True
    assert await store.delete(k, b"a", 1, bands[0].tobytes()) is False
    assert await store.lookup(k, [b"a", b"b"]) == [None, (await store.lookup(k, [b"b"]))[0]]
    probe = await send(store, k, ["q"], sigs[:1], bands[:1], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[2]]  # only b's shared bucket
    assert sync_client.hget(k.state, "docs") == b"1"
    if isinstance(store, RedisStore):
        assert sync_client.hget(k.state, "bN") == str(BANDS).encode()  # b's 16 entries, none of a's
    assert sync_client.hlen(k.sig_group(0)) == 1 and sync_client.hlen(k.doc_group(0)) == 1


async def test_delete_of_a_replaced_version_reports_the_current_one(store: Store) -> None:
    k = await new_collection(store)
    sigs, bands = random_batch(1)
    await send(store, k, ["a"], sigs, bands)
    outcome = await store.delete(k, b"a", 99, b"")
    assert not isinstance(outcome, bool) and outcome.ordinal == 1
    assert (await store.get_collection("c")) == (b'{"params": 1}', 1)


async def test_groups_split_and_every_entry_stays_findable(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    store, sync_client = standalone_store, sync_redis
    k = await new_collection(store)
    n = 3000
    sigs, bands = random_batch(n)
    for start in range(0, n, 500):
        ids = [f"doc-{i}" for i in range(start, start + 500)]
        reply = await send(store, k, ids, sigs[start : start + 500], bands[start : start + 500], mode="put")
        assert isinstance(reply, CheckReply)
    state = {
        str(f, "ascii") if isinstance(f, bytes) else f: int(v)
        for f, v in sync_client.hgetall(k.state).items()
        if f != b"gen"
    }
    groups = 2 ** state["bL"] + state["bS"]
    assert state["bN"] == n * BANDS
    assert state["bN"] / groups <= BAND_GROUP_TARGET  # split as it grew, no size declared up front
    assert sync_client.object("encoding", k.band_group(0)) == b"listpack"
    assert sync_client.object("encoding", k.sig_group(0)) == b"listpack"
    probe = await send(store, k, [f"q{i}" for i in range(0, n, 97)], sigs[::97], bands[::97], mode="read")
    assert isinstance(probe, CheckReply)
    assert probe.candidates == [[i + 1] for i in range(0, n, 97)]
    found = await store.lookup(k, [f"doc-{i}".encode() for i in range(0, n, 97)])
    assert [f.ordinal if f else None for f in found] == [i + 1 for i in range(0, n, 97)]
    # Dropping the collection removes every key it had, found from its state alone.
    assert await store.drop_collection("c") is True
    assert sync_client.dbsize() == 0


async def test_a_table_far_over_target_catches_up_a_few_splits_per_document(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    # A collection written under a larger group target (an older version) is far over the current
    # one: it must not split every group in one call (one script would block the server for as long
    # as it takes), but a few per document, and stay correct meanwhile.
    store, sync_client = standalone_store, sync_redis
    k = await new_collection(store)
    sigs, bands = random_batch(1200)
    sync_client.hset(k.state, "bN", 1_000_000)  # as if a million band entries were there
    for start in range(0, 1200, 300):
        reply = await send(store, k, [f"d{i}" for i in range(start, start + 300)], sigs[start : start + 300],
                           bands[start : start + 300], mode="put")  # fmt: skip
        assert isinstance(reply, CheckReply)
    state = {f.decode(): v for f, v in sync_client.hgetall(k.state).items()}
    splits = 2 ** int(state["bL"]) + int(state["bS"]) - 1
    assert 0 < splits <= 4 * 1200  # at most 4 splits per document: still catching up
    probe = await send(store, k, ["q1", "q2"], sigs[[5, 1100]], bands[[5, 1100]], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[6], [1101]]


async def test_stale_generation_and_missing_collection_are_reported(store: Store) -> None:
    from neardup.storage.errors import CollectionMissing, GenerationChanged

    k = await new_collection(store)
    sigs, bands = random_batch(1)
    with pytest.raises(GenerationChanged):
        await send(store, CollectionKeys("c", "other"), ["a"], sigs, bands)
    await store.drop_collection("c")
    with pytest.raises(CollectionMissing):
        await send(store, k, ["a"], sigs, bands)


async def test_scripts_are_reloaded_after_script_flush(
    store: Store, sync_client: redis.Redis | redis.RedisCluster
) -> None:
    k = await new_collection(store)
    sync_client.script_flush()
    assert await store.lookup(k, [b"a"]) == [None]


def test_cluster_group_counts_follow_the_capacity_and_the_bands() -> None:
    # without a capacity: one group per family (grown by splitting)
    assert cluster_groups(0, 16) == (CLUSTER_BAND_FAMILIES, 0, CLUSTER_ID_FAMILIES, 0)
    for capacity in (1_000, 100_000, 3_000_000):
        for bands in (8, 16, 32):
            families, level, id_families, id_level = cluster_groups(capacity, bands)
            assert (families, id_families) == (CLUSTER_BAND_FAMILIES, CLUSTER_ID_FAMILIES)
            # at most the target fields per group on average, and no more than twice the groups needed
            for fields, count, first_level, target in (
                (capacity * bands, families, level, CLUSTER_BAND_TARGET),
                (capacity, id_families, id_level, CLUSTER_ID_TARGET),
            ):
                groups = count << first_level
                assert fields / target <= groups
                assert first_level == 0 or groups < 2 * fields / target
    assert cluster_groups(3_000_000, 32)[1] == cluster_groups(3_000_000, 16)[1] + 1


async def test_a_collection_sized_up_front_does_not_split_below_its_capacity(
    standalone_store: RedisStore, sync_redis: redis.Redis
) -> None:
    store, sync_client = standalone_store, sync_redis
    shape = initial_shape(2000, BANDS)
    band_groups, id_groups = 2 ** shape[0] + shape[1], 2 ** shape[2] + shape[3]
    assert band_groups == -(-2000 * BANDS // BAND_GROUP_TARGET) and id_groups == -(-2000 // ID_GROUP_TARGET)
    assert await store.create_collection("sized", b"{}", "g1", capacity=2000, bands=BANDS) is None
    k = CollectionKeys("sized", "g1")
    sigs, bands = random_batch(2000)
    for start in range(0, 2000, 500):
        reply = await send(store, k, [f"d{i}" for i in range(start, start + 500)], sigs[start : start + 500],
                           bands[start : start + 500], mode="put")  # fmt: skip
        assert isinstance(reply, CheckReply)
    state = {f.decode(): int(v) for f, v in sync_client.hgetall(k.state).items() if f != b"gen"}
    assert (state["bL"], state["bS"], state["iL"], state["iS"]) == shape  # no split so far
    probe = await send(store, k, ["q1", "q2"], sigs[[7, 1999]], bands[[7, 1999]], mode="read")
    assert isinstance(probe, CheckReply) and probe.candidates == [[8], [2000]]
    # Past its capacity it grows as any other collection does.
    more_sigs, more_bands = random_batch(600)
    reply = await send(store, k, [f"e{i}" for i in range(600)], more_sigs, more_bands, mode="put")
    assert isinstance(reply, CheckReply)
    grown = {f.decode(): int(v) for f, v in sync_client.hgetall(k.state).items() if f != b"gen"}
    assert 2 ** grown["bL"] + grown["bS"] > band_groups


async def test_dropping_a_collection_sized_for_millions_removes_its_keys_without_naming_them_all(
    store: Store, sync_client: redis.Redis | redis.RedisCluster
) -> None:
    """A capacity hint of 2^27 documents names ~2^27 band groups, of which a few documents write a few
    dozen: the drop scans for the keys that exist instead of unlinking every name (which took minutes
    and gigabytes of memory, and made a DELETE time out)."""
    capacity = 2**27
    assert await store.create_collection("huge", b"{}", "g1", capacity=capacity, bands=BANDS) is None
    k = CollectionKeys("huge", "g1")
    sigs, bands = random_batch(5)
    assert isinstance(await send(store, k, [f"d{i}" for i in range(5)], sigs, bands, mode="put"), CheckReply)
    other = await new_collection(store, "kept")
    await send(store, other, ["x"], *random_batch(1), mode="put")

    def data_keys(k: CollectionKeys) -> list[bytes]:
        return list(sync_client.scan_iter(match=k.data_pattern, count=1000))

    assert len(data_keys(k)) >= BANDS  # the documents' band groups, ids, signatures and records
    kept = sorted(data_keys(other))
    assert await asyncio.wait_for(store.drop_collection("huge"), timeout=60) is True
    assert data_keys(k) == []
    assert sorted(data_keys(other)) == kept  # another collection's keys are untouched
