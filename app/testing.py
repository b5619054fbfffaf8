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
    """A Redis Cluster of ``nodes`` valkey-server primaries on 127.0.0.1 (no replicas), formed with
    CLUSTER ADDSLOTSRANGE and CLUSTER MEET: for tests and benchmarks, never for production data.
    ``start()`` returns a seed URL; ``urls`` names every node; ``stop()`` stops them all."""

    def __init__(self, data_dir: str | os.PathLike[str], nodes: int = 3, *, module: bool = True) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.size = nodes
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
        ports = find_cluster_ports(self.size)
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
            for i, client in enumerate(clients):
                last = 16383 if i == self.size - 1 else (i + 1) * per - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)  # type: ignore[no-untyped-call]
            for client in clients[1:]:
                client.execute_command(  # type: ignore[no-untyped-call]
                    "CLUSTER", "MEET", self.nodes[0].host, self.nodes[0].port
                )
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
                if texts and all(
                    "cluster_state:ok" in t and f"cluster_known_nodes:{self.size}" in t for t in texts
                ):
                    return
                time.sleep(0.05)
            raise RuntimeError(f"the local cluster did not reach cluster_state:ok within {timeout} s")
        finally:
            for client in clients:
                client.close()

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
