"""``neardup bench``: run the benchmark scripts of a source checkout (``bench/``) as subprocesses with the
same Python, passing every further argument through; their JSON goes to stdout as they print it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from neardup.commands.common import CliError, ExitCode

SCRIPTS = {"sketch": "bench_sketch.py", "service": "bench_service.py"}


def bench_dir() -> Path:
    """``bench/`` in the current directory (the root of a checkout), else next to the source package."""
    for candidate in (Path.cwd() / "bench", Path(__file__).resolve().parents[2] / "bench"):
        if (candidate / SCRIPTS["sketch"]).exists() or (candidate / SCRIPTS["service"]).exists():
            return candidate
    raise CliError(
        "bench/ not found: the benchmarks live in the source repository, not in the installed package; "
        "run this from a checkout",
        ExitCode.USAGE,
    )


def run(args: argparse.Namespace) -> int:
    directory = bench_dir()
    names = list(SCRIPTS) if args.target == "all" else [args.target]
    passthrough = list(args.args[1:] if args.args[:1] == ["--"] else args.args)
    status = 0
    for name in names:
        script = directory / SCRIPTS[name]
        if not script.exists():
            raise CliError(f"{script} does not exist in this checkout", ExitCode.USAGE)
        completed = subprocess.run([sys.executable, str(script), *passthrough], check=False)
        if completed.returncode < 0:  # killed by a signal
            return 128 - completed.returncode
        status = status or completed.returncode
    return status
