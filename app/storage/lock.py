"""One owner per data directory: an exclusive ``flock`` on ``neardup.lock`` inside it.

The embedded Valkey's owner takes the lock before it signals or starts anything there and keeps it
while its server runs. The kernel drops the lock when the holding process dies, even by SIGKILL, so a
free lock means that whatever server is left on the directory has no live owner and may be stopped.

The file holds the holder's pid and what it is (``"<pid> <description>"``), so the process that is
refused can say who holds the directory. The file is never deleted: a process that opened it just
before the unlink would lock an inode nobody else can see, and two owners would run at once.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCKFILE = "neardup.lock"

#: How long a refused process waits for the holder to write its pid: between the holder's flock and
#: its write the file is empty (or still names the previous holder, truncated a moment later).
_HOLDER_WAIT_SECONDS = 1.0


class DataDirInUse(RuntimeError):
    """Another live process holds the data directory's lock."""

    def __init__(self, data_dir: Path, pid: int | None, description: str) -> None:
        self.data_dir = data_dir
        self.pid = pid
        self.description = description
        super().__init__(f"the data directory {data_dir} is in use by {self.holder}")

    @property
    def holder(self) -> str:
        if self.pid is None:
            return "another process (it did not write its pid)"
        return f"pid {self.pid} ({self.description})" if self.description else f"pid {self.pid}"


class DataDirLock:
    """The lock of one data directory, for one owner. ``acquire()`` raises :class:`DataDirInUse`
    instead of waiting; ``release()`` (or the owner's death) frees it."""

    def __init__(self, data_dir: Path, description: str) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCKFILE
        self.description = " ".join(description.split())  # one line: the file is "<pid> <description>"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        # O_CLOEXEC: the server (and uvicorn's spawned workers) must not inherit the lock. A child
        # holding it would keep the directory "in use" after its owner died, and a leftover server
        # could then never be stopped.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, description = _holder(fd)
            os.close(fd)
            raise DataDirInUse(self.data_dir, pid, description) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {self.description}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # while still held: the next holder's pid is never overwritten
        finally:
            os.close(fd)  # closing the only descriptor of the lock releases it


def _holder(fd: int) -> tuple[int | None, str]:
    """The pid and description the holder wrote, waiting briefly for a holder that has just locked."""
    deadline = time.monotonic() + _HOLDER_WAIT_SECONDS
    while True:
        pid, _, description = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip().partition(" ")
        if pid.isdigit():
            return int(pid), description
        if time.monotonic() >= deadline:
            return None, ""
        time.sleep(0.02)
