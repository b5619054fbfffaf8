"""The app factory: reads the settings, picks the store (external Redis or an embedded Valkey), wires
domain and HTTP layers together. Nothing is built at import time.

Run with ``neardup serve`` (see ``neardup.cli``) or ``uvicorn --factory neardup.main:create_app``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from neardup import __version__
from neardup.api import routers
from neardup.api.access_log import AccessLogMiddleware
from neardup.api.auth import ApiKeys, AuthMiddleware, install_auth
from neardup.api.body_limit import BodyLimitMiddleware
from neardup.api.contract import install_contract
from neardup.api.deps import Runtime
from neardup.api.errors import CatchAllMiddleware, install_error_handlers
from neardup.api.limits import Limits
from neardup.api.metrics import Metrics, MetricsMiddleware
from neardup.domain import CollectionParams, Index, StoreUnavailable
from neardup.settings import Settings
from neardup.storage import ClusterStore, EmbeddedValkey, RedisStore, Store
from neardup.storage.embedded import STATUS_FILE_ENV, Supervisor, SupervisorStatus

log = logging.getLogger("neardup")

API_DESCRIPTION = """\
Near-duplicate lookup: MinHash signatures, LSH band tables in Redis/Valkey, verified matches.

Every error answers `{"error": <code>, "message": <what to change>}`; validation errors add `detail`.
"""


class DefaultCollection:
    """Makes sure the ``default`` collection exists. Tried at start-up; if the store is down then, the
    service still starts (``/readyz`` says 503) and the next request tries again."""

    def __init__(self, params: CollectionParams) -> None:
        self.params = params
        self.ready = False

    async def ensure(self, index: Index) -> None:
        if self.ready:
            return
        try:
            await index.ensure_default_collection(self.params)
        except StoreUnavailable as exc:
            log.warning("could not create the default collection yet: %s", exc.message)
            return
        self.ready = True


#: Seconds between two sweeps of dropped generations (Index.sweep_dropped); the first runs at start.
SWEEP_INTERVAL = 60.0


async def sweep_dropped_forever(index: Index, stop: asyncio.Event, interval: float = SWEEP_INTERVAL) -> None:
    """Finish drops that died half way, now and then every ``interval`` seconds, until ``stop`` is set.
    A store that is down is tried again next time. Stopped by the event, not cancelled: a store call
    cancelled half way can swallow the cancellation (the redis client's own timeouts), and the task
    would then sleep on."""
    while not stop.is_set():
        try:
            finished = await index.sweep_dropped()
        except StoreUnavailable as exc:
            log.warning("could not sweep dropped collections: %s", exc.message)
        else:
            if finished:
                log.info("finished %d dropped collection generation(s) left half-deleted", finished)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def sweep_retention_forever(index: Index, stop: asyncio.Event, interval: float) -> None:
    """Reclaim what is due in every collection with a retention (Index.sweep_retention) every
    ``interval`` seconds, until ``stop`` is set: a collection nobody writes to gives its expired
    documents back within an interval after their TTL. A store that is down is tried again next time.
    Stopped by the event, like ``sweep_dropped_forever``."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if stop.is_set():
            return
        try:
            reclaimed = await index.sweep_retention(stop=stop)
        except StoreUnavailable as exc:
            log.warning("could not sweep expired documents: %s", exc.message)
        else:
            if reclaimed:
                log.info("reclaimed %d expired or evicted document(s)", reclaimed)


class Supervision:
    """Where this process reads the embedded server's supervisor status (``/healthz``, ``/metrics``):
    the supervisor's file when ``neardup serve`` runs it in the parent process, the supervisor itself
    when the app started the server, nothing with an external store (``status()`` is None)."""

    def __init__(self) -> None:
        path = os.environ.get(STATUS_FILE_ENV)
        self.source: Callable[[], SupervisorStatus | None] | None = None
        if path:
            self.source = lambda: SupervisorStatus.read(Path(path))

    def status(self) -> SupervisorStatus | None:
        return self.source() if self.source is not None else None


def default_params(settings: Settings) -> CollectionParams:
    return CollectionParams.create(
        "default",
        threshold=settings.default_threshold,
        num_perm=settings.default_num_perm,
        shingle=settings.default_shingle,
        size=settings.default_size,
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. Without ``settings``, they come from ``NEARDUP_*`` environment variables."""
    settings = settings or Settings()
    supervision = Supervision()
    metrics = Metrics(supervision.status)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        embedded: Supervisor | None = None
        url = settings.redis_url
        if url is None:
            # Started from the event loop's (main) thread on purpose, not in a worker thread: the
            # server dies with the thread that started it, so a killed service leaves no orphan.
            embedded = Supervisor(
                EmbeddedValkey(settings.data_dir, fsync=settings.fsync, malloc=settings.valkey_malloc),
                attempts=settings.store_restart_attempts,
                backoff=settings.store_restart_backoff,
            )
            url = embedded.start()
            supervision.source = embedded.status
            log.info(
                "embedded valkey on %s, data in %s (malloc: %s)",
                url,
                settings.data_dir,
                embedded.server.malloc,
            )
        store: Store
        if settings.redis_cluster:
            store = ClusterStore.from_url(
                url, timeout=settings.store_timeout, min_replicas=settings.min_replicas
            )
        else:
            store = RedisStore.from_url(url, timeout=settings.store_timeout)
        index = Index(store, observer=metrics)
        default = DefaultCollection(default_params(settings))
        await default.ensure(index)
        app.state.runtime = Runtime(index, settings, limits, metrics)
        app.state.default_collection = default
        # Everything built so far (modules, routes, models: ~75,000 objects) lives as long as the
        # process: move it out of the cyclic collector's sight, or each full collection walks it
        # again and stalls every request in flight for tens of milliseconds (the p99 of a busy
        # service).
        gc.collect()
        gc.freeze()
        stop_sweeping = asyncio.Event()
        sweepers = {asyncio.create_task(sweep_dropped_forever(index, stop_sweeping))}
        if settings.retention_sweep_seconds:
            sweepers.add(
                asyncio.create_task(
                    sweep_retention_forever(index, stop_sweeping, settings.retention_sweep_seconds)
                )
            )
        try:
            yield
        finally:
            # A sweep under way ends within its store deadline; one that does not is left behind.
            stop_sweeping.set()
            await asyncio.wait(sweepers, timeout=settings.store_timeout * 10)
            # cross-site matches this process verified and holds: linked now, not left to a site read
            await asyncio.wait({asyncio.create_task(index.close())}, timeout=settings.store_timeout * 2)
            await store.close()
            if embedded is not None:
                embedded.stop()

    app = FastAPI(
        title="neardup",
        version=__version__,
        description=API_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.supervision = supervision
    limits = Limits.from_settings(settings)
    for router in routers:
        app.include_router(router)
    install_error_handlers(app)
    keys = ApiKeys.parse(settings.api_keys.get_secret_value()) if settings.api_keys else ApiKeys(())
    install_auth(app, keys)
    install_contract(app, settings, limits)
    # Added innermost first: the catch-all sits next to the routes, API keys are checked before any
    # route runs, metrics see every final status (401s too), and oversized bodies are refused before
    # anything reads them.
    app.add_middleware(CatchAllMiddleware)
    app.add_middleware(AuthMiddleware, keys=keys)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Outermost: every response (413s too) carries X-Request-ID, every log line of a request its id.
    app.add_middleware(AccessLogMiddleware)
    return app
