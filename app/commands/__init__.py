"""The subcommands of ``neardup`` other than ``serve``: load, dedup, params, bench. ``app.cli`` parses
the arguments and calls ``run(args)`` of the matching module; each returns an exit status."""

from __future__ import annotations

from app.commands.common import CliError, ExitCode

__all__ = ["CliError", "ExitCode"]
