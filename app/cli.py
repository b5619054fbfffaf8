"""The ``neardup`` command. ``neardup serve`` runs the HTTP service with uvicorn; without a Redis URL it
first starts the embedded Valkey (once, in this process, even with several workers) and stops it on exit.
``load``, ``dedup``, ``mirrors``, ``params`` and ``bench`` live in ``neardup.commands``; their exit codes are
``neardup.commands.common.ExitCode``.

Flags override ``NEARDUP_*`` environment variables; both are validated by ``neardup.settings.Settings``.
Errors are reported in one line, without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from neardup.commands.common import EXIT_CODES_HELP, CliError, ExitCode
from neardup.logs import log_config

if TYPE_CHECKING:
    from neardup.settings import Settings

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


#: What the base install lacks (it is the client side): these commands need ``neardup[server]``.
SERVER_EXTRA_HINT = "pip install 'neardup[server]'"


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (with where to find help), exit status 2."""

    def error(self, message: str) -> Any:
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormat(argparse.HelpFormatter):
    """Wraps prose paragraphs like argparse does, but keeps paragraphs with line breaks (examples, the
    exit status table) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            paragraph if "\n" in paragraph else super(HelpFormat, self)._fill_text(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )


HELP_FORMAT = HelpFormat


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Near-duplicate lookup service: MinHash signatures, LSH band tables in Redis/Valkey, "
        "verified matches.",
        epilog=EXIT_CODES_HELP + "\nRun 'neardup COMMAND --help' for the options of a command.",
        formatter_class=HELP_FORMAT,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
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
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=os.environ.get("NEARDUP_LOG_FORMAT") or "text",
        help="text (uvicorn's) or json: one object per line with the request id (X-Request-ID) "
        "(default text; env NEARDUP_LOG_FORMAT)",
    )
    add_load(commands)
    add_dedup(commands)
    add_mirrors(commands)
    add_params(commands)
    add_bench(commands)
    add_passages(commands)
    add_valkey_module(commands)
    return parser


def _version() -> str:
    from neardup import __version__

    return __version__


def _input_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--format",
        choices=["auto", "jsonl", "csv", "text", "warc"],
        default="auto",
        help="auto (default): a folder is read as plain text files (id = relative path), *.csv/*.tsv "
        "as CSV with a header, *.warc/*.warc.gz as WARC (its HTML pages: id and url metadata = the "
        'target URI; needs pip install "neardup[warc]"), anything else (and -) as JSON lines',
    )
    command.add_argument("--id-field", default="id", help="field or column of the document id (default id)")
    command.add_argument("--text-field", default="text", help="field or column of the text (default text)")
    command.add_argument(
        "--metadata-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="copy this field into the document's metadata (repeatable); a JSON record's own "
        '"metadata" object is its metadata too (the API\'s shape)',
    )
    progress = command.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress", dest="progress", action="store_true", default=None, help="draw the progress bar"
    )
    progress.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar (default off a terminal)",
    )
    command.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def _collection_options(command: argparse.ArgumentParser, defaults: bool) -> None:
    hint = " (default 0.8)" if defaults else " (default: the server's)"
    command.add_argument(
        "--threshold", type=float, default=0.8 if defaults else None, help="Jaccard threshold" + hint
    )
    command.add_argument(
        "--num-perm",
        type=int,
        default=128 if defaults else None,
        help="signature length" + hint.replace("0.8", "128"),
    )
    command.add_argument(
        "--shingle",
        choices=["word", "char"],
        default="word" if defaults else None,
        help="word or character n-grams" + hint.replace("0.8", "word"),
    )
    command.add_argument(
        "--size",
        type=int,
        default=5 if defaults else None,
        help="n of the n-grams" + hint.replace("0.8", "5"),
    )


def add_load(commands: Any) -> None:
    load = commands.add_parser(
        "load",
        help="stream documents into a running service",
        formatter_class=HELP_FORMAT,
        description="Check and insert documents into a collection of a running service, through its batch "
        "endpoint, with a progress bar, retries on 503 and connection errors, and a summary. After each "
        "acknowledged batch a checkpoint is written next to the input (FILE.neardup-checkpoint): after an "
        "interruption, the same command resumes where it stopped; it is removed when the load completes.",
        epilog="examples:\n"
        "  neardup load pages.jsonl --collection pages --create --threshold 0.7\n"
        "  zcat dump.jsonl.gz | neardup load - --collection pages --checkpoint dump.ckpt\n"
        "  neardup load docs/ --collection manuals          # every file of a folder, id = path\n"
        "  neardup load rows.csv --collection c --id-field url --text-field body\n"
        "  neardup load crawl.warc.gz --collection pages   # its HTML pages, id = URL\n\n" + EXIT_CODES_HELP,
    )
    load.add_argument(
        "input", metavar="FILE", help="JSON lines, CSV or WARC file, folder of text files, or - for stdin"
    )
    load.add_argument("--collection", "-c", required=True, help="the collection to load into")
    load.add_argument(
        "--url",
        default=os.environ.get("NEARDUP_URL") or "http://127.0.0.1:8000",
        help="the service (default http://127.0.0.1:8000; env NEARDUP_URL)",
    )
    load.add_argument("--api-key", default=None, help="API key sent as a Bearer token (env NEARDUP_API_KEY)")
    load.add_argument("--create", action="store_true", help="create the collection if it does not exist")
    _collection_options(load, defaults=False)
    load.add_argument(
        "--passages",
        action="store_true",
        default=None,
        help="with --create: also index the documents for passage search (neardup passages)",
    )
    load.add_argument(
        "--expected-documents",
        type=int,
        default=None,
        metavar="N",
        help="with --create: how many documents the collection will hold, about (sizes its tables up front: "
        "faster inserts up to N)",
    )
    _input_options(load)
    load.add_argument("--batch-size", type=int, default=500, help="documents per request (default 500)")
    load.add_argument(
        "--max-batch-bytes",
        type=int,
        default=8 << 20,
        help="also end a batch at this many characters of text (default 8 Mi)",
    )
    load.add_argument(
        "--retries", type=int, default=8, help="retries of a request on 503/connection errors (default 8)"
    )
    load.add_argument(
        "--backoff", type=float, default=0.5, help="first retry delay in seconds, doubled each time"
    )
    load.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for one answer (default 120)"
    )
    load.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoint file (default FILE.neardup-checkpoint; stdin is resumable only with this)",
    )
    load.add_argument("--restart", action="store_true", help="ignore an existing checkpoint and start over")


def add_dedup(commands: Any) -> None:
    dedup = commands.add_parser(
        "dedup",
        help="deduplicate a file offline (no service needed)",
        formatter_class=HELP_FORMAT,
        description="Deduplicate a file without a running service: the native core and the service's own "
        "index over a throwaway embedded Valkey. Documents are checked in input order; verified matches are "
        "joined in groups (union-find, so matching is transitive); each group keeps its earliest document. "
        "--out gets the kept records (unchanged lines for JSONL), --duplicates one JSON line per group.",
        epilog="example:\n"
        "  neardup dedup crawl.jsonl --out kept.jsonl --duplicates dups.jsonl --threshold 0.9\n\n"
        + EXIT_CODES_HELP,
    )
    dedup.add_argument(
        "input", metavar="FILE", help="JSON lines, CSV or WARC file, folder of text files, or - for stdin"
    )
    dedup.add_argument("--out", "-o", required=True, help="where the kept records go (- for stdout)")
    dedup.add_argument("--duplicates", "-d", default=None, help="where the duplicate groups go (JSON lines)")
    _collection_options(dedup, defaults=True)
    dedup.add_argument(
        "--bands", type=int, default=None, help="LSH bands (default: chosen from the threshold)"
    )
    dedup.add_argument(
        "--rows", type=int, default=None, help="rows per band (default: chosen from the threshold)"
    )
    _input_options(dedup)


def add_mirrors(commands: Any) -> None:
    mirrors = commands.add_parser(
        "mirrors",
        help="which sites copy which, offline, from a file of pages (no service needed)",
        formatter_class=HELP_FORMAT,
        description="Count, per pair of sites, the pages of one with a verified near-duplicate on the "
        "other, as the service does for a collection with a site_field (a throwaway embedded Valkey, "
        "pages checked in input order), and report the pairs where either direction's share (shared "
        "pages / pages) reaches --min-share, ranked by share.",
        epilog="example:\n"
        "  neardup mirrors crawl.jsonl --site-field url --out mirrors.csv --min-pages 10\n"
        "  neardup mirrors crawl.jsonl --site-field url --out mirrors.csv --graphml mirrors.graphml\n\n"
        + EXIT_CODES_HELP,
    )
    mirrors.add_argument(
        "input", metavar="FILE", help="JSON lines, CSV or WARC file, folder of text files, or - for stdin"
    )
    mirrors.add_argument(
        "--site-field",
        required=True,
        help="field naming each page's site; an absolute URL stands for its lower-cased host",
    )
    mirrors.add_argument("--out", "-o", default="-", help="where the report goes (default - for stdout)")
    mirrors.add_argument(
        "--report-format",
        choices=["auto", "csv", "json"],
        default="auto",
        help="auto (default): json when --out ends in .json, else csv",
    )
    mirrors.add_argument(
        "--graphml",
        metavar="FILE",
        default=None,
        help="also write the pairs as a GraphML graph for Gephi or networkx (sites as nodes, pairs as edges)",
    )
    mirrors.add_argument(
        "--min-share", type=float, default=0.5, help="least share of either side (default 0.5)"
    )
    mirrors.add_argument("--min-pages", type=int, default=1, help="least pages of both sites (default 1)")
    mirrors.add_argument("--limit", type=int, default=10_000, help="most pairs reported (default 10,000)")
    _collection_options(mirrors, defaults=True)
    _input_options(mirrors)


def add_params(commands: Any) -> None:
    params = commands.add_parser(
        "params",
        help="show the LSH parameters chosen for a threshold, with their S-curve",
        formatter_class=HELP_FORMAT,
        description="The bands and rows neardup chooses for a threshold and signature length (the most "
        "rows for which P(threshold) >= 0.99 under P(s) = 1 - (1 - s^r)^b; or, given weights, the ones "
        "minimizing the weighted false positive and false negative probabilities), those probabilities, "
        "P(s) at a few similarities, what a candidate is verified on, and the S-curve.",
        epilog="examples:\n  neardup params --threshold 0.8 --num-perm 128\n"
        "  neardup params --threshold 0.9 --fn-weight 0.8 --fp-weight 0.2\n"
        "  neardup params --threshold 0.8 --bands 16 --rows 8 --json",
    )
    params.add_argument("--threshold", "-t", type=float, default=0.8, help="Jaccard threshold (default 0.8)")
    params.add_argument("--num-perm", "-k", type=int, default=128, help="signature length (default 128)")
    params.add_argument(
        "--fp-weight",
        type=float,
        default=None,
        help="weight of false positives (given one weight, the other is 1 minus it; without either, the "
        "service's choice; candidates are verified, so a false positive of the banding costs only time)",
    )
    params.add_argument(
        "--fn-weight",
        type=float,
        default=None,
        help="weight of false negatives (see --fp-weight)",
    )
    params.add_argument(
        "--verify",
        choices=("estimate", "exact"),
        default="estimate",
        help="the collection's verification (default estimate: one-permutation bins, or every shingle of "
        "a short document; exact: the exact Jaccard of the shingle hash sets)",
    )
    params.add_argument("--bands", type=int, default=None, help="evaluate these bands instead of choosing")
    params.add_argument("--rows", type=int, default=None, help="evaluate these rows instead of choosing")
    params.add_argument("--json", action="store_true", help="print one JSON object")


def add_passages(commands: Any) -> None:
    passages = commands.add_parser(
        "passages",
        help="which stored texts contain passages of a file (plagiarism check)",
        formatter_class=HELP_FORMAT,
        description="Search a collection created with passages on (neardup load --create --passages) for "
        "the stored documents that contain passages of FILE, copied or lightly edited: each source with "
        "its share of the text and the passages' offsets (code points) in both texts. Read-only.",
        epilog="examples:\n"
        "  neardup passages essay.txt --collection sources\n"
        "  neardup passages - --collection sources --json < essay.txt\n"
        "  neardup passages essay.txt -c sources --html report.html --sources sources.jsonl \\\n"
        "      --pan-xml pan/\n\n" + EXIT_CODES_HELP,
    )
    passages.add_argument("input", metavar="FILE", help="a UTF-8 text file, or - for stdin")
    passages.add_argument("--collection", "-c", required=True, help="the collection to search")
    passages.add_argument(
        "--url",
        default=os.environ.get("NEARDUP_URL") or "http://127.0.0.1:8000",
        help="the service (default http://127.0.0.1:8000; env NEARDUP_URL)",
    )
    passages.add_argument(
        "--api-key", default=None, help="API key sent as a Bearer token (env NEARDUP_API_KEY)"
    )
    passages.add_argument("--limit", type=int, default=10, help="most sources to report (default 10)")
    passages.add_argument(
        "--min-words",
        type=int,
        default=None,
        help="shortest passage reported, in words (default: the service's, 20)",
    )
    passages.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer")
    passages.add_argument("--json", action="store_true", help="print the API's JSON instead of the report")
    passages.add_argument(
        "--pan-xml",
        metavar="DIR",
        default=None,
        help="also write PAN text-alignment XML to DIR/<FILE's stem>.xml (stdin: stdin.xml): one "
        "detected-plagiarism feature per passage, offsets in code points, the source's id as its reference",
    )
    passages.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="also write an HTML report (one file, no external assets): coverage and containments, then "
        "the text beside each source's text, passages highlighted in both (sources' texts from --sources)",
    )
    passages.add_argument(
        "--sources",
        metavar="FILE",
        default=None,
        help="the sources' texts for --html: the JSONL or CSV file or folder the collection was loaded from, "
        "read as neardup load reads it (without it, or for an id not in it, only the text is highlighted)",
    )
    passages.add_argument(
        "--sources-format",
        choices=["auto", "jsonl", "csv", "text"],
        default="auto",
        help="how --sources is read, as neardup load's --format (default auto)",
    )
    passages.add_argument("--id-field", default="id", help="field or column of --sources' ids (default id)")
    passages.add_argument(
        "--text-field", default="text", help="field or column of --sources' texts (default text)"
    )


def add_valkey_module(commands: Any) -> None:
    commands.add_parser(
        "valkey-module",
        help="print the path of neardup's Valkey module (for loadmodule on your own server)",
        formatter_class=HELP_FORMAT,
        description="The embedded Valkey loads this module: the check script's band step runs as one "
        "command (ND.BANDS) instead of one to three Lua calls per band, about half the server's CPU per "
        "checked document. An external Valkey or Redis server can load it too (it needs a copy it may "
        "execute); without it the service uses the Lua band step, which stores the same data.",
        epilog='example:\n  install -m 755 "$(neardup valkey-module)" /etc/valkey/neardup_valkey.so\n'
        "  # then in valkey.conf: loadmodule /etc/valkey/neardup_valkey.so",
    )


def add_bench(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="run the benchmarks of a source checkout (bench/)",
        formatter_class=HELP_FORMAT,
        description="Run bench/bench_sketch.py (signatures, similarity, accuracy vs rensa and datasketch) or "
        "bench/bench_service.py (the HTTP service under load) with this Python; every further argument is "
        "passed to the script. The exit status is the script's.",
        epilog="examples:\n  neardup bench sketch --quick\n  neardup bench service -- --help\n"
        "  neardup bench all --quick",
    )
    bench.add_argument("target", choices=["sketch", "service", "all"], help="which benchmark")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


def settings_from(args: argparse.Namespace) -> Settings:
    """Flags win over the environment. They are written back into the environment so that worker
    processes, which build their own Settings, see the same values."""
    from pydantic import ValidationError

    from neardup.settings import Settings

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
        raise CliError(f"invalid settings: {problems}", ExitCode.USAGE) from None


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
            from neardup.storage import DataDirInUse, EmbeddedValkey
            from neardup.storage.embedded import STATUS_FILE_ENV, Supervisor, status_file_in_temp

            # Started here, in the main thread of the parent process: once for all workers, and it
            # dies with this process even on SIGKILL (the server is bound to the thread that started it).
            # The data directory's lock is this process's too: the workers are spawned and do not
            # inherit it, so it is held exactly as long as this process (and its server) lives.
            # Supervised: started again when it dies; the workers read its status (/healthz, /metrics).
            try:
                embedded = Supervisor(
                    EmbeddedValkey(
                        settings.data_dir,
                        fsync=settings.fsync,
                        malloc=settings.valkey_malloc,
                        owner=f"neardup serve on http://{settings.host}:{settings.port}",
                    ),
                    attempts=settings.store_restart_attempts,
                    backoff=settings.store_restart_backoff,
                    status_file=status_file_in_temp(),
                )
                url = embedded.start()
            except DataDirInUse as exc:
                raise CliError(
                    f"the data directory {exc.data_dir} is in use by {exc.holder}: stop it first, or "
                    "give this service another --data-dir"
                ) from None
            except (OSError, RuntimeError) as exc:
                raise CliError(f"could not start the embedded Valkey in {settings.data_dir}: {exc}") from None
            os.environ["NEARDUP_REDIS_URL"] = url
            os.environ[STATUS_FILE_ENV] = str(embedded.status_file)
            log.info(
                "embedded valkey on %s, data in %s (malloc: %s)",
                url,
                settings.data_dir.resolve(),
                embedded.server.malloc,
            )
        with metrics_dir(settings.workers):
            uvicorn.run(
                "neardup.main:create_app",
                factory=True,
                host=settings.host,
                port=settings.port,
                workers=settings.workers,
                log_level=args.log_level,
                log_config=log_config(args.log_level, args.log_format, args.access_log),
                # With JSON logs the access log is ours (request id, route, duration), not uvicorn's.
                access_log=args.access_log and args.log_format == "text",
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
    logging.getLogger("httpx").setLevel(logging.WARNING)  # load's requests are in its progress bar
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "valkey-module":
            from neardup.storage.embedded import valkey_module

            path = valkey_module()
            if path is None:
                raise CliError("this installation has no Valkey module: reinstall neardup with pip")
            print(path)
            return ExitCode.OK
        if args.command in ("load", "dedup", "mirrors", "params", "bench", "passages"):
            import importlib

            module = importlib.import_module(f"neardup.commands.{args.command}")
            status: int = module.run(args)
            return status
        raise CliError(f"unknown command {args.command!r}", ExitCode.USAGE)
    except CliError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.status
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "neardup":
            raise
        # The base install is the client side; the service and the offline commands need the extra.
        print(
            f"{PROG}: error: '{PROG} {args.command}' needs the server extra (no module {exc.name!r}): "
            f"{SERVER_EXTRA_HINT}",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `neardup dedup ... --out - | head`: the reader left; not an error of ours
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps Python's exit flush quiet
        return ExitCode.OK
    except Exception as exc:  # a one-line report beats a traceback for someone starting a server
        print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
