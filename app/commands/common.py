"""What the subcommands share: exit codes, the error a user can fix, and the progress bar."""

from __future__ import annotations

import enum
import sys
import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class ExitCode(enum.IntEnum):
    """Exit statuses scripts can rely on (also listed in ``neardup --help``)."""

    OK = 0
    ERROR = 1  # failed: an HTTP error, a refused API key, a file that cannot be read or written
    USAGE = 2  # bad arguments or settings, an input that does not exist, unreadable input format, missing
    # collection without --create
    PARTIAL = 3  # finished, but some documents were rejected (reported in the summary)
    UNAVAILABLE = 4  # the service stayed unreachable or 503 after every retry; rerun to resume
    INTERRUPTED = 130  # Ctrl-C; load keeps its checkpoint, rerun the same command to resume


EXIT_CODES_HELP = """\
exit status:
  0    success
  1    error (HTTP error, refused API key, unreadable or unwritable file)
  2    usage error (bad arguments or settings, an input that does not exist, bad input format)
  3    finished, but some documents were rejected (see the summary)
  4    service unreachable or unavailable after every retry (load: rerun to resume)
  130  interrupted (load: rerun the same command to resume)
"""


class CliError(Exception):
    """A problem the user can fix; printed as one line."""

    def __init__(self, message: str, status: int = ExitCode.ERROR) -> None:
        super().__init__(message)
        self.status = int(status)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


class RateColumn(ProgressColumn):
    """Documents so far and documents per second (the bar itself may advance by bytes)."""

    def render(self, task: Task) -> Text:
        docs = int(task.fields.get("docs", 0))
        elapsed = task.elapsed or 0.0
        rate = docs / elapsed if elapsed > 0 else 0.0
        return Text(f"{docs:,} docs {rate:,.0f}/s", style="progress.data.speed")


def progress_bar(enabled: bool) -> Progress:
    """Bar over input bytes (ETA from them), document count and rate; drawn on stderr, only when it is a
    terminal unless forced."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        RateColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=stderr_console(),
        disable=not enabled,
        transient=False,
    )


def progress_wanted(flag: bool | None) -> bool:
    """``--progress``/``--no-progress`` win; by default, only on a terminal."""
    return sys.stderr.isatty() if flag is None else flag


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"
