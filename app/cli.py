"""The ``neardup`` command. ``neardup serve`` runs the HTTP service with uvicorn; without a Redis URL it
first starts the embedded Valkey (once, in this process, even with several workers) and stops it on exit.

Flags override ``NEARDUP_*`` environment variables; both are validated by ``app.settings.Settings``.
Errors are reported in one line, without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from pydantic import ValidationError

from app.settings import Settings

PROG = "neardup"
log = logging.getLogger("neardup")

#: Flags of ``serve`` and the settings field each one sets.
SERVE_FLAGS = {
    "host": "host",
    "port": "port",
    "workers": "workers",
    "redis_url": "redis_url",
    "data_dir": "data_dir",
}


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 1 or 2."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Near-duplicate lookup service.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the HTTP service. Without --redis-url (or NEARDUP_REDIS_URL) an embedded "
        "Valkey server is started with its data in --data-dir, and stopped on exit.",
    )
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1; env NEARDUP_HOST)")
    serve.add_argument("--port", type=int, help="TCP port (default 8000; env NEARDUP_PORT)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1; env NEARDUP_WORKERS)")
    serve.add_argument(
        "--redis-url",
        help="redis://, rediss:// or unix:// URL of an existing Redis/Valkey; nothing is started then "
        "(env NEARDUP_REDIS_URL)",
    )
    serve.add_argument(
        "--data-dir",
        help="where the embedded Valkey keeps its append-only file (default ./neardup-data; "
        "env NEARDUP_DATA_DIR)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """Flags win over the environment. They are written back into the environment so that worker
    processes, which build their own Settings, see the same values."""
    for flag, field in SERVE_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            os.environ[f"NEARDUP_{field.upper()}"] = str(value)
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg']}"
            for error in exc.errors()
        )
        raise CliError(f"invalid settings: {problems}", status=2) from None


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config plus our own logger, applied in every worker process too."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["neardup"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn handles SIGTERM while it serves, then re-raises it once it has shut down; this handler
    # turns that into an exit that runs our `finally` blocks (stopping the embedded server).
    raise SystemExit(0)


@contextlib.contextmanager
def metrics_dir(workers: int) -> Iterator[None]:
    """With several workers, each writes its Prometheus samples to files in a shared directory and
    /metrics reads them all; one process alone keeps them in memory."""
    if workers <= 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        yield
        return
    path = tempfile.mkdtemp(prefix="neardup-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    try:
        yield
    finally:
        shutil.rmtree(path, ignore_errors=True)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = settings_from(args)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    embedded = None
    try:
        if settings.redis_url is None:
            from app.storage import EmbeddedValkey

            # Started here, in the main thread of the parent process: once for all workers, and it
            # dies with this process even on SIGKILL (the server is bound to the thread that started it).
            embedded = EmbeddedValkey(settings.data_dir)
            try:
                url = embedded.start()
            except (OSError, RuntimeError) as exc:
                raise CliError(f"could not start the embedded Valkey in {settings.data_dir}: {exc}") from None
            os.environ["NEARDUP_REDIS_URL"] = url
            log.info("embedded valkey on %s, data in %s", url, settings.data_dir.resolve())
        with metrics_dir(settings.workers):
            uvicorn.run(
                "app.main:create_app",
                factory=True,
                host=settings.host,
                port=settings.port,
                workers=settings.workers,
                log_level=args.log_level,
                log_config=log_config(args.log_level),
                access_log=args.access_log,
                timeout_graceful_shutdown=10,
            )
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.command == "serve":
            return serve(args)
        raise CliError(f"unknown command {args.command!r}", status=2)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a one-line report beats a traceback for someone starting a server
        print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
