"""The embedded server: durability across a crash (append-only file), no orphans, store-down errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from neardup.storage import DataDirInUse, EmbeddedValkey, RedisStore, embedded
from neardup.storage.embedded import PIDFILE, find_free_port, mimalloc_library
from neardup.storage.errors import StoreDown
from neardup.storage.lock import LOCKFILE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]


def test_acknowledged_write_survives_sigkill(data_dir: Path) -> None:
    server = EmbeddedValkey(data_dir)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        client.hset("h", "f", "v")
        client.close()
        server.kill()  # a crash: no SHUTDOWN, no final fsync by the server
        assert not server.running
        server.start()
        client = redis.Redis.from_url(server.url)
        assert client.hget("h", "f") == b"v"
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
    finally:
        server.stop()
    assert not (data_dir / PIDFILE).exists()


def test_rewritten_append_only_files_start_with_an_uncompressed_snapshot(data_dir: Path) -> None:
    server = EmbeddedValkey(data_dir)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("rdbcompression") == {"rdbcompression": "no"}
        assert client.config_get("aof-use-rdb-preamble") == {"aof-use-rdb-preamble": "yes"}
        client.close()
    finally:
        server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mimalloc is preloaded on Linux only")
def test_the_server_runs_with_mimalloc_by_default_and_libc_on_request(data_dir: Path) -> None:
    assert mimalloc_library() is not None, "the server extra installs cmeel-mimalloc on Linux"
    server = EmbeddedValkey(data_dir)  # malloc="auto"
    assert server.malloc == "mimalloc"
    server.start()
    try:
        maps = Path(f"/proc/{server.pid}/maps").read_text()
        assert "libmimalloc" in maps
        client = redis.Redis.from_url(server.url)
        client.hset("h", "f", "v" * 1000)
        assert client.hget("h", "f") == b"v" * 1000
        client.close()
    finally:
        server.stop()
    plain = EmbeddedValkey(data_dir, malloc="libc")
    assert plain.malloc == "libc"
    plain.start()
    try:
        assert "libmimalloc" not in Path(f"/proc/{plain.pid}/maps").read_text()
        # the append-only file does not depend on the malloc: a switch either way keeps the data
        client = redis.Redis.from_url(plain.url)
        assert client.hget("h", "f") == b"v" * 1000
        client.close()
    finally:
        plain.stop()


def test_mimalloc_without_its_library_is_a_clear_error(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "mimalloc_library", lambda: None)
    with pytest.raises(RuntimeError, match=r"pip install 'neardup\[server\]'"):
        EmbeddedValkey(data_dir, malloc="mimalloc")
    # "auto" falls back to the C library's malloc where mimalloc is not installed
    assert EmbeddedValkey(data_dir).malloc == "libc"


def test_server_dies_with_the_process_that_started_it(data_dir: Path) -> None:
    code = (
        "import sys, time; from neardup.storage import EmbeddedValkey; "
        f"s = EmbeddedValkey({str(data_dir)!r}); s.start(); print(s.pid, flush=True); time.sleep(60)"
    )
    # cwd outside the checkout: the child imports the installed package (with its compiled parts).
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=data_dir.parent)
    assert parent.stdout is not None
    with parent.stdout:
        line = parent.stdout.readline()
    if not line:
        parent.wait()
    assert line.strip().isdigit(), f"the child did not start a server (exit {parent.returncode})"
    pid = int(line)
    assert _alive(pid)
    parent.send_signal(signal.SIGKILL)  # the service is killed outright
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_leftover_server_on_the_data_dir_is_stopped_before_a_new_start(data_dir: Path) -> None:
    first = EmbeddedValkey(data_dir)
    first.start()
    old_pid = first.pid
    assert old_pid is not None
    first._lock.release()  # as the kernel does when the owner dies: its server is left behind
    second = EmbeddedValkey(data_dir)  # e.g. a restarted service that lost track of the first one
    second.start()
    try:
        leftover, first._process = first._process, None  # forget it: the second start handled it
        assert leftover is not None
        leftover.wait(5)  # reap it (it is our child here); raises if it was not stopped
        deadline = time.monotonic() + 5
        while _alive(old_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(old_pid)
        assert redis.Redis.from_url(second.url).ping()
    finally:
        second.stop()


def test_a_second_owner_of_a_running_data_dir_is_refused_and_the_server_is_untouched(data_dir: Path) -> None:
    first = EmbeddedValkey(data_dir, owner="the first one")
    first.start()
    second = EmbeddedValkey(data_dir)
    try:
        with pytest.raises(DataDirInUse, match=rf"in use by pid {os.getpid()} \(the first one\)") as refused:
            second.start()
        assert refused.value.pid == os.getpid()
        assert not second.running
        # Nothing signalled, nothing started: the first server answers, and its pidfile is its own.
        assert first.running and redis.Redis.from_url(first.url).ping()
        assert int((data_dir / PIDFILE).read_text()) == first.pid
        assert (data_dir / LOCKFILE).read_text() == f"{os.getpid()} the first one\n"
    finally:
        first.stop()
    assert (data_dir / LOCKFILE).read_text() == ""  # released, and no stale pid left to name
    second.start()  # the directory is free once the first owner stopped
    try:
        assert redis.Redis.from_url(second.url).ping()
    finally:
        second.stop()


def _owner_process(data_dir: Path, *, die_with_it: bool) -> tuple[subprocess.Popen[bytes], int]:
    """A Python process that owns an embedded server on ``data_dir``; returns it and the server's pid.
    Without ``die_with_it`` the server outlives it, as on a platform without PR_SET_PDEATHSIG."""
    code = (
        "import sys, time; from neardup.storage import embedded; "
        + ("" if die_with_it else "embedded._die_with_parent = lambda: None; ")
        + f"s = embedded.EmbeddedValkey({str(data_dir)!r}); s.start(); print(s.pid, flush=True); "
        "time.sleep(60)"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=data_dir.parent)
    assert owner.stdout is not None
    with owner.stdout:
        line = owner.stdout.readline()
    if not line.strip().isdigit():
        owner.kill()
        owner.wait()
        raise AssertionError(f"the owner did not start a server (exit {owner.returncode})")
    return owner, int(line)


@pytest.mark.parametrize("die_with_it", [False, True], ids=["leftover-server", "server-dying-too"])
def test_a_sigkilled_owner_releases_the_data_dir(data_dir: Path, die_with_it: bool) -> None:
    owner, old_server = _owner_process(data_dir, die_with_it=die_with_it)
    new = EmbeddedValkey(data_dir)
    try:
        with pytest.raises(DataDirInUse, match=f"pid {owner.pid} "):
            new.start()  # held by a live process
        assert _alive(old_server)
        owner.kill()  # SIGKILL: no code of the owner runs; the kernel drops its lock
        owner.wait()
        new.start()  # at once: the old server, left over or still shutting down, is stopped first
        assert not _alive(old_server)
        assert redis.Redis.from_url(new.url).ping()
        assert (data_dir / LOCKFILE).read_text().startswith(f"{os.getpid()} ")
    finally:
        new.stop()
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if _alive(old_server):
            os.kill(old_server, signal.SIGKILL)


@pytest.mark.anyio
async def test_unreachable_store_raises_store_down() -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{find_free_port()}/0", timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(StoreDown):
            await store.ping()
        with pytest.raises(StoreDown):
            await store.get_collection("c")
        assert time.monotonic() - started < 5
    finally:
        await store.close()
