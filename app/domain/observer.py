"""What the index reports about its own work (signature time, store calls, candidates verified), for
whoever wants to count it: the HTTP layer turns it into Prometheus metrics. The domain only knows this
protocol, never a metrics library."""

from __future__ import annotations

from typing import Protocol


class IndexObserver(Protocol):
    def signatures_computed(self, documents: int, seconds: float) -> None:
        """A batch of ``documents`` texts was sketched (signatures and band keys) in ``seconds``."""

    def store_call(self, seconds: float, failed: bool) -> None:
        """One call to the store took ``seconds``; ``failed`` when it was unreachable or timed out."""

    def candidates_verified(self, candidates: int, rejected: int) -> None:
        """One checked or queried document had ``candidates`` from its buckets; verification against
        their full signatures rejected ``rejected`` of them."""


class NullObserver:
    """Counts nothing: the default."""

    def signatures_computed(self, documents: int, seconds: float) -> None:
        pass

    def store_call(self, seconds: float, failed: bool) -> None:
        pass

    def candidates_verified(self, candidates: int, rejected: int) -> None:
        pass
