"""The randomized fault harness (``bench/cluster_faults.py``), short and seeded: a cluster of 3
primaries and 3 replicas on loopback (the module loaded, ``appendfsync always``), two real
``neardup serve`` processes with ``NEARDUP_MIN_REPLICAS=1``, clients checking groups of near-duplicates
from different processes with retries, while one fault of each kind is injected (a service paused and
killed, a primary killed and failed over, slots resharded, a graceful failover, a replica frozen). The
checker finds no violation: one original per group, every acknowledged document found by its id, its
text and a passage search with its own record, no ordinal named twice, the site counts those the
answers imply. The long run is the
benchmark's. The checker itself is tested on a made-up history that breaks each rule of first seen
wins."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "cluster_faults.py"
SEED = 29


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cluster_faults", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_checker_reports_each_broken_promise(harness: ModuleType) -> None:
    # A made-up history: group 0 has two originals, group 1 an original sent after another member's
    # answer came back and a duplicate naming a document outside its group, group 2 a member answered
    # twice (its first attempt's answer came late), differently.
    history = harness.History()

    def answered(doc_id: str, sent: float, at: float, duplicate_of: str | None) -> None:
        history.sent[doc_id] = ("text", {})
        history.first_sent[doc_id] = sent
        answer = {"duplicate": duplicate_of is not None, "duplicate_of": duplicate_of, "inserted": True}
        history.acknowledged.setdefault(doc_id, []).append((at, answer))

    answered("g0-v0", 0.0, 1.0, None)
    answered("g0-v1", 0.0, 1.0, None)
    answered("g1-v0", 0.0, 1.0, "g1-v1")
    answered("g1-v1", 2.0, 3.0, None)
    answered("g1-v2", 0.0, 1.0, "g0-v0")
    answered("g2-v0", 0.0, 1.0, None)
    answered("g2-v1", 0.0, 1.0, "g2-v0")
    answered("g2-v1", 0.0, 5.0, None)
    kinds = sorted(v["kind"] for v in harness.check_history(history))
    assert kinds == [
        "answers_disagree",
        "original_after_an_acknowledged_member",
        "two_originals",
        "two_originals",
        "wrong_duplicate_of",
    ]


@pytest.mark.slow
def test_one_fault_of_each_kind_breaks_no_promise(harness: ModuleType, tmp_path: Path) -> None:
    report = asyncio.run(
        harness.run(tmp_path, seconds=2.0, seed=SEED, services=2, workers=6, gap=0.3, hold=2.0)
    )
    assert report["violations"] == [], report
    assert report["fault_errors"] == [], report
    assert report["faults"] == {kind: 1 for kind in harness.KINDS}, report
    assert report["unanswered"] == [], report
    # The run did what it says: groups were checked across the faults.
    assert report["checks_acknowledged"] >= 40, report
    # and its sites share pages (each group's members are pages of four sites), which the checker
    # compared with the answers
    assert sum(n for _, shared in report["sites"].values() for n in shared.values()) >= 40, report["sites"]
