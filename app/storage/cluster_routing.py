"""The plumbing of the cluster store: one redis-py ``RedisCluster`` client, script calls routed by slot
(a node's keys go in one call), the retry after a slot-map change, the replication wait, and the guard
that turns every failure into ``StoreDown`` within a deadline."""

from __future__ import annotations

import asyncio
from binascii import crc_hqx
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
from redis import exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from neardup.storage import keys
from neardup.storage.cluster_layout import KeyGroups, Layout, NodeOps, OpsFor
from neardup.storage.errors import (
    CollectionMissing,
    GenerationChanged,
    StoreDown,
    closed_transport,
    permanent,
)
from neardup.storage.scripts import MODULE_NAME, Script, module_refused, module_runs, uses_module

#: A pending ordinal older than this is taken for abandoned and made dead; a live check that takes
#: longer is refused (a 503), so it should exceed the longest a live check takes (a store call is
#: bounded by 8 store timeouts, see guard). A collection keeps max(ABANDON_MS, 20 x its creator's
#: timeout) in its state, one time for every process.
ABANDON_MS = 60_000
#: Keys whose node is remembered (group keys repeat from batch to batch).
_NODE_CACHE = 1 << 17
#: Errors after which the slot map may be stale: refresh it and try again. READONLY is one: a call
#: that writes reached a node that is a replica now (a graceful failover switched it with its replica).
_RESHARD = (
    rx.MovedError, rx.AskError, rx.TryAgainError, rx.ClusterDownError, rx.ClusterError, rx.ReadOnlyError,
)  # fmt: skip
#: Calls of one ``ClusterRouting.retrying``: the first, and those after learning the slot map again.
_SETTLE_TRIES = 3
#: State scripts that write nothing a 2xx depends on: reads. The reservation is waited for: a
#: failover that lost it would hand its ordinals out again (docs/design.md, "The commit point").
_UNSYNCED = frozenset(
    {
        "cluster_status",
        "cluster_get",
        "cluster_bands",
        "cluster_ids",
        "cluster_window",
        "clock",
        "cluster_journal",
        "site",
    }
)

#: State scripts with a module variant (its loop one command of neardup's module where the state's node
#: has it): the site steps' link loop, ND.LINK.
_MODULE_VARIANTS = frozenset({"cluster_sites"})

_T = TypeVar("_T")


def as_bytes(value: Any) -> bytes:
    """A reply value (``str`` where a reply parser decoded it, else bytes-like) as bytes."""
    return value.encode() if isinstance(value, str) else bytes(value)


def cluster_client(url: str, *, timeout: float, max_connections: int) -> RedisCluster:
    """The client of ``ClusterStore.from_url``: ``url`` and the seed nodes after it, comma-separated."""
    first, *others = url.split(",")
    seeds = [_seed(other) for other in others if other.strip()]
    return RedisCluster.from_url(
        first,
        startup_nodes=seeds or None,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        max_connections=max_connections,
        # No retry on a node's connection: a lost connection is a slot-map change to learn first
        # (``retrying``), not a call to send again to the same node, which may be a replica by now (a
        # graceful failover's old primary then refuses WAITAOF: a 503). The synchronous Retry once
        # passed here retried nothing on these asyncio connections; redis-py 8.2 makes it a real one.
        retry=Retry(NoBackoff(), 0),
    )


def raise_for_status(reply: Any) -> None:
    """The errors a state script answers with: the collection is gone, is another generation, or lost
    this reservation."""
    status = reply[0] if isinstance(reply, list) and reply else reply
    if status == b"nocollection":
        raise CollectionMissing()
    if status == b"stale":
        raise GenerationChanged()
    if status == b"lost":
        raise StoreDown(
            "the collection's state lost this reservation (a failover to a replica that missed it)"
        )


def _deadline(seconds: float) -> AbstractAsyncContextManager[Any]:
    # asyncio.timeout exists from Python 3.11; on 3.10 the per-command socket timeouts still apply.
    timeout = getattr(asyncio, "timeout", None)
    return timeout(seconds) if timeout is not None else nullcontext()


