"""The embedded server's heap stays on transparent huge pages: an append-only-file rewrite's fork splits
the pages the server writes while the child lives, and the module collapses them again once it is gone
(native/valkey/huge_pages.cpp). Without that, khugepaged merges them back at 16 MiB per 10 s."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from neardup.storage.embedded import (
    GENERIC_COLLECT,
    LOGFILE,
    EmbeddedValkey,
    find_free_port,
    valkey_binary,
    valkey_module,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux")

KEYS = 60_000
VALUE = 2_000  # bytes: ~120 MB of hashes, 60 huge pages and more


def _thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unsupported"
    return text.split("[", 1)[1].split("]", 1)[0]


def _collapse_supported() -> str | None:
    """Why MADV_COLLAPSE cannot work here, or None."""
    if _thp_mode() not in ("always", "madvise"):
        return f"transparent huge pages are '{_thp_mode()}' on this machine"
    major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    if (major, minor) < (6, 1):
        return f"MADV_COLLAPSE needs Linux 6.1, this is {os.uname().release}"
    return None


def _huge_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _passes(data_dir: Path) -> int:
    """The module's collapse passes finished so far (its log lines)."""
    return (data_dir / LOGFILE).read_text().count("huge pages collapsed after a fork child")


def _overwrite(client: redis.Redis, count: int, rng: random.Random) -> None:
    pipe = client.pipeline(transaction=False)
    for _ in range(count):
        pipe.hset(f"k{rng.randrange(KEYS)}", "v", rng.randbytes(VALUE))
    pipe.execute()


def test_huge_pages_split_by_a_rewrite_are_collapsed_once_the_child_is_gone(data_dir: Path) -> None:
    if reason := _collapse_supported():
        pytest.skip(reason)
    server = EmbeddedValkey(data_dir, fsync="everysec")
    assert server.malloc == "mimalloc" and server.huge_pages
    server.start()
    assert server.pid is not None
    try:
        client = redis.Redis.from_url(server.url)
        rng = random.Random(7)
        pipe = client.pipeline(transaction=False)
        for i in range(KEYS):
            pipe.hset(f"k{i}", "v", rng.randbytes(VALUE))
            if i % 5_000 == 4_999:
                pipe.execute()
        # a first rewrite with nothing written meanwhile: once its child is gone the module's pass puts
        # the heap on huge pages wherever the kernel did not at fault time (a fragmented machine); the
        # server may have started one of its own already (the file grew past its automatic threshold)
        with contextlib.suppress(redis.ResponseError):
            client.bgrewriteaof()
        deadline = time.monotonic() + 60
        while _passes(data_dir) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = _huge_mb(server.pid)
        assert before > 80, f"only {before:.0f} MB on huge pages after a pass: the test would prove nothing"

        lowest, deadline = before, time.monotonic() + 60
        with contextlib.suppress(redis.ResponseError):  # one in progress already does as well
            client.bgrewriteaof()
        while time.monotonic() < deadline:
            if client.info("persistence")["aof_rewrite_in_progress"]:
                _overwrite(client, 2_000, rng)  # writes to pages shared with the child split their huge pages
                lowest = min(lowest, _huge_mb(server.pid))
            elif lowest < 0.8 * before:
                break
            else:  # a rewrite over before a write split anything: another one
                with contextlib.suppress(redis.ResponseError):
                    client.bgrewriteaof()
                time.sleep(0.02)
        assert lowest < 0.8 * before, "the rewrite's fork split no huge page: nothing to collapse"

        deadline = time.monotonic() + 5  # khugepaged alone would take minutes
        while time.monotonic() < deadline and (_huge_mb(server.pid) < 0.9 * before or _passes(data_dir) < 2):
            time.sleep(0.1)
        after = _huge_mb(server.pid)
        assert after >= 0.9 * before, f"huge pages: {before:.0f} MB before the rewrite, {after:.0f} MB after"
        assert _passes(data_dir) >= 2, "the module logged no pass after the second rewrite"
        client.close()
    finally:
        server.stop()


def test_the_server_keeps_its_malloc_purging_only_without_huge_pages(data_dir: Path) -> None:
    assert not EmbeddedValkey(data_dir, malloc="libc").huge_pages
    with_mimalloc = EmbeddedValkey(data_dir)
    assert with_mimalloc.huge_pages
    assert with_mimalloc._environment()["MIMALLOC_PURGE_DELAY"] == "-1"


@pytest.mark.parametrize("own", [None, "5000"])
def test_mimalloc_collects_the_server_heap_rarely_unless_told_otherwise(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, own: str | None
) -> None:
    # The variable's effect is measured, not tested (bench/bench_growth.py; embedded.GENERIC_COLLECT).
    # valkey-server writes its process title over its environment, so /proc/<pid>/environ cannot show it.
    if own is None:
        monkeypatch.delenv("MIMALLOC_GENERIC_COLLECT", raising=False)
    else:
        monkeypatch.setenv("MIMALLOC_GENERIC_COLLECT", own)
    environment = EmbeddedValkey(data_dir)._environment()
    assert "libmimalloc" in environment["LD_PRELOAD"]
    assert environment["MIMALLOC_GENERIC_COLLECT"] == (own or GENERIC_COLLECT)
    with_libc = EmbeddedValkey(data_dir, malloc="libc")._environment()
    assert with_libc.get("MIMALLOC_GENERIC_COLLECT") == own  # passed through as it was, never set


def test_the_module_refuses_an_unknown_argument(tmp_path: Path) -> None:
    module = valkey_module()
    assert module is not None
    loadable = EmbeddedValkey(tmp_path)._loadable(module)
    command = [str(valkey_binary()), "--port", str(find_free_port()), "--bind", "127.0.0.1", "--save", ""]
    command += ["--dir", str(tmp_path), "--loadmodule", str(loadable), "collapse-all-the-things"]
    result = subprocess.run(
        command,
        capture_output=True,
        timeout=30,
        text=True,
    )
    assert result.returncode != 0
    assert "unknown module argument 'collapse-all-the-things'" in result.stdout + result.stderr
