"""What ``_common.lua`` (with ``_clock.lua``) costs a script call that does not need it: the server's
time per call of a script that returns at once, bare and with those files prepended, on an embedded
Valkey. Why the cluster's stamp takes them only for a collection with a site_field
(``cluster_stamp_sites``: docs/design.md, "Sites on a cluster"). Prints JSON.

    python bench/script_prelude_cost.py               # 5 rounds of 5,000 calls each

The server's own time (``INFO commandstats``, ``cmdstat_evalsha`` usec per call) is the figure; the
round trip seen by the client is printed beside it as context. Medians of the rounds, the two scripts
interleaved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import cpu_model, git_commit  # noqa: E402

from neardup.storage import EmbeddedValkey, keys  # noqa: E402
from neardup.storage.scripts import _source  # noqa: E402


def calls(client: redis.Redis, sha: str, n: int, head: list[Any]) -> tuple[float, float]:
    """(server us per call, round trip us per call) of n calls of script ``sha``."""
    client.config_resetstat()
    started = time.perf_counter()
    for _ in range(n):
        client.evalsha(sha, 1, keys.state("c"), *head)
    elapsed = time.perf_counter() - started
    stats = client.info("commandstats")["cmdstat_evalsha"]
    return stats["usec"] / stats["calls"], elapsed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    prelude = _source("cluster_journal", "lua").split("local st, status = load_state()")[0]
    sources = {"bare": "return 1", "with_common": prelude + "\nreturn 1"}
    k = keys.CollectionKeys("c", "g")
    head = [k.gen, k.band_prefix, k.id_prefix, k.sig_prefix, k.cluster_sites.doc_prefix, 16, 64, 5, 120]
    found: dict[str, dict[str, list[float]]] = {name: {"server": [], "round_trip": []} for name in sources}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedValkey(Path(tmp) / "valkey") as server:
        client = redis.Redis.from_url(server.url)
        shas = {name: client.script_load(text) for name, text in sources.items()}
        for _ in range(args.rounds):
            for name, sha in shas.items():
                server_us, round_trip_us = calls(client, sha, args.calls, head)
                found[name]["server"].append(server_us)
                found[name]["round_trip"].append(round_trip_us)
        client.close()
    result = {
        "benchmark": "script_prelude_cost",
        "commit": git_commit(),
        "cpu": cpu_model(),
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "us_per_call": {
            name: {what: round(statistics.median(v), 2) for what, v in figures.items()}
            for name, figures in found.items()
        },
    }
    server = result["us_per_call"]
    result["prelude_server_us"] = round(server["with_common"]["server"] - server["bare"]["server"], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
