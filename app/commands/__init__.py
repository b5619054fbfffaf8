"""The subcommands of ``neardup`` other than ``serve``: load, dedup, params, bench. ``neardup.cli`` parses
the arguments and calls ``run(args)`` of the matching module; each returns an exit status."""

from __future__ import annotations

from neardup.commands.common import CliError, ExitCode

__all__ = ["CliError", "ExitCode"]
