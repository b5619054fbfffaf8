"""The randomized fault harness (``bench/cluster_faults.py``), short and seeded: a cluster of 3
primaries and 3 replicas on loopback (the module loaded, ``appendfsync always``), three real
``neardup serve`` processes with ``NEARDUP_MIN_REPLICAS=1``, clients checking groups of near-duplicates
from different processes with retries, while one fault of each kind is injected (a service paused and
killed, a primary killed and failed over, slots resharded, a graceful failover, a replica frozen). The
checker finds no violation: one original per group, every acknowledged document found by its id and
its text with its own record, no ordinal named twice. The long run is the benchmark's."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster_faults.py"
SEED = 29


def test_one_fault_of_each_kind_breaks_no_promise(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_cluster_faults", BENCH)
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = harness  # its dataclasses look their module up
    spec.loader.exec_module(harness)
    report = asyncio.run(
        harness.run(tmp_path, seconds=2.0, seed=SEED, workers=3, gap=0.3, hold=2.5, client_timeout=2.0)
    )
    assert report["violations"] == [], report
    assert report["fault_errors"] == [], report
    assert report["faults"] == {kind: 1 for kind in harness.KINDS}, report
    assert report["unanswered"] == [], report
    # The run did what it says: many groups checked across the faults, and some answers refused.
    assert report["checks_acknowledged"] >= 40, report
