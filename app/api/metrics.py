"""Prometheus metrics: per-route request counts and latencies, document counters, and what the index
reports through its observer hook (signature time, store latency and errors, candidates verified).

Each app gets its own registry (tests build many apps in one process). With several workers the CLI
sets ``PROMETHEUS_MULTIPROC_DIR`` before they start, and ``/metrics`` then sums every worker's files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class SupervisorStatus(Protocol):
    """What the embedded server's supervisor reports (``neardup.storage.embedded.SupervisorStatus``)."""

    @property
    def restarts(self) -> int: ...
    @property
    def failed_attempts(self) -> int: ...
    @property
    def failed(self) -> bool: ...


#: Latency buckets in seconds: single checks take ~1 ms, batches of 1,000 documents ~100 ms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Store calls and signature batches: from a fraction of a millisecond up to the store timeout.
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
#: Candidates found in a document's buckets (at most MAX_CANDIDATES = 256 are verified).
CANDIDATE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Label of requests that matched no route, so scanners cannot grow the label set without bound.
UNMATCHED = "unmatched"
#: Methods kept as label values; any other method a client invents is counted as "OTHER".
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class SupervisorCollector(Collector):
    """The embedded server's supervisor, as read when scraped (its status is one for all workers: the
    supervisor's, not summed per process). Nothing with an external store."""

    def __init__(self, status: Callable[[], SupervisorStatus | None]) -> None:
        self.status = status

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        status = self.status()
        if status is None:
            return
        yield CounterMetricFamily(
            "neardup_store_restarts",
            "Times the embedded Valkey was started again after its process exited",
            value=status.restarts,
        )
        yield CounterMetricFamily(
            "neardup_store_restart_failures",
            "Attempts to start the embedded Valkey again that failed",
            value=status.failed_attempts,
        )
        yield GaugeMetricFamily(
            "neardup_store_supervisor_failed",
            "1 when the embedded Valkey could not be restarted and the service must be (/healthz is 503)",
            value=int(status.failed),
        )


class Metrics:
    """The service's metrics, registered in a registry of their own. ``supervisor``: the embedded
    server's supervisor status, when there is one."""

    def __init__(self, supervisor: Callable[[], SupervisorStatus | None] | None = None) -> None:
        # The `*_created` timestamp series double the output and nobody graphs them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self.supervisor = SupervisorCollector(supervisor or (lambda: None))
        self.registry.register(self.supervisor)
        self.requests = Counter(
            "neardup_http_requests",
            "HTTP requests served, by method, route template and status code",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "neardup_http_request_duration_seconds",
            "Time from request start to the end of the response, by method and route template",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.documents_checked = Counter(
            "neardup_documents_checked", "Documents checked (single and batch)", registry=self.registry
        )
        self.documents_inserted = Counter(
            "neardup_documents_inserted",
            "Documents stored, by checks with insert and by PUT",
            registry=self.registry,
        )
        self.duplicates = Counter(
            "neardup_duplicates_found",
            "Checked documents found to be near-duplicates",
            registry=self.registry,
        )

        self.signature_seconds = Histogram(
            "neardup_signature_batch_duration_seconds",
            "Time to compute the signatures and band keys of one batch of texts (C++ core)",
            buckets=FAST_BUCKETS,
            registry=self.registry,
        )
        self.signatures = Counter(
            "neardup_signatures_computed", "Texts sketched into signatures", registry=self.registry
        )
        self.store_seconds = Histogram(
            "neardup_store_call_duration_seconds",
            "Time of one call to Redis/Valkey (a script or command), failed calls included",
            buckets=FAST_BUCKETS,
            registry=self.registry,
        )
        self.store_errors = Counter(
            "neardup_store_errors",
            "Store calls that failed: unreachable, timed out or loading (answered 503)",
            registry=self.registry,
        )
        self.candidates = Histogram(
            "neardup_candidates_per_document",
            "Bucket candidates of one checked or queried document, before verification",
            buckets=CANDIDATE_BUCKETS,
            registry=self.registry,
        )
        self.rejected = Counter(
            "neardup_candidates_rejected",
            "Bucket candidates that verification against the full signature rejected (below threshold)",
            registry=self.registry,
        )

    # --- the index's observer hook (neardup.domain.observer.IndexObserver) -----------------------------

    def signatures_computed(self, documents: int, seconds: float) -> None:
        self.signatures.inc(documents)
        self.signature_seconds.observe(seconds)

    def store_call(self, seconds: float, failed: bool) -> None:
        self.store_seconds.observe(seconds)
        if failed:
            self.store_errors.inc()

    def candidates_verified(self, candidates: int, rejected: int) -> None:
        self.candidates.observe(candidates)
        if rejected:
            self.rejected.inc(rejected)

    def record_checks(self, checked: int, inserted: int, duplicates: int) -> None:
        self.documents_checked.inc(checked)
        if inserted:
            self.documents_inserted.inc(inserted)
        if duplicates:
            self.duplicates.inc(duplicates)

    def exposition(self) -> tuple[bytes, str]:
        """The text format body and its content type."""
        if multiprocess_dir() is not None:
            # Every worker writes its own files; read them all, not just this process's registry.
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            registry.register(self.supervisor)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Times every HTTP request and labels it with the route template (``/v1/collections/{name}``),
    never the raw path, so ids and names do not become label values."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            # The router writes the matched route into this same scope dict.
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "OTHER"
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
