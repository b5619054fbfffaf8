"""CI-sized run of the quality harness (bench/report.py on a few hundred documents generated from
Python's standard library): the outputs exist and are sane, and the exact truth of bench/truth.py equals
a brute-force comparison of every pair of reference shingle sets. The full run is a documented command
(BENCHMARKS.md), not a test."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
DOCUMENTS = 200

for module in ("datasketch", "rensa", "matplotlib"):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is missing: pip install '.[bench]'", allow_module_level=True)


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "report.py"),
            "--tiny",
            str(DOCUMENTS),
            "--mutations",
            "12",
            "--skip-speed",
            "--results",
            str(out),
            "--markdown",
            str(out / "BENCHMARKS.md"),
        ],
        check=True,
        timeout=240,
        cwd=out,
        capture_output=True,
    )
    return out


def _unit(x: float) -> bool:
    return isinstance(x, float | int) and 0.0 <= x <= 1.0


def test_outputs_exist_and_are_sane(report: Path) -> None:
    for name in ("s_curve", "precision_recall", "tradeoff", "mutations", "speed"):
        png = report / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert png.stat().st_size > 5_000, name
    q = json.loads((report / "quality.json").read_text())
    assert q["documents"] == DOCUMENTS
    assert q["truth"]["pairs"] > 0
    service = q["neardup_service"]["thresholds"]
    assert set(service) == {"0.5", "0.6", "0.7", "0.8", "0.9"}
    for t, run in service.items():
        for mode in ("check", "query"):
            s = run[mode]
            for key in ("precision", "recall", "precision_non_identical", "recall_non_identical"):
                assert _unit(s[key]), (t, mode, key, s[key])
            assert s["true_positives"] <= min(s["predicted"], s["positives"])
        for rate in run["mutations"].values():
            assert (rate["recall"] is None or _unit(rate["recall"])) and _unit(rate["detected"])
        assert run["redis_bytes_per_document"] > 0
    # identical documents are always found: at threshold 0.9 recall cannot be poor on this corpus
    assert service["0.9"]["check"]["recall"] > 0.8
    for runs in q["libraries"]["thresholds"].values():
        for run in runs.values():
            for kind in ("raw", "estimate_filtered"):
                assert _unit(run[kind]["check"]["precision"]) and _unit(run[kind]["check"]["recall"])
    for point in q["tradeoff"]["points"]:
        assert _unit(point["precision"]) and _unit(point["recall"])
    for bucket in q["s_curve"]["buckets"]:
        assert bucket["candidate_rate"] is None or _unit(bucket["candidate_rate"])
    summary = json.loads((report / "summary.json").read_text())
    assert (
        summary["curves"]["neardup check (service)"]["0.8"]["precision"]
        == service["0.8"]["check"]["precision"]
    )
    text = (report / "BENCHMARKS.md").read_text()
    assert "s_curve.png" in text and "| neardup check (service) |" in text


def test_truth_equals_brute_force(report: Path) -> None:
    truth = _load("truth")
    reference = truth.reference
    docs = [json.loads(line) for line in (report / "tiny-corpus.jsonl").read_text().splitlines()]
    assert len(docs) == DOCUMENTS
    exact_sets = [reference.shingles(d["text"]) for d in docs]  # the slow, plain reference
    expected = truth.brute_force_pairs(exact_sets, 0.5)
    found = truth.all_pairs(truth.shingle_sets([d["text"] for d in docs]), 0.5)
    got = set(zip(found["i"].tolist(), found["j"].tolist(), strict=True))
    assert got == expected
    for i, j, inter, union in zip(found["i"], found["j"], found["inter"], found["union"], strict=True):
        a, b = exact_sets[int(i)], exact_sets[int(j)]
        assert (len(a & b), len(a | b)) == (int(inter), int(union))
    # ... and at other thresholds too, where the prefixes differ
    for t in (0.3, 0.8, 1.0):
        at_t = truth.all_pairs(truth.shingle_sets([d["text"] for d in docs]), t)
        assert set(zip(at_t["i"].tolist(), at_t["j"].tolist(), strict=True)) == truth.brute_force_pairs(
            exact_sets, t
        )


def test_words_match_the_reference_on_tricky_text() -> None:
    truth = _load("truth")
    for text in (
        "Café naïve ﬁne",
        "e\u0301te\u0301 de\u0301ja\u0300",
        "中文字符 and 日本語テキスト",
        "A_b c-d 12x",
        "\ud800 lone surrogate",
        "ΣΑΣ ὈΔΥΣΣΕΎΣ",
        "क्षत्रिय हिन्दी",
    ):
        assert truth.words(text) == truth.reference.words(text), text