class ClusterRouting:
    """Wraps one ``redis.asyncio.cluster.RedisCluster`` (never subclassed): routes keys and script calls
    to the nodes that own their slots, batches per-node writes, remembers each collection generation's
    layout, and turns every failure into StoreDown (inside :meth:`guard`). The store and its retention
    each hold this one object."""

    def __init__(self, client: RedisCluster, *, timeout: float = 5.0, min_replicas: int = 0) -> None:
        self._client = client
        self._timeout = timeout
        #: NEARDUP_MIN_REPLICAS: every write a 2xx depends on waits for this many replicas (WAIT)
        self._min_replicas = min_replicas
        self._layouts: dict[tuple[str, str], Layout] = {}
        self._init_lock = asyncio.Lock()
        #: key -> node that serves its slot, until the slot map is learned again
        self._nodes: dict[str, ClusterNode] = {}
        self._scripts = {
            name: Script(name)
            for name in (
                "cluster_init", "cluster_drop", "cluster_reserve", "cluster_stamp", "cluster_status",
                "cluster_advance", "cluster_ops", "cluster_get", "cluster_bands", "cluster_ids",
                "cluster_unregister", "cluster_fence", "cluster_window", "clock", "cluster_blobs",
                "cluster_sites", "cluster_journal", "site",
            )
        }  # fmt: skip
        self._scripts["cluster_ops_module"] = Script("cluster_ops", "module")
        self._scripts["cluster_sites_module"] = Script("cluster_sites", "module")
        #: the stamp of a collection with a site_field: it counts the pages with _common.lua's functions
        self._scripts["cluster_stamp_sites"] = Script("cluster_stamp", common=True)
        self._scripts["cluster_module_probe"] = Script("cluster_module_probe", "module")
        #: node name -> whether it has neardup's module (ND.BUCKETS): asked once per node, asked again
        #: after the module refused a command there (scripts.module_refused)
        self._modules: dict[str, bool] = {}

    @property
    def client(self) -> RedisCluster:
        return self._client

    def abandon_ms(self) -> int:
        """How old a pending ordinal must be to count as abandoned (``ABANDON_MS``, at least)."""
        return max(ABANDON_MS, int(self._timeout * 20_000))

    async def close(self) -> None:
        await self._client.aclose()

    @asynccontextmanager
    async def guard(self, round_trips: int = 8) -> AsyncIterator[None]:
        # Every failure (node down, timeout, resharding that did not settle) leaves as StoreDown; the
        # whole call has a deadline so a hung node turns into a prompt 503, not a pile of requests.
        try:
            async with _deadline(self._timeout * round_trips):
                await self._ensure_initialized()
                yield
        except rx.ResponseError as error:
            raise permanent(error) or StoreDown(f"{type(error).__name__}: {error}") from error
        except (rx.RedisError, rx.RedisClusterException, OSError, TimeoutError) as error:
            raise StoreDown(f"{type(error).__name__}: {error}") from error
        except RuntimeError as error:
            if not closed_transport(error):
                raise
            raise StoreDown(f"the connection closed under the client: {error}") from error

    # --- routing --------------------------------------------------------------------------------------

    def _node(self, key: str) -> ClusterNode:
        cached = self._nodes.get(key)
        if cached is not None:
            return cached
        # Data keys carry no hash tag, so their slot is CRC16(key) mod 16384 (binascii's CRC-CCITT
        # XMODEM is the cluster's CRC16), much cheaper than the client's general path.
        slot = self._client.keyslot(key) if "{" in key else crc_hqx(key.encode(), 0) & 16383
        node = self._client.nodes_manager.get_node_from_slot(slot)
        if node is None:
            raise rx.ClusterDownError(f"no node serves the slot of {key!r}")
        if len(self._nodes) > _NODE_CACHE:
            self._nodes.clear()
        self._nodes[key] = node
        return node

    async def run_script(
        self,
        name: str,
        keys_: list[str],
        args: Sequence[Any],
        node: ClusterNode | None = None,
        *,
        touch: str = "",
    ) -> Any:
        """One script call: routed by its keys (one slot), or on ``node`` when its keys are in ARGV.
        With ``touch`` (a key of that node's) and ``min_replicas``, the call waits for replicas
        (:meth:`_synced`). Not retried: callers that may meet a slot-map change go through
        :meth:`retrying`."""
        script = self._scripts[name]
        target = node if node is not None else self._node(keys_[0])
        if touch and self._min_replicas:
            command = ("EVALSHA", script.sha, len(keys_), *keys_, *args)
            try:
                return (await self._synced(target, [command], touch))[0]
            except rx.NoScriptError as error:
                await self._load(script, target, error)
                return (await self._synced(target, [command], touch))[0]
        try:
            return await self._client.execute_command(
                "EVALSHA", script.sha, len(keys_), *keys_, *args, target_nodes=target
            )
        except rx.NoScriptError as error:
            await self._load(script, target, error)
            return await self._client.execute_command(
                "EVALSHA", script.sha, len(keys_), *keys_, *args, target_nodes=target
            )

    async def _load(self, script: Script, target: ClusterNode, error: rx.NoScriptError) -> None:
        """Load ``script`` where it was missing: on ``target``, and on the node that answered NOSCRIPT
        when the client followed a MOVED there (a primary since a failover: scripts are not
        replicated)."""
        answered = getattr(error, "connection", None)  # the node that answered (redis-py sets it)
        nodes = [target]
        if isinstance(answered, ClusterNode) and answered.name != target.name:
            nodes.append(answered)
        for node in nodes:
            await self._client.execute_command("SCRIPT", "LOAD", script.source, target_nodes=node)

    async def run_state_script(self, name: str, k: keys.CollectionKeys | str, args: Sequence[Any]) -> Any:
        """One script call on the collection's state slot (its state, pending and late keys), retried
        once after a slot-map change; a script that writes waits for replicas."""
        collection = k if isinstance(k, str) else k.collection
        slot_keys = [keys.state(collection), keys.pending(collection), keys.late(collection)]
        touch = "" if name in _UNSYNCED else slot_keys[0]
        if name not in _MODULE_VARIANTS:
            return await self.retrying(lambda: self.run_script(name, slot_keys, args, touch=touch))

        async def on_its_node() -> Any:  # the module variant where the state's node has the module
            def call(uses: bool) -> Awaitable[Any]:
                return self.run_script(f"{name}_module" if uses else name, slot_keys, args, touch=touch)

            return await self._on_node(self._node(slot_keys[0]), call)

        return await self.retrying(on_its_node)

    async def _synced(self, node: ClusterNode, commands: Sequence[Sequence[Any]], touch: str) -> list[Any]:
        """Send ``commands`` on one connection of ``node``, then WAIT until ``min_replicas``
        replicas acknowledged them and WAITAOF until the node's own append-only file holds them; fewer
        replicas, or no fsync, within half the store timeout each is StoreDown (a 503), and the caller
        does not count the write as done. Both wait for this connection's last write, so the pipeline
        writes (SET, then DEL) a scratch key in ``touch``'s slot first: the waits then cover
        everything this node applied before, also when the commands changed nothing because an earlier
        try, answered with a 503, wrote it already. WAITAOF costs nothing with ``appendfsync always``
        (written before the reply), up to a second with ``everysec``; a node without the append-only
        file refuses it, and NEARDUP_MIN_REPLICAS refuses such a node (a primary restarted within the
        node timeout would reload less than its replicas confirmed, and they would resync from it).
        Returns the commands' replies."""
        scratch = f"{keys.NAMESPACE}:wait:{{{_slot_tag(self._client.keyslot(touch))}}}"
        wait_ms = max(1, int(self._timeout * 500))
        pipeline = [
            *commands,
            ("SET", scratch, "1"),
            ("DEL", scratch),
            ("WAIT", self._min_replicas, wait_ms),
            ("WAITAOF", 1, 0, wait_ms),
        ]
        connection = node.acquire_connection()
        try:
            reconnect = getattr(node, "disconnect_if_needed", None)  # redis-py >= 6
            if reconnect is not None:
                await reconnect(connection)
            await connection.send_packed_command(connection.pack_commands(pipeline))
            replies: list[Any] = []
            for command in pipeline:
                try:
                    replies.append(await node.parse_response(connection, command[0]))
                except rx.ResponseError as error:
                    replies.append(error)
        except BaseException:
            await connection.disconnect()  # replies may be left unread on it
            raise
        finally:
            release = getattr(node, "release", None)
            if release is not None:
                release(connection)
            else:  # older redis-py: the free list itself
                node._free.append(connection)
        for reply in replies[:-1]:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(replies[-1], Exception):
            raise StoreDown(
                f"NEARDUP_MIN_REPLICAS needs the append-only file on every primary (appendonly yes, "
                f"WAITAOF: Valkey or Redis 7.2 and later); {node.name} answered: {replies[-1]}"
            )
        acknowledged = int(replies[-2])
        if acknowledged < self._min_replicas:
            raise StoreDown(
                f"written on {node.name}, but acknowledged by {acknowledged} of the "
                f"{self._min_replicas} replicas required (NEARDUP_MIN_REPLICAS) within {wait_ms} ms"
            )
        if int(replies[-1][0]) < 1:
            raise StoreDown(f"written on {node.name}, but not in its append-only file within {wait_ms} ms")
        return replies[: len(commands)]

    async def keyed_write(self, key: str, *command: Any) -> Any:
        """One plain write command on ``key``, waiting for replicas like the scripts' writes."""
        if not self._min_replicas:
            return await self._client.execute_command(*command)

        async def attempt() -> Any:
            return (await self._synced(self._node(key), [command], key))[0]

        return await self.retrying(attempt)

    async def retrying(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """``call()``, and again after learning the slot map anew if it met a slot-map change or a lost
        connection (up to ``_SETTLE_TRIES`` calls, a short pause before each further one: the node asked
        for the map may learn of the change a moment after the node that refused)."""
        for attempt in range(_SETTLE_TRIES - 1):
            try:
                return await call()
            except (*_RESHARD, rx.ConnectionError):
                pass
            except rx.ResponseError as error:
                if "non local key" not in str(error) and "MOVED" not in str(error):
                    raise
            # The slot map changed (or a node came back): learn it again and try again. Every write
            # here is idempotent (appends skip an ordinal already there; swaps accept their own result).
            if attempt:
                await asyncio.sleep(0.05 * attempt)
            async with self._init_lock:
                await self._client.nodes_manager.initialize()
                self._nodes.clear()
        return await call()

    async def _ensure_initialized(self) -> None:
        # redis-py initializes the cluster client on its first command; many first commands at once
        # (a service starting under load) each start an initialization and break each other's
        # connections. One at a time, here.
        if self._client._initialize:
            async with self._init_lock:
                if self._client._initialize:
                    await self._client.initialize()

    async def _has_module(self, node: ClusterNode) -> bool:
        """Whether this node has this release's neardup module loaded (False where MODULE LIST is
        refused, or its module is another build's: it reports another version, scripts.uses_module, or
        refuses ND.BUCKETS as cluster_ops.lua sends it or ND.LINK as cluster_sites.lua does,
        cluster_module_probe.lua)."""
        known = self._modules.get(node.name)
        if known is None:
            try:
                listed = await self._client.execute_command("MODULE", "LIST", target_nodes=node)
            except rx.ResponseError:
                listed = []
            if isinstance(listed, dict):  # {node name: answer} in some redis-py versions
                listed = next(iter(listed.values()), [])
            # Each entry is [b"name", b"neardup", b"ver", 1, ...], or a dict where a reply parser ran.
            entries = (m if isinstance(m, dict) else dict(zip(m[::2], m[1::2], strict=False)) for m in listed)
            known = any(e.get(b"name") == MODULE_NAME and uses_module(int(e.get(b"ver", 0))) for e in entries)
            if known:
                record = b"\0" * (12 + keys.ORDINAL_WIDTH)  # a band record of a bucket nobody has
                # in a slot this node serves: the module refuses a group key of another node's slot
                prefix = f"{keys.NAMESPACE}:module:probe:{{{_slot_tag(self._slot_of(node))}}}:b:"
                args = [prefix, keys.ORDINAL_WIDTH, record]
                known = await module_runs(lambda: self.run_script("cluster_module_probe", [], args, node))
            self._modules[node.name] = known
        return known

    def _slot_of(self, node: ClusterNode) -> int:
        """A slot ``node`` serves, by the client's slot map (0 if it serves none there)."""
        for slot, serving in self._client.nodes_manager.slots_cache.items():
            if serving and serving[0].name == node.name:
                return slot
        return 0

    async def _on_node(self, node: ClusterNode, call: Any) -> Any:
        """Run ``call(uses_module)`` on the node; a node whose module refuses ND.BUCKETS (restarted
        without it or with another build) refuses it before the script writes anything: this call fails
        (a 503), the next asks again."""
        uses = await self._has_module(node)
        try:
            return await call(uses)
        except rx.ResponseError as error:
            if uses and module_refused(error):
                self._modules.pop(node.name, None)
            raise

    async def _ops(
        self, per_node: dict[str, tuple[ClusterNode, NodeOps]], sync: bool = True
    ) -> dict[str, Any]:
        # A node with nothing to write is visited only to wait for its replicas.
        waits = sync and self._min_replicas > 0
        names = [name for name, (_, ops) in per_node.items() if waits or not ops.empty()]

        def run(node: ClusterNode, ops: NodeOps) -> Any:
            return lambda uses: self.run_script(
                "cluster_ops_module" if uses else "cluster_ops",
                [],
                ops.args(),
                node,
                touch=ops.touch if sync else "",
            )

        replies = await asyncio.gather(*(self._on_node(per_node[n][0], run(*per_node[n])) for n in names))
        nothing: list[Any] = [0, [], []]  # what cluster_ops.lua answers for no ops
        return {name: nothing for name in per_node} | dict(zip(names, replies, strict=True))

    def _group(self, ops: dict[str, tuple[ClusterNode, NodeOps]], key: str) -> NodeOps:
        node = self._node(key)
        entry = ops.get(node.name)
        if entry is None:
            entry = ops[node.name] = (node, NodeOps(touch=key))
        return entry[1]

    # --- reads and writes of the data shards ----------------------------------------------------------

    async def read_fields(self, pairs: Sequence[tuple[str, bytes | str]]) -> list[bytes]:
        """HGET of every (key, field), one script call per node, values in order (b'' if absent)."""
        return await self._read_pairs("cluster_get", [], pairs)

    async def read_blobs(self, g: KeyGroups, ordinals: Sequence[int]) -> list[bytes]:
        """The passage blobs of these ordinals, whole (every part), one call per node (b'' if absent)."""
        head: list[bytes | str | int] = [keys.PASSAGE_PART, keys.PASSAGE_GROUP]
        return await self._read_pairs("cluster_blobs", head, [g.blob(o) for o in ordinals])

    async def _read_pairs(
        self, script: str, head: list[bytes | str | int], pairs: Sequence[tuple[str, bytes | str]]
    ) -> list[bytes]:
        """``script`` on each node with ``head`` and that node's (key, field) pairs: a value per pair."""
        if not pairs:
            return []

        async def attempt() -> list[bytes]:
            by_node: dict[str, tuple[ClusterNode, list[int]]] = {}
            for i, (key, _) in enumerate(pairs):
                node = self._node(key)
                by_node.setdefault(node.name, (node, []))[1].append(i)
            # (node names are host:port strings)
            names = list(by_node)

            def flat(idx: list[int]) -> list[bytes | str]:
                out: list[bytes | str] = []
                for i in idx:
                    out += pairs[i]
                return out

            replies = await asyncio.gather(
                *(self.run_script(script, [], [*head, *flat(by_node[n][1])], by_node[n][0]) for n in names)
            )
            values: list[bytes] = [b""] * len(pairs)
            for name, reply in zip(names, replies, strict=True):
                for i, value in zip(by_node[name][1], reply, strict=True):
                    values[i] = bytes(value)
            return values

        return await self.retrying(attempt)

    async def read_ids(self, g: KeyGroups, ids: Sequence[bytes]) -> list[bytes]:
        """The ordinal each id names (b'' if none), one call per node (cluster_ids.lua: the node finds
        each id's group in its family)."""
        if not ids:
            return []

        async def attempt() -> list[bytes]:
            by_node: dict[str, tuple[ClusterNode, list[int], list[bytes | str | int]]] = {}
            for i, doc_id in enumerate(ids):
                key = g.ids(doc_id)
                node = self._node(key)
                entry = by_node.get(node.name)
                if entry is None:
                    entry = by_node[node.name] = (node, [], [g.id_families, g.id_level])
                entry[1].append(i)
                entry[2].extend((key, doc_id))
            names = list(by_node)
            replies = await asyncio.gather(
                *(self.run_script("cluster_ids", [], by_node[n][2], by_node[n][0]) for n in names)
            )
            values: list[bytes] = [b""] * len(ids)
            for name, reply in zip(names, replies, strict=True):
                for i, value in zip(by_node[name][1], reply, strict=True):
                    values[i] = bytes(value)
            return values

        return await self.retrying(attempt)

    async def read_buckets(
        self, g: KeyGroups, band_fields: Sequence[bytes], *, postings: bool = False
    ) -> list[bytes]:
        """The buckets of these band keys, one packed call per node (see cluster_bands.lua); with
        ``postings``, the postings of these fingerprint keys (4 bytes each) from the passage index's
        families, which take the same records and calls. The records are built and grouped by node
        with numpy, a node looked up once per family: a search reads ~1,500 postings a call."""
        n = len(band_fields)
        if not n:
            return []
        if postings:
            shape, width, mask = (g.k.passage_family_prefix, g.passage_families, 0), 4, g.passage_mask
            family_key = g.passage_family
        else:
            shape, width, mask = (g.k.band_family_prefix, g.band_families, g.band_level), 8, g.band_mask
            family_key = g.family
        raw = np.frombuffer(b"".join(band_fields), np.uint8).reshape(n, width)
        family = raw[:, :4].copy().view("<u4").ravel() & np.uint32(mask)
        records = np.empty((n, 4 + width), np.uint8)
        records[:, :4] = family.astype(">u4").view(np.uint8).reshape(n, 4)
        records[:, 4:] = raw
        distinct, of_family = np.unique(family, return_inverse=True)

        async def attempt() -> list[bytes]:
            nodes = [self._node(family_key(int(f))) for f in distinct]
            targets = {node.name: node for node in nodes}
            names = list(targets)
            number = {name: j for j, name in enumerate(names)}
            node_of = np.array([number[node.name] for node in nodes], np.int64)[of_family]
            order = np.argsort(node_of, kind="stable")
            bounds = np.searchsorted(node_of[order], np.arange(len(names) + 1))
            picks = [order[bounds[j] : bounds[j + 1]] for j in range(len(names))]

            def read(node: ClusterNode, blob: bytes) -> Any:
                async def call(uses: bool) -> Any:
                    if uses:
                        command = ("ND.BUCKETSGET", "1", *shape, blob, width)
                        return await self._client.execute_command(*command, target_nodes=node)
                    return await self.run_script("cluster_bands", [], [*shape, blob, width], node)

                return self._on_node(node, call)

            replies = await asyncio.gather(
                *(
                    read(targets[name], records[pick].tobytes())
                    for name, pick in zip(names, picks, strict=True)
                )
            )
            values: list[bytes] = [b""] * n
            for pick, reply in zip(picks, replies, strict=True):
                for i, value in zip(pick.tolist(), reply, strict=True):
                    values[i] = value
            return values

        return await self.retrying(attempt)

    async def write(
        self, build: Callable[[OpsFor], None], *, sync: bool = True, claims: bool = False
    ) -> list[tuple[int, Any]]:
        """Build the per-node ops (again after a slot-map refresh) and run them; returns the swap
        answers as (swap_index tag, answer) pairs (with ``claims``, the claim answers as
        (claim_index tag, answer)). ``sync``: wait for ``min_replicas`` on every node written (pass
        False only for writes no answer depends on: cleanups, undos)."""

        async def attempt() -> list[tuple[int, Any]]:
            per_node: dict[str, tuple[ClusterNode, NodeOps]] = {}
            build(lambda key: self._group(per_node, key))
            results = await self._ops(per_node, sync)
            return [
                (tag, answer)
                for name, (_, ops) in per_node.items()
                for tag, answer in zip(
                    ops.claim_index if claims else ops.swap_index,
                    results[name][2 if claims else 1],
                    strict=True,
                )
            ]

        return await self.retrying(attempt)

    # --- layouts, the state node's clock, health ------------------------------------------------------

    async def groups(self, k: keys.CollectionKeys) -> KeyGroups:
        """The key names of this collection generation, its layout read from its state once."""
        cached = self._layouts.get((k.collection, k.gen))
        if cached is None:
            state: list[Any] = await self.retrying(
                lambda: self._client.hmget(k.state, ["gen", "bG", "bL", "iG", "iL", "sg", "pG", "sS"])
            )
            gen, families, level, id_families, id_level, sig_group, passage_families, sites = state
            if gen is None:
                raise CollectionMissing()
            if as_bytes(gen).decode() != k.gen:
                raise GenerationChanged()
            cached = Layout(
                int(families),
                int(level),
                int(id_families),
                int(id_level),
                int(sig_group),
                int(passage_families or 0),
                sites is not None,
            )
            self._layouts[(k.collection, k.gen)] = cached
        return KeyGroups(k, cached)

    def forget_layout(self, name: str, gen: str) -> None:
        """Forget a dropped generation's layout."""
        self._layouts.pop((name, gen), None)

    async def now_ms(self, k: keys.CollectionKeys) -> int:
        """The collection's clock (``scripts/_clock.lua``: the state node's time, kept from going
        back), the clock its scripts use."""
        async with self.guard(2):
            return int(await self.run_state_script("clock", k, []))

    async def ping(self) -> None:
        async with self.guard(2):
            await self._client.ping(target_nodes=RedisCluster.PRIMARIES)


@lru_cache(maxsize=1)
def _slot_tags() -> list[str]:
    """A hash tag for every slot (the first decimal number whose CRC16 lands there), computed once."""
    tags: list[str | None] = [None] * 16384
    missing, n = 16384, 0
    while missing:
        slot = crc_hqx(str(n).encode(), 0) & 16383
        if tags[slot] is None:
            tags[slot] = str(n)
            missing -= 1
        n += 1
    return [t for t in tags if t is not None]


def _slot_tag(slot: int) -> str:
    return _slot_tags()[slot]


def _seed(spec: str) -> ClusterNode:
    """``host:port`` (or a full ``redis://host:port`` URL, whose credentials come from the first)."""
    spec = spec.strip().split("://", 1)[-1].rsplit("@", 1)[-1].split("/", 1)[0]
    host, _, port = spec.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"cluster seed nodes are host:port, got {spec!r}")
    return ClusterNode(host.strip("[]"), int(port))
