"""Local servers for tests and benchmarks, never for production data: ``LocalCluster`` forms a Redis
Cluster of embedded valkey-server primaries on 127.0.0.1. The storage API (``neardup.storage``) does
not export it; test suites and ``bench/`` import it from here."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from neardup.storage.embedded import EmbeddedValkey

__all__ = ["LocalCluster", "find_cluster_ports"]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _port_pair_free(port: int, host: str = "127.0.0.1") -> bool:
    # A cluster node also listens on its bus port, port + 10000: both must be free.
    for candidate in (port, port + 10000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, candidate))
            except OSError:
                return False
    return True


def find_cluster_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports below 55536 whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    for _ in range(2000):
        if len(ports) == count:
            return ports
        port = 20000 + int.from_bytes(os.urandom(2), "big") % 35000
        if port not in ports and _port_pair_free(port, host):
            ports.append(port)
    raise RuntimeError("no free port pairs for a local cluster")


class LocalCluster:
    """A Redis Cluster of ``nodes`` valkey-server primaries on 127.0.0.1, each with ``replicas``
    replicas (none by default), formed with CLUSTER ADDSLOTSRANGE, CLUSTER MEET and CLUSTER
    REPLICATE: for tests and benchmarks, never for production data. Every node has the append-only
    file with ``appendfsync always``; ``extra_config`` is added to every node's. ``start()`` returns a
    seed URL; ``nodes`` lists the primaries first, then the replicas (``nodes[size + j]`` replicates
    ``nodes[j % size]`` when formed; a failover changes roles, not this list); ``urls`` names every
    node; ``stop()`` stops them all."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        nodes: int = 3,
        *,
        replicas: int = 0,
        extra_config: dict[str, str] | None = None,
        module: bool = True,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.size = nodes
        self.replicas = replicas
        self.extra_config = dict(extra_config or {})
        #: whether the nodes load neardup's module (as the embedded server does), or use the Lua loops
        self.module = module
        self.nodes: list[EmbeddedValkey] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url.removesuffix("/0")

    @property
    def urls(self) -> list[str]:
        return [node.url.removesuffix("/0") for node in self.nodes]

    def start(self, timeout: float = 30.0) -> str:
        if self.nodes and all(node.running for node in self.nodes):
            return self.url
        self.stop()
        total = self.size * (1 + self.replicas)
        ports = find_cluster_ports(total)
        try:
            for i, port in enumerate(ports):
                node = EmbeddedValkey(
                    self.data_dir / f"node{i}",
                    port=port,
                    module=self.module,
                    extra_config={
                        "cluster-enabled": "yes",
                        "cluster-config-file": "nodes.conf",
                        "cluster-node-timeout": "2000",
                        "cluster-require-full-coverage": "yes",
                        "repl-diskless-sync-delay": "0",
                        **self.extra_config,
                    },
                )
                self.nodes.append(node)
                node.start()
            self._form(timeout)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _form(self, timeout: float) -> None:
        clients = [redis.Redis(host=n.host, port=n.port, socket_timeout=5.0) for n in self.nodes]
        try:
            per = 16384 // self.size
            for i, client in enumerate(clients[: self.size]):
                last = 16383 if i == self.size - 1 else (i + 1) * per - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)  # type: ignore[no-untyped-call]
            for client in clients[1:]:
                client.execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER", "MEET", self.nodes[0].host, self.nodes[0].port
                )
            if self.replicas:
                ids = [_text(c.execute_command("CLUSTER", "MYID")) for c in clients[: self.size]]  # type: ignore[no-untyped-call]
                deadline = time.monotonic() + timeout
                for j, client in enumerate(clients[self.size :]):
                    while True:  # the replica must have learned of its primary (gossip) first
                        try:
                            client.execute_command("CLUSTER", "REPLICATE", ids[j % self.size])  # type: ignore[no-untyped-call]
                            break
                        except redis.ResponseError:
                            if time.monotonic() > deadline:
                                raise
                            time.sleep(0.05)
        finally:
            for client in clients:
                client.close()
        self.wait_ok(timeout)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every node reports cluster_state:ok and knows all the others (after forming the
        cluster, or after a node was restarted)."""
        clients = [
            redis.Redis(host=n.host, port=n.port, socket_timeout=2.0, retry=Retry(NoBackoff(), 0))
            for n in self.nodes
        ]
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    infos = [c.execute_command("CLUSTER", "INFO") for c in clients]  # type: ignore[no-untyped-call]
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    infos = []
                texts = [i.decode() if isinstance(i, bytes) else str(i) for i in infos]
                if (
                    texts
                    and all(
                        "cluster_state:ok" in t and f"cluster_known_nodes:{len(self.nodes)}" in t
                        for t in texts
                    )
                    and self._replicas_linked(clients)
                ):
                    return
                time.sleep(0.05)
            raise RuntimeError(f"the local cluster did not reach cluster_state:ok within {timeout} s")
        finally:
            for client in clients:
                client.close()

    def _replicas_linked(self, clients: list[redis.Redis]) -> bool:
        """Every node that is a replica has its link to its primary up (its first sync done)."""
        if not self.replicas:
            return True
        try:
            infos = [client.info("replication") for client in clients]
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
        return all(i.get("role") != "slave" or i.get("master_link_status") == "up" for i in infos)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
