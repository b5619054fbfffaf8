"""The report users read: runs the quality harness and the speed benchmarks (or reuses their JSON),
writes ``bench/results/*.json``, PNG plots in ``bench/results/`` and ``BENCHMARKS.md``.

    python bench/corpus.py && python bench/truth.py       # once: the corpus and its exact truth
    python bench/report.py                                # ~20 minutes: quality + speed, then the report
    python bench/report.py --quality bench/results/quality.json --skip-speed   # redraw from saved JSON
    python bench/report.py --tiny 300 --skip-speed --results /tmp/r --markdown /tmp/r/B.md   # CI-sized
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if importlib.util.find_spec("neardup") is None:
    sys.exit("bench needs the installed package: pip install '.[bench]' from the repository root")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import mutations  # noqa: E402
import quality  # noqa: E402

from neardup import sketch  # noqa: E402
from neardup.domain.models import CollectionParams  # noqa: E402

RESULTS = HERE / "results"
HEADLINE = f"{quality.HEADLINE:.1f}"


# --- inputs ------------------------------------------------------------------------------------------


def tiny_corpus(path: Path, count: int = 300, seed: int = 1) -> list[dict[str, str]]:
    """A small corpus from Python's own standard library sources (no network, no packages): distinct
    modules, and edited copies of some of them (1% to 30% of words) so that pairs span the Jaccard
    range. Written as corpus.jsonl to ``path``; returned as the list of documents."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if 1_500 <= p.stat().st_size <= 20_000)
    rng = random.Random(seed)
    originals = rng.sample(files, min(len(files), max(2, count * 2 // 3)))
    docs = [
        {"id": f"stdlib/{p.name}", "text": p.read_text(encoding="utf-8", errors="replace")} for p in originals
    ]
    vocabulary = sorted({w for d in docs[:20] for w in d["text"].split() if w.isalpha()}) or ["word"]
    k = 0
    while len(docs) < count:
        base = docs[k % len(originals)]
        rate = (0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.3)[k % 7]
        text, _ = mutations.mutate(base["text"], rate, random.Random(f"{seed}:{k}"), vocabulary)
        docs.append({"id": f"{base['id']}~{k}", "text": text})
        k += 1
    docs.sort(key=lambda d: d["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for d in docs:
            out.write(json.dumps({**d, "source": "stdlib"}) + "\n")
    return docs


def run_json(command: Sequence[str], timeout: float = 1800) -> dict[str, Any]:
    """Run a benchmark script and parse the JSON it prints on stdout."""
    proc = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    text = proc.stdout
    result: dict[str, Any] = json.loads(text[text.index("{") :])
    return result


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "active_isa": sketch.active_isa(),
        "commit": commit,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


# --- extraction --------------------------------------------------------------------------------------


def tool_curves(q: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """{tool label: {threshold: {precision, recall, precision_non_identical, recall_non_identical}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    keys = ("precision", "recall", "precision_non_identical", "recall_non_identical")
    service = q.get("neardup_service", {}).get("thresholds", {})
    for t, v in service.items():
        out.setdefault("neardup check (service)", {})[t] = {k: v["check"][k] for k in keys}
        out.setdefault("neardup query (service)", {})[t] = {k: v["query"][k] for k in keys}
    for t, runs in q.get("libraries", {}).get("thresholds", {}).items():
        for label, run in runs.items():
            generic = _generic_label(label)
            if generic is None:
                continue
            out.setdefault(generic, {})[t] = {k: run["raw"]["check"][k] for k in keys}
            out.setdefault(generic + " + estimate filter", {})[t] = {
                k: run["estimate_filtered"]["check"][k] for k in keys
            }
    return out


def _generic_label(label: str) -> str | None:
    """Library runs under a name that does not depend on the threshold: the tool's own banding."""
    if label.startswith("datasketch (b="):
        return "datasketch MinHashLSH"
    if label.startswith("datasketch (neardup"):
        return "datasketch, neardup's b/r"
    if label.startswith("rensa (b=16"):
        return "rensa RMinHashLSH b=16"
    return None


def mutation_table(q: dict[str, Any], t: str = HEADLINE) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    table = _mutation_rows(q, t)
    for label, per_rate in table.items():
        # no mutant at or above the threshold: recall is undefined, not 1.0
        out[label] = {
            r: {**v, "recall": v["recall"] if v.get("at_or_above_threshold") else None}
            for r, v in per_rate.items()
        }
    return out


def _mutation_rows(q: dict[str, Any], t: str) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    service = q.get("neardup_service", {}).get("thresholds", {}).get(t)
    if service:
        out["neardup query (service)"] = service["mutations"]
    for label, run in q.get("libraries", {}).get("thresholds", {}).get(t, {}).items():
        generic = _generic_label(label)
        if generic:
            out[generic] = run["raw"]["mutations"]
            out[generic + " + estimate filter"] = run["estimate_filtered"]["mutations"]
    return out


def speed_summary(signatures: dict[str, Any] | None, service: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if signatures:
        sig = signatures.get("signatures", {})
        out["signature_mb_per_s"] = {
            "neardup": sig.get("neardup", {}).get("mb_per_s"),
            "rensa (pre-made shingles)": max(
                sig.get("rensa_batch", {}).get("mb_per_s") or 0,
                sig.get("rensa_objects", {}).get("mb_per_s") or 0,
            )
            or None,
            "datasketch": sig.get("datasketch", {}).get("mb_per_s"),
        }
        out["signature_load_average"] = signatures.get("machine", {}).get("load_average_at_start")
    if service:
        workers = service.get("neardup", {})
        best = workers.get("workers_2") or workers.get("workers_1") or {}
        batch = best.get("batch", {})
        ds = service.get("datasketch", {})
        out["check_docs_per_s"] = {
            "neardup (service, batch check)": batch.get("docs_per_s"),
            "datasketch (Redis storage, end to end)": ds.get("docs_per_s_end_to_end"),
        }
        out["redis_bytes_per_document"] = {
            "neardup": batch.get("redis_bytes_per_doc"),
            "datasketch": ds.get("redis_bytes_per_doc"),
        }
        out["service_workers"] = "2" if "workers_2" in workers else "1"
        out["service_load_average"] = service.get("machine", {}).get("load_average_at_start")
        out["service_document_bytes"] = service.get("corpus", {}).get("mean_document_bytes") or service.get(
            "corpus", {}
        ).get("bytes_per_document")
    return out


# --- plots -------------------------------------------------------------------------------------------


def plot_s_curve(q: dict[str, Any], path: Path) -> None:
    sc = q["s_curve"]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    ax.plot(
        sc["curve"]["s"],
        sc["curve"]["p"],
        color="C0",
        lw=2,
        label=f"P(s) = 1-(1-s^r)^b, b={sc['bands']}, r={sc['rows']} (defaults)",
    )
    xs, ys, ns = [], [], []
    for b in sc["buckets"]:
        if b["candidate_rate"] is None or b["low"] >= 1.0:
            continue
        xs.append(b["mean_jaccard"])
        ys.append(b["candidate_rate"])
        ns.append(b["pairs"])
    errors = [(y * (1 - y) / n) ** 0.5 if n else 0.0 for y, n in zip(ys, ns, strict=True)]
    ax.errorbar(xs, ys, yerr=errors, fmt="none", ecolor="C3", elinewidth=1, capsize=2, zorder=3)
    ax.scatter(
        xs,
        ys,
        s=[6 + 0.12 * min(n, 1000) for n in ns],
        color="C3",
        zorder=3,
        alpha=0.8,
        label="measured: candidate rate of true pairs per Jaccard bucket\n"
        "(area ~ pairs, bars: binomial s.e.)",
    )
    for x, y, n in zip(xs, ys, ns, strict=True):
        ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, -11), fontsize=7, color="C3")
    t = q["defaults"]["threshold"]
    ax.axvline(t, color="k", lw=0.8, ls=":")
    ax.text(t + 0.005, 0.03, f"threshold {t}", fontsize=8)
    ax.set_xlim(0.3, 1.0)
    ax.set_ylim(-0.02, 1.04)
    ax.set_xlabel("true Jaccard of the word 5-gram sets")
    ax.set_ylabel("probability of becoming a candidate")
    ax.set_title("LSH S-curve of the default banding vs. measured on the corpus")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_precision_recall(curves: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=100, sharex=True)
    styles = {
        "neardup check (service)": ("C0", "-", "o"),
        "neardup query (service)": ("C0", ":", "s"),
        "datasketch MinHashLSH": ("C1", "--", "v"),
        "datasketch MinHashLSH + estimate filter": ("C1", "-", "v"),
        "datasketch, neardup's b/r": ("C4", "--", "^"),
        "datasketch, neardup's b/r + estimate filter": ("C4", "-", "^"),
        "rensa RMinHashLSH b=16": ("C2", "--", "D"),
        "rensa RMinHashLSH b=16 + estimate filter": ("C2", "-", "D"),
    }
    panels = [
        ("precision", "precision"),
        ("recall", "recall"),
        ("precision_non_identical", "precision, pairs with non-identical sets"),
        ("recall_non_identical", "recall, pairs with non-identical sets"),
    ]
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        for label, per_t in curves.items():
            color, ls, marker = styles.get(label, ("0.4", "-", "."))
            ts = sorted(per_t, key=float)
            ax.plot(
                [float(t) for t in ts],
                [per_t[t][key] for t in ts],
                color=color,
                ls=ls,
                marker=marker,
                ms=4,
                label=label,
            )
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(max(0.0, min(ax.get_ylim()[0], 0.9)), 1.005)
    axes[1, 0].set_xlabel("threshold")
    axes[1, 1].set_xlabel("threshold")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.suptitle("Precision and recall against the exact truth, per threshold and tool")
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    fig.savefig(path)
    plt.close(fig)


def plot_tradeoff(q: dict[str, Any], path: Path) -> None:
    points = q["tradeoff"]["points"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), dpi=100)
    shapes = sorted({(p["bands"], p["rows"]) for p in points})
    panels = (("precision", "recall"), ("precision_non_identical", "recall_non_identical"))
    for n, (b, r) in enumerate(shapes):
        mine = [p for p in points if (p["bands"], p["rows"]) == (b, r)]
        line = sorted((p for p in mine if p["offset"] != "service"), key=lambda p: p["offset"])
        service = mine[0]["service_banding"]
        label = f"b={b}, r={r}, P(t)={mine[0]['p_candidate_at_threshold']:.3f}" + (
            " (the service's)" if service else ""
        )
        for ax, (pk, rk) in zip(axes, panels, strict=True):
            ax.plot(
                [p[rk] for p in line],
                [p[pk] for p in line],
                marker="o",
                ms=3,
                color=f"C{n % 10}",
                label=label,
                alpha=0.85,
                lw=2 if service else 1,
            )
            if service:
                for p in line:
                    ax.annotate(
                        f"{p['offset']:+.2f}",
                        (p[rk], p[pk]),
                        fontsize=7,
                        xytext=(3, 3),
                        textcoords="offset points",
                        color=f"C{n % 10}",
                    )
                sel = [p for p in mine if p["offset"] == "service"]
                ax.scatter(
                    [sel[0][rk]],
                    [sel[0][pk]],
                    s=170,
                    facecolors="none",
                    edgecolors="k",
                    lw=1.6,
                    zorder=4,
                    label="the service's floor" if ax is axes[0] else None,
                )
    titles = ("all truth pairs", "pairs with non-identical shingle sets")
    for ax, title in zip(axes, titles, strict=True):
        ax.axhline(quality.TARGETS["precision"], color="k", ls=":", lw=0.8)
        ax.axvline(quality.TARGETS["recall"], color="k", ls=":", lw=0.8)
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_title(f"threshold {q['tradeoff']['threshold']}: {title}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(
        f"The service's check at t = {q['tradeoff']['threshold']}: banding x verification floor t + x "
        "(x on the points); dotted: targets",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path)
    plt.close(fig)


def plot_mutations(table: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), dpi=100)
    rates = sorted({r for v in table.values() for r in v}, key=float)
    width = 0.8 / max(len(table), 1)
    panels = (
        ("recall", f"recall: found among mutants with exact J >= {HEADLINE}"),
        ("detected", "detected: found among all mutants, whatever their J"),
    )
    for ax, (key, title) in zip(axes, panels, strict=True):
        shown = [
            r
            for r in rates
            if key == "detected"
            or all((v.get(r, {}).get("at_or_above_threshold") or 0) >= 10 for v in table.values())
        ]
        for n, (label, per_rate) in enumerate(table.items()):
            xs = np.arange(len(shown)) + n * width - 0.4 + width / 2
            ys = [per_rate[r][key] if r in per_rate and per_rate[r][key] is not None else 0 for r in shown]
            ax.bar(xs, ys, width, label=label, color=f"C{n}")
        ax.set_xticks(np.arange(len(shown)))
        any_rates = next(iter(table.values()), {})
        ax.set_xticklabels(
            [
                f"{float(r) * 100:g}% edits\nmean J {any_rates.get(r, {}).get('mean_true_jaccard', 0):.2f}"
                for r in shown
            ],
            fontsize=8,
        )
        if key == "recall":
            ax.axhline(quality.TARGETS["recall_at_1pct_edits"], color="k", ls=":", lw=0.8)
            ax.set_ylim(0.5, 1.01)
        else:
            ax.set_ylim(0, 1.01)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7.5)
    fig.suptitle(
        f"Robustness to word edits (+ case and white-space noise), threshold {HEADLINE}", fontsize=11
    )
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    fig.savefig(path)
    plt.close(fig)


def plot_speed(speed: dict[str, Any], path: Path) -> None:
    panels = [
        ("signature_mb_per_s", "text to signature, MB/s (1 core)"),
        ("check_docs_per_s", "check, documents/s (with storage)"),
        ("redis_bytes_per_document", "Redis bytes per document"),
    ]
    panels = [(k, t) for k, t in panels if speed.get(k)]
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.2 * max(len(panels), 1), 4), dpi=100)
    axes_list = [axes] if len(panels) <= 1 else list(axes)
    if not panels:
        axes_list[0].text(0.5, 0.5, "speed not measured in this run (--skip-speed)", ha="center", va="center")
        axes_list[0].set_axis_off()
    for ax, (key, title) in zip(axes_list, panels, strict=False):
        items = [(k, v) for k, v in speed[key].items() if v]
        ax.bar(range(len(items)), [v for _, v in items], color=[f"C{i}" for i in range(len(items))])
        ax.set_xticks(range(len(items)))
        ax.set_xticklabels([k.replace(" (", "\n(") for k, _ in items], fontsize=7)
        for i, (_, v) in enumerate(items):
            ax.text(i, v, f"{v:,.0f}" if v >= 10 else f"{v:.2f}", ha="center", va="bottom", fontsize=8)
        if key == "signature_mb_per_s":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- markdown ---------------------------------------------------------------------------------------


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def describe_defaults(q: dict[str, Any]) -> str:
    """The service's defaults at the headline threshold, as the quality run's collection had them."""
    d = q["defaults"]
    head = q.get("neardup_service", {}).get("thresholds", {}).get(HEADLINE, {})
    bands, rows = head.get("bands", d["bands"]), head.get("rows", d["rows"])
    verify = head.get("verify", d.get("verify", "estimate"))
    p_t = float(sketch.collision_probability(float(HEADLINE), bands, rows))
    if verify == "exact":
        sketch_words = "the sorted 32-bit hashes of its shingles, the exact Jaccard"
        needs = "a Jaccard"
    else:
        bins = head.get("bins", d.get("bins"))
        sketch_words = f"{bins:,} two-bit bins, compared shingle by shingle for short documents"
        needs = "an estimate"
    return (
        f"Band keys b={bands}, r={rows} (a pair at {HEADLINE} becomes a candidate with probability "
        f"{p_t:.3f}); every candidate is verified on its stored sketch (`verify: {verify}`: {sketch_words}) "
        f"and a match needs {needs} of at least {d.get('floor', HEADLINE)}."
    )


def headline_section(q: dict[str, Any], summary: dict[str, Any]) -> str:
    """The headline: precision and recall of the service's defaults at the headline threshold, beside
    datasketch and rensa, and the targets met or not (empty without a service run at that threshold)."""
    head = q.get("neardup_service", {}).get("thresholds", {}).get(HEADLINE)
    if not head:
        return ""
    curves, mt = summary["curves"], summary["mutations"]
    m1 = head["mutations"].get("0.01", {})
    lines = [
        f"## Headline: the service's defaults at threshold {HEADLINE}",
        "",
        describe_defaults(q)
        + f" Measured on {q['documents']:,} documents ({q['corpus_bytes'] / 1e6:.1f} MB) against their "
        f"exact truth, and {q['mutation_set']['mutants']:,} edited copies of {q['mutation_set']['bases']} "
        "of them (`bench/quality.py`).",
        "",
        "| | precision | recall | precision (non-identical) | recall (non-identical) | recall at 1% edits |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, key in (("neardup check (service)", "check"), ("neardup query (service)", "query")):
        c = head[key]
        lines.append(
            f"| {label} | {_f(c['precision'])} | {_f(c['recall'])} | {_f(c['precision_non_identical'])} | "
            f"{_f(c['recall_non_identical'])} | {_f(m1.get('recall'))} |"
        )
    for label in curves:
        if label.startswith("neardup"):
            continue
        c = curves[label].get(HEADLINE)
        if c:
            lines.append(
                f"| {label} | {_f(c['precision'])} | {_f(c['recall'])} | "
                f"{_f(c['precision_non_identical'])} | {_f(c['recall_non_identical'])} | "
                f"{_f(mt.get(label, {}).get('0.01', {}).get('recall'))} |"
            )
    met = q.get("targets_met", {})
    names = {"precision": "precision", "recall": "recall", "recall_at_1pct_edits": "recall at 1% edits"}
    lines += [
        "",
        f"Targets: precision >= {quality.TARGETS['precision']}, recall >= {quality.TARGETS['recall']}, "
        f"recall >= {quality.TARGETS['recall_at_1pct_edits']} at 1% edits: "
        + ", ".join(f"{names.get(k, k)} {'met' if v else 'NOT met'}" for k, v in met.items())
        + ".",
        "",
    ]
    return "\n".join(lines) + "\n"


def markdown(summary: dict[str, Any], q: dict[str, Any], results_rel: str) -> str:
    curves = summary["curves"]
    lines = [
        "# Benchmarks: quality and speed",
        "",
        "Generated by `bench/report.py` from the JSON in `bench/results/`; every figure here comes from a "
        "script anyone can rerun. Quality numbers do not depend on machine load; speed numbers do (the "
        "load average is recorded with each).",
        "",
        "```sh",
        "python bench/corpus.py && python bench/truth.py   # the corpus and its exact truth (once)",
        "python bench/report.py                           # quality + speed + this file (~10-30 minutes)",
        "```",
        "",
        f"Machine: {summary['machine']['cpu']}, {summary['machine']['cores']} cores, Python "
        f"{summary['machine']['python']}, kernels `{summary['machine']['active_isa']}`; "
        "load average during the quality run "
        f"{q.get('load_average_at_start')} -> {q.get('load_average_at_end')}.",
        "",
        "## Corpus and truth",
        "",
        f"{q['documents']:,} documents, {q['corpus_bytes'] / 1e6:.1f} MB "
        f"({summary.get('corpus_name', 'bench/corpus.py')}). "
        f"Exact truth (`bench/truth.py`): every pair whose reference word 5-gram sets (`tests/reference.py`) "
        f"have Jaccard >= 0.5, by an inverted index with prefix filtering, counted exactly: "
        f"{q['truth']['pairs']:,} pairs, {q['truth']['identical_pairs']:,} of them with identical sets. "
        "Pairs at or above each threshold: "
        + ", ".join(f"{k}: {v:,}" for k, v in q["truth"]["pairs_at_least"].items())
        + ".",
        "",
        f"Mutation set (`bench/mutations.py`): {q['mutation_set']['bases']} documents, each with "
        + ", ".join(f"{r * 100:g}%" for r in q["mutation_set"]["rates"])
        + " of its words substituted, inserted or deleted at random positions, plus case and white-space "
        "noise (fixed seeds). Recall per edit rate counts the mutants whose exact Jaccard with their "
        "base is at or above the threshold (a perfect tool scores 1.0); *detected* counts them all.",
        "",
    ]
    headline = headline_section(q, summary)
    if headline:
        lines += [headline.rstrip("\n"), ""]
    lines += [
        "## Precision and recall per threshold",
        "",
        f"![precision/recall]({results_rel}/precision_recall.png)",
        "",
    ]
    ts = [f"{t:.1f}" for t in q["thresholds"]]
    lines += ["| tool | " + " | ".join(f"P@{t} / R@{t}" for t in ts) + " |", "| --- |" + " --- |" * len(ts)]
    for label, per_t in curves.items():
        cells = [f"{_f(per_t[t]['precision'])} / {_f(per_t[t]['recall'])}" if t in per_t else "-" for t in ts]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "On pairs whose shingle sets are not identical:", ""]
    lines += ["| tool | " + " | ".join(f"P@{t} / R@{t}" for t in ts) + " |", "| --- |" + " --- |" * len(ts)]
    for label, per_t in curves.items():
        cells = [
            f"{_f(per_t[t]['precision_non_identical'])} / {_f(per_t[t]['recall_non_identical'])}"
            if t in per_t
            else "-"
            for t in ts
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    service = q.get("neardup_service", {}).get("thresholds", {})
    if service:
        lines += [
            "",
            "The service's banding per threshold (its defaults for a collection created with only the "
            "threshold): "
            + ", ".join(f"{t}: b={v['bands']}, r={v['rows']}" for t, v in service.items())
            + ".",
        ]
    lines += [
        "",
        f"## Robustness to edits (threshold {HEADLINE})",
        "",
        f"![mutations]({results_rel}/mutations.png)",
        "",
    ]
    mt = summary["mutations"]
    rates = sorted({r for v in mt.values() for r in v}, key=float)
    lines += [
        "| tool | " + " | ".join(f"{float(r) * 100:g}% edits" for r in rates) + " |",
        "| --- |" + " --- |" * len(rates),
    ]
    for label, per_rate in mt.items():
        cells = [
            f"{_f(per_rate[r]['recall'])} ({_f(per_rate[r]['detected'], 2)})" if r in per_rate else "-"
            for r in rates
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    any_rates: dict[str, dict[str, Any]] = next(iter(mt.values()), {})
    lines += [
        "",
        "Recall (detected, all mutants). Mean exact Jaccard of a mutant with its base: "
        + ", ".join(
            f"{float(r) * 100:g}%: {any_rates[r]['mean_true_jaccard']}" for r in rates if r in any_rates
        )
        + ".",
        "",
    ]
    lines += defaults_section(q, summary, results_rel)
    speed = summary.get("speed", {})
    lines += ["", "## Speed and size", "", f"![speed and size]({results_rel}/speed.png)", ""]
    if speed:
        lines += [
            "| figure | " + " | ".join(["neardup", "rensa", "datasketch"]) + " |",
            "| --- | --- | --- | --- |",
        ]
        sig = speed.get("signature_mb_per_s", {})
        if sig:
            lines.append(
                f"| text to signature, MB/s, 1 core (`bench_sketch.py --only signatures --quick`) | "
                f"{_f(sig.get('neardup'), 1)} | {_f(sig.get('rensa (pre-made shingles)'), 1)} (shingles made "
                f"outside the timing) | {_f(sig.get('datasketch'), 2)} |"
            )
        chk = speed.get("check_docs_per_s", {})
        if chk:
            lines.append(
                "| check, documents/s with storage (`bench_service.py --quick`, "
                f"{speed.get('service_workers')} worker(s), ~4 KB passages) | "
                f"{_f(chk.get('neardup (service, batch check)'), 0)} | - (in memory "
                f"only) | {_f(chk.get('datasketch (Redis storage, end to end)'), 0)} |"
            )
        mem = speed.get("redis_bytes_per_document", {})
        if mem:
            lines.append(
                f"| Redis bytes per document | {_f(mem.get('neardup'), 0)} | - | "
                f"{_f(mem.get('datasketch'), 0)} |"
            )
        lines += [
            "",
            f"Load average when measured: signatures {speed.get('signature_load_average')}, "
            f"service {speed.get('service_load_average')} (2 cores shared with other work: speed figures are "
            "lower bounds; the per-run JSON has CPU-time figures too).",
        ]
    else:
        lines.append("Speed was not measured in this run (`--skip-speed`).")
    if service:
        lines += [
            "",
            "Redis bytes per document of the whole corpus documents "
            f"(~{q['corpus_bytes'] / max(q['documents'], 1) / 1000:.1f} KB) in the quality run, per "
            "threshold (more bands, more bytes): "
            + ", ".join(f"{t}: {v['redis_bytes_per_document']:.0f}" for t, v in service.items())
            + ".",
        ]
    lines += [
        "",
        "Raw results: `bench/results/quality.json`, `summary.json`"
        + (", `signatures.json`, `service.json`." if speed else "."),
    ]
    return "\n".join(lines) + "\n"


def crowds_section(results: Path) -> str:
    """The crowded-bucket run(s) of ``bench/bench_crowds.py`` (crowds.json: the module's band step,
    with datasketch beside; crowds_lua.json: the Lua band step), when they were saved there."""
    runs = [
        (name, json.loads((results / file).read_text()))
        for name, file in (("module", "crowds.json"), ("Lua band step", "crowds_lua.json"))
        if (results / file).exists()
    ]
    if not runs:
        return ""
    first = runs[0][1]
    sizes = list(first["neardup"]["docs_per_s"])
    lines = [
        "## Crowded buckets",
        "",
        f"`python bench/bench_crowds.py`: {first['variants']:,} light "
        "variants of one 400-word template page checked with insert in batches of "
        f"{first['batch']}, then {first['pairs']} pairs (P shares 60% of the template, P2 is P with one word "
        f"changed). A band bucket keeps at most {first['bucket_cap']} ordinals and candidates are ranked by "
        'the buckets they share (docs/design.md, "Crowds"). Documents/s over the 1,000 checks before each '
        "crowd size (one run each; ratios to the rate at 1,000):",
        "",
        "| | " + " | ".join(f"{int(s):,} variants" for s in sizes) + " | pairs found | bytes/doc |",
        "| --- | " + " | ".join("---" for _ in sizes) + " | --- | --- |",
    ]
    for name, run in runs:
        ours = run["neardup"]
        rates = " | ".join(
            f"{ours['docs_per_s'][s]:,} ({ours['vs_first'][s]}x)" for s in sizes if s in ours["docs_per_s"]
        )
        lines.append(
            f"| neardup, {name} | {rates} | {ours['pairs_found']} of {run['pairs']} | "
            f"{ours['used_memory_per_doc']} |"
        )
        cpu = ours.get("valkey_cpu_us_per_doc")
        if cpu:
            lines.append(
                f"| Valkey CPU us/doc, {name} | " + " | ".join(str(cpu.get(s, "-")) for s in sizes) + " | | |"
            )
        theirs = run.get("datasketch_minhashlsh_in_memory")
        if theirs:
            rates = " | ".join(
                f"{theirs['docs_per_s'][s]:,} ({theirs['vs_first'][s]}x)"
                for s in sizes
                if s in theirs["docs_per_s"]
            )
            lines.append(
                f"| datasketch MinHashLSH, in memory, query + insert | {rates} | "
                f"{theirs['pairs_found_among_candidates']} of {run['pairs']} among its candidates "
                "(unverified) | - |"
            )
    return "\n".join(lines) + "\n"


def mirrors_section(results: Path) -> str:
    """``bench/bench_mirrors.py``'s run (mirrors.json), when it was saved there."""
    path = results / "mirrors.json"
    if not path.exists():
        return ""
    run = json.loads(path.read_text())
    crawl, t, cost, memory = run["crawl"], run["throughput"], run["server_cost"], run["memory"]
    met = run["targets_met"]

    def mark(key: str) -> str:
        return "met" if met[key] else "**missed**"

    errors = run["share_error"]
    fn = ", ".join(" / ".join(p) for p in run["false_negatives"]) or "none"
    fp = ", ".join(" / ".join(p) for p in run["false_positives"]) or "none"
    lines = [
        "## Mirror detection",
        "",
        f"`python bench/bench_mirrors.py --rounds {run['args']['rounds']}`: a "
        f"synthetic crawl from the corpus, {crawl['sites']} sites and {crawl['pages']:,} pages "
        f"({crawl['text_mb']} MB): {crawl['originals']} sites of 10 to 300 distinct corpus documents "
        "(log-uniform), most with the same license page and the same error page (one line naming the site "
        f"changed); {crawl['full_mirrors']} full mirrors (every page of an original, 1% of words changed, "
        f"the mirror's own 7-word header and footer) and {crawl['partial_mirrors']} partial mirrors (30-70% "
        "of an original's pages, the same way), checked in one shuffled order through `POST /check/batch` "
        f"({run['args']['batch']} pages a request, {run['args']['clients']} connections, 1 worker). Truth: "
        "exact Jaccard >= 0.8 of the word 5-gram sets "
        f"({crawl['near_duplicate_page_pairs']:,} pairs of pages; "
        f"{crawl['site_pairs_sharing_a_page']:,} pairs of sites share at least one page); a true mirror pair "
        f"has share >= 0.5 in either direction ({crawl['true_mirror_pairs']} pairs).",
        "",
        "| what | measured | target |",
        "| --- | --- | --- |",
        f"| mirror pairs from `GET /mirrors?min_share=0.5`: precision | {run['precision']} "
        f"({run['pairs_reported']} reported; false: {fp}) | >= 0.95: {mark('precision')} |",
        f"| recall | {run['recall']} ({run['pairs_true']} true; missed: {fn}) | >= 0.95: {mark('recall')} |",
        f"| \\|reported share - true share\\| per direction of the true pairs, from `GET /sites/{{site}}` "
        f"| median {errors['median']}, p90 {errors['p90']}, max {errors['max']} ({errors['directions']} "
        f"directions) | median <= 0.05: {mark('median_share_error')} |",
        f"| checking throughput with `site_field` / without (median of {len(t['runs']['without'])} "
        "rounds, each running both one after the other, which one first alternating) | "
        f"**{t['ratio']}x** (per round: "
        f"{', '.join(str(r) for r in t.get('ratio_per_round', []))}; from the CPU per document of the "
        f"service and Valkey: {t.get('cpu_ratio', '-')}x); medians {t['docs_per_s_with_site_field']:,.0f} vs "
        f"{t['docs_per_s_without']:,.0f} docs/s; service CPU "
        f"{t['service_cpu_us_per_doc']['with_site_field']} "
        f"vs {t['service_cpu_us_per_doc']['without']} us per document, Valkey "
        f"{t['valkey_cpu_us_per_doc']['with_site_field']} vs {t['valkey_cpu_us_per_doc']['without']} | "
        f">= 0.9x: {mark('throughput_ratio')} |",
        server_time_row(cost),
        f"| memory of the site keys (MEMORY USAGE) | {memory['bytes_per_page']} B per page, "
        f"{memory['bytes_per_site']:,} B per site ({memory['site_keys']} keys) | bounded per site |",
        "| `GET /mirrors` over every site; `GET /sites/{site}` | "
        f"{run['latency_ms']['mirrors']} ms; median "
        f"{run['latency_ms']['site_median']} ms | |",
        "",
        f"Bounds: {run['bounds']['partners_per_page']} partners per page, "
        f"{run['bounds']['other_sites_per_site']} "
        'other sites per site (docs/design.md, "Sites").',
    ]
    return "\n".join(lines) + "\n"


def cluster_mirrors_section(results: Path) -> str:
    """``bench/cluster_mirrors.py``'s run (cluster_mirrors.json), when it was saved there: the cost of
    mirror detection (a collection with ``site_field``) on a Redis Cluster beside one server."""
    path = results / "cluster_mirrors.json"
    if not path.exists():
        return ""
    run = json.loads(path.read_text())
    settings, sizes = run["settings"], run["sizes"]
    stores = [name for name in STORE_LABELS if name in sizes[0]["stores"]]
    crawls = "; ".join(
        f"{s['crawl']['originals']} originals, {s['crawl']['full_mirrors']} full and "
        f"{s['crawl']['partial_mirrors']} partial mirrors: {s['crawl']['sites']} sites, "
        f"{s['crawl']['pages']:,} pages ({s['crawl']['true_mirror_pairs']} true mirror pairs)"
        for s in sizes
    )
    lines = [
        "## Mirror detection on a Redis Cluster",
        "",
        f"`{run['command']}` ({run['machine']['cores']} cores, shared: absolute times are context, the "
        "ratios come from one run): bench_mirrors.py's synthetic crawl at "
        f"{len(sizes)} size{'s' if len(sizes) > 1 else ''} ({crawls}), the same shuffled order checked "
        f"through `POST /check/batch` ({settings['batch']} "
        f"pages a request, {settings['clients']} connections, 1 worker of a real `neardup serve`) into one "
        "embedded Valkey with neardup's module, a 3-primary LocalCluster whose nodes load it, and the same "
        "cluster without it (Lua); each store a collection with `site_field` and one without, one right "
        f"after the other, which first alternating, {settings['rounds']} rounds (medians; the ratio and "
        "the extra cost are paired per round). Every collection's state slot is on the cluster's first "
        "primary (node 0). Servers' CPU is INFO cpu summed over the nodes; the service's from /proc. "
        "Accuracy and parity come from a further run per store on ONE connection (the same requests in "
        "the same order everywhere), which also gives the speed of one connection with and without "
        "`site_field`.",
        "",
        "| crawl | store | docs/s with / without `site_field` (ratio) | servers' CPU us/doc with / without "
        "(sites' extra) | service's CPU us/doc with / without (extra) | one connection, one run: docs/s "
        "ratio; script calls per batch with / without | site keys B/page; bytes per node | precision / "
        "recall (min_share 0.5) | same counts as one server |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for size in sizes:
        for name in stores:
            st = size["stores"][name]
            m, mem, acc, one = st["median"], st["memory"], st["accuracy"], st["one_connection"]
            w, o = m["with_site_field"], m["without"]
            parity = size["parity_with_one_server"].get(name)
            if parity is None:
                same = "(the reference)"
            else:
                same = (
                    "yes: every check answer, site and pair"
                    if parity["same_mirror_pair_counts"]
                    and not parity["sites_differing"]
                    and not parity["check_answers_differing"]
                    else f"**no**: {parity['check_answers_differing']} answers, "
                    f"{parity['sites_differing']} sites ({parity['shared_counts_differing']} counts), "
                    f"pairs {parity['mirror_pairs']}"
                )
            calls = one["script_calls_per_batch"]
            lines.append(
                f"| {size['crawl']['pages']:,} pages | {STORE_LABELS[name]} | {w['docs_per_s']:,.0f} / "
                f"{o['docs_per_s']:,.0f} (**{m['docs_per_s_ratio']}x**) | {w['server_cpu_us']} / "
                f"{o['server_cpu_us']} (**{m['sites_extra_server_cpu_us']:+}**) | {w['service_cpu_us']} / "
                f"{o['service_cpu_us']} ({m['sites_extra_service_cpu_us']:+}) | {one['docs_per_s_ratio']}x; "
                f"{calls['with_site_field']} / {calls['without']} | {mem['bytes_per_page']}; "
                + " / ".join(f"{b:,}" for b in mem["site_bytes_per_node"])
                + f" | {acc['precision']} / {acc['recall']} | {same} |"
            )
    lines += ["", *cluster_mirrors_notes(run, stores)]
    return "\n".join([*lines, "", "Raw results: `bench/results/cluster_mirrors.json`.", ""]) + "\n"


def cluster_mirrors_notes(run: dict[str, Any], stores: list[str]) -> list[str]:
    """The bullets under the cluster mirrors table: where the extra work and the site keys land, how the
    cost per document moves with the crawl's size, the idle CPU in every figure."""
    sizes = run["sizes"]
    notes = []
    for name in stores:
        if name == "one_server":
            continue
        parts = []
        for size in sizes:
            st = size["stores"][name]
            mem = st["memory"]
            extra = st["median"]["sites_extra_server_cpu_us_per_node"]
            holder = (mem["nodes_holding_site_keys"] or [0])[0]
            share = mem["site_share_of_node_collection_bytes"][holder] or 0.0
            parts.append(
                f"at {size['crawl']['pages']:,} pages the extra servers' CPU per document by node "
                + " / ".join(f"{x:+}" for x in extra)
                + f" us; the site keys ({mem['site_keys']:,} keys, {mem['site_keys_bytes']:,} B) all on "
                f"node(s) {mem['nodes_holding_site_keys']}, {share:.1%} of that node's bytes of the "
                f"collection ({mem['site_share_of_collection_bytes']:.1%} of all nodes')"
            )
        notes.append(f"- {STORE_LABELS[name]}: " + "; ".join(parts) + ".")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        grow = ", ".join(
            f"{STORE_LABELS[name]} {first['stores'][name]['median']['sites_extra_server_cpu_us']} -> "
            f"{last['stores'][name]['median']['sites_extra_server_cpu_us']} us (servers), "
            f"{first['stores'][name]['memory']['bytes_per_page']} -> "
            f"{last['stores'][name]['memory']['bytes_per_page']} B/page"
            for name in stores
        )
        notes.append(
            f"- From {first['crawl']['pages']:,} to {last['crawl']['pages']:,} pages (near-duplicate page "
            f"pairs per page {first['crawl'].get('near_duplicate_pairs_per_page', '-')} -> "
            f"{last['crawl'].get('near_duplicate_pairs_per_page', '-')}), the extra cost of sites per "
            f"document: {grow}."
        )
    for size in sizes:
        extra = ", ".join(
            f"{STORE_LABELS[name]} {size['stores'][name]['median']['sites_extra_commands']:+}"
            for name in stores
        )
        notes.append(
            f"- Server commands per document added by sites at {size['crawl']['pages']:,} pages (INFO "
            f"commandstats, the calls scripts make included): {extra}."
        )
    notes.append(
        "- On a cluster the site steps are scripts on the state slot: the stamp counts the pages "
        "(`cluster_stamp.lua`, in Lua on both clusters), `cluster_sites.lua` takes replaced pages away "
        "beside the reservation and links after the read, with `ND.LINK` on the module's cluster (it asks "
        'about every key it touches there: docs/design.md, "Sites on a cluster") and in Lua on the other; '
        "on one server the module counts a page inside `ND.BANDS` and links in `ND.LINK`, so there sites "
        "add almost no commands."
    )
    busy = [
        r["others_cores_busy"]
        for size in sizes
        for store in size["runs"].values()
        for label in store.values()
        for r in label
        if "others_cores_busy" in r
    ]
    one = [
        size["stores"][name]["one_connection"][label].get("others_cores_busy", 0.0)
        for size in sizes
        for name in stores
        for label in ("with_site_field", "without")
    ]
    notes.append(
        "- The one-connection figures are one run each (not medians): read them as rough; other "
        f"processes kept up to {max(one):.2f} cores busy during them."
    )
    if busy:
        notes.append(
            f"- Other processes on the machine during the {len(busy)} throughput runs: median "
            f"{statistics.median(busy):.2f} cores busy, max {max(busy):.2f} (per run in the JSON)."
        )
    idle = run.get("idle", {}).get("server_cpu_us_per_s", {})
    if idle:
        notes.append(
            "- The servers' CPU while idle (cron, a cluster's bus), in every figure above: "
            + ", ".join(f"{STORE_LABELS[n]} {v:,} us/s" for n, v in idle.items())
            + "."
        )
    return notes


def server_time_row(cost: dict[str, Any]) -> str:
    """The mirrors table's row of the counting's server time, with neardup's module (the link step is
    ``ND.LINK``) and on a server without it (every step in Lua)."""
    us = cost["valkey_us_per_doc"]
    if "check_without_lua" not in us:
        return "| the counting's server time | not in this run: rerun `bench/bench_mirrors.py` | |"
    repeats = len(cost["runs"]["check_without"])
    return (
        f"| the counting's server time (in process, embedded Valkey, medians of {repeats} interleaved "
        "repeats), with neardup's module / without it (every step in Lua) | check script "
        f"{us['check_with_site_field']} / {us['check_with_site_field_lua']} us per document against "
        f"{us['check_without']} / {us['check_without_lua']} without `site_field` (`ND.LINK`'s share: "
        f"{cost['nd_link_us_per_doc']}); the counting **{cost['counting_us_per_doc']}** / "
        f"{cost['counting_us_per_doc_lua']} us per document | a small constant per check |"
    )


def growth_section(results: Path) -> str:
    """``bench/bench_growth.py``'s run (growth.json), when it was saved there: one run, or with
    ``--repeats`` several, of which the table shows the one with the median ratio."""
    path = results / "growth.json"
    if not path.exists():
        return ""
    saved = json.loads(path.read_text())
    runs = saved.get("runs", [saved])
    ratios = [r["targets"]["last_step_vs_first"]["value"] for r in runs]
    run = runs[ratios.index(sorted(ratios)[len(ratios) // 2])]
    steps = run["neardup"]["steps"]
    first = steps[0]["docs_per_s"]
    target = saved.get("targets", {}).get("last_step_vs_first", {})
    shown = "one run" if len(runs) == 1 else f"the run with the median ratio of {len(runs)}"
    lines = [
        "## Cost as a collection grows",
        "",
        "`python bench/bench_growth.py`: "
        f"{run['settings']['documents']:,} generated ~2 KB documents into one collection through a real "
        "`neardup serve` (defaults, 1 worker, no capacity hint, embedded Valkey with `appendfsync always`), "
        f"check/batch of {run['settings']['batch']}, {run['settings']['in_flight']} in flight. Per step of "
        f"{run['settings']['step']:,} documents ({shown}):",
        "",
        "| documents | docs/s | vs first step | bytes/doc | Valkey CPU us/doc | AOF MB | rewrites |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for step in steps:
        lines.append(
            f"| {step['documents']:,} | {step['docs_per_s']:,} | {step['docs_per_s'] / first:.2f} | "
            f"{step['used_memory_per_doc']} | {step['valkey_cpu_us_per_doc']} | {step['aof']['size_mb']:,} | "
            f"{step['aof']['rewrites']} |"
        )
    if target:
        each = "" if len(runs) == 1 else f" (the median of the runs' {', '.join(map(str, ratios))})"
        lines += [
            "",
            f"Last step over the first: **{target['value']}**{each} (target {target['target']}: "
            f"{'met' if target['met'] else 'missed'}). Where the time goes: docs/performance.md, "
            '"Huge pages, kept through rewrites".',
        ]
    return "\n".join(lines) + "\n"


def passages_section(results: Path) -> str:
    """``bench/bench_passages.py``'s run (passages.json), when it was saved there."""
    path = results / "passages.json"
    if not path.exists():
        return ""
    run = json.loads(path.read_text())
    mt, lat, cmp_ = run["memory_throughput"], run["latency_ms"], run["comparison"]
    targets = {"none": 0.95, "light": 0.90, "medium": 0.80}

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lines = [
        "## Passages",
        "",
        f"`{run.get('command', 'python bench/bench_passages.py')}` ({run['machine']['cores']} cores): "
        f"{run['corpus']['stored_documents']:,} stored documents of "
        f"~{run['corpus']['stored_mean_bytes']:,} bytes (median {run['corpus']['median_document_bytes']:,}, "
        f"p99 {run['corpus']['p99_document_bytes']:,}; {run['corpus']['how']}) in a collection with "
        "`passages: true`, "
        "through a real `neardup serve` (1 worker, embedded Valkey). Submitted texts built the way PAN "
        "built theirs (bench/plagiarism.py): held-out text that shares no run of 10 words and at most 5% of "
        "its 5-grams with the stored documents, with 0 to 3 passages of 25 to 500 words copied from stored "
        "documents, at one obfuscation level per text (none; light: 3% of the words substituted, case and "
        "white-space noise; medium: 8% substituted, inserted or dropped). PAN's measures on the submitted "
        "texts' characters; a detection from another stored document counts when that document holds at "
        "least half of the detected part's word 5-grams.",
        "",
        "| obfuscation | cases | precision | recall | granularity | plagdet | target | source accuracy | "
        "source offsets (Jaccard) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for level, q in run["quality"].items():
        lines.append(
            f"| {level} | {q['cases']} | {q['precision']} | {q['recall']} | {q['granularity']} | "
            f"**{q['plagdet']}** | >= {targets[level]} ({met(q['plagdet'] >= targets[level])}) | "
            f"{q['source_accuracy']} | {q['source_offsets_jaccard_mean']} |"
        )
    ce = run["containment_error"]
    lines += [
        "",
        f"- Verbatim passages (25 words or more) found: **{run['verbatim_cases_found']}** of "
        f"{run['verbatim_cases']} (target 0.99: {met(run['verbatim_cases_found'] >= 0.99)}); the "
        "fingerprinting guarantees it for 25 words (design.md, Passages).",
        *verbatim_held_line(run),
        f"- Submitted texts with nothing copied that get no span: **{run['clean_texts_without_span']}** of "
        f"{run['clean_texts']} (target 0.99: {met(run['clean_texts_without_span'] >= 0.99)}).",
        f"- `containment` against the exact value (word 5-grams, every true source of every text): "
        f"{ce['within_0.05']} within 0.05 (mean error {ce['mean']}, p95 {ce['p95']}; {ce['pairs']} pairs).",
        f"- Latency of a search of a ~{lat['mean_words']:,}-word text ({lat['texts']} texts, one at a time "
        f"over HTTP): p50 {lat['p50']} ms, **p99 {lat['p99']} ms** (target 50: {met(lat['p99'] < 50)}), "
        f"max {lat['max']} ms.",
        f"- Memory and check throughput ({mt['documents']:,} documents of ~{mt['mean_document_bytes']:,} "
        f"bytes through check/batch, median of {mt['repeats']}): passages off "
        f"{mt['off']['bytes_per_document']:,} B/doc and {mt['off']['documents_per_s']:,} docs/s, on "
        f"{mt['on']['bytes_per_document']:,} B/doc and {mt['on']['documents_per_s']:,} docs/s: memory "
        f"{mt['memory_ratio_on_off']}x (the collection without passages costs about the same per document "
        "whatever its size, the passage index grows with the text), "
        f"**{mt['extra_bytes_per_kb_of_text']} extra bytes per KB of text** (target 250: "
        f"{met(mt['extra_bytes_per_kb_of_text'] <= 250)}), "
        f"throughput **{mt['throughput_ratio_on_off']}x** "
        f"(target 0.5: {met(mt['throughput_ratio_on_off'] >= 0.5)}). At full size "
        f"({run['corpus']['stored_documents']:,} documents): "
        f"{run['full_load']['bytes_per_document']:,} B/doc, "
        f"{run['full_load']['documents_per_s']:,} docs/s.",
        "",
        f"What a user would otherwise run, on the first {cmp_['stored_documents']:,} stored documents and "
        f"{cmp_['texts']} other submitted texts, in the same run (document level: is a true source "
        "reported, how many reported documents are not a source):",
        "",
        "| | source recall | false sources per text | clean texts with a source | time per text "
        "| passages, offsets |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    ours, pw, lsh = cmp_["neardup_passages"], cmp_["pairwise_winnowing"], cmp_["datasketch_lsh_ensemble"]
    lines += [
        f"| neardup passages (HTTP) | {ours['source_recall']} | {ours['false_sources_per_text']} | "
        f"{ours['clean_texts_with_a_source']} | {ours['query_ms_mean']} ms | yes (plagdet, all "
        f"levels: {ours['plagdet_all_levels']}) |",
        "| pairwise winnowing, MOSS/copydetect style (the same k-grams winnowed, in process) | "
        f"{pw['source_recall']} | "
        f"{pw['false_sources_per_text']} | {pw['clean_texts_with_a_source']} | {pw['query_ms_median']} ms, "
        "linear in the stored documents | no |",
        f"| datasketch MinHashLSHEnsemble, containment >= 0.05 (in process; built in {lsh['build_s']} s) | "
        f"{lsh['source_recall']} | {lsh['false_sources_per_text']} | {lsh['clean_texts_with_a_source']} | "
        f"{lsh['query_ms_median']} ms | no |",
        "",
        *memory_lines(results, run),
        *search_cost_lines(results),
        "Raw results: `bench/results/passages.json`, `bench/results/passage_search_cost.json`.",
        "",
    ]
    return "\n".join(lines) + "\n"


STORE_LABELS = {
    "one_server": "one server, module",
    "cluster_3_module": "3-node cluster, module",
    "cluster_3_lua": "3-node cluster, Lua",
    "one_server_lua": "one server, Lua",
}


def cluster_passages_section(results: Path) -> str:
    """``bench/cluster_passages.py``'s run (cluster_passages.json), when it was saved there: passage
    search and checks with passages on a Redis Cluster beside one server."""
    path = results / "cluster_passages.json"
    if not path.exists():
        return ""
    run = json.loads(path.read_text())
    checks, rounds, steps = run["checks"], run["round_trips"], run["sizes"]
    stores = [name for name in STORE_LABELS if name in checks]
    together = [s for s in steps if all(name in s["stores"] for name in stores)]
    side = together[-1] if together else steps[0]
    n = side["documents"]

    def cell(name: str, get: Any) -> str:
        try:
            value = get(name)
        except (KeyError, IndexError, TypeError):
            return "-"
        return f"{value:,}" if isinstance(value, int | float) else str(value)

    def row(label: str, get: Any) -> str:
        return f"| {label} | " + " | ".join(cell(name, get) for name in stores) + " |"

    def check(name: str) -> dict[str, Any]:
        return dict(checks[name]["median_of_repeats"])

    def search(name: str) -> dict[str, Any]:
        return dict(side["stores"][name]["search"]["median_of_passes"])

    def memory(name: str) -> dict[str, Any]:
        return dict(side["stores"][name]["memory"])

    def call_us(name: str) -> float:
        """The server's time per search in the commands the service sends (commandstats usec; what
        scripts and module commands call inside is in theirs), the median over the passes."""
        passes = side["stores"][name]["search"]["passes"]
        return round(
            statistics.median(
                sum(p["command_us_by_name"].get(c, 0) for c in ("evalsha", "nd.bucketsget")) for p in passes
            ),
            1,
        )

    texts = run["texts"]
    settings = run["settings"]
    target = run.get("targets", {}).get("search_p99_ms_3_nodes", {})
    met = {True: "met", False: "**missed**", None: "not measured"}[target.get("met")] if target else ""
    lines = [
        "## Passages on a Redis Cluster",
        "",
        f"`{run['command']}` ({run['machine']['cores']} cores, shared: absolute times are context, the "
        "ratios come from one run): bench_passages.py's documents (real_mix.py: "
        f"~{run['corpus']['stored_mean_bytes']:,} bytes on average) and submitted texts "
        f"(~{texts['mean_words']:,} words, {texts['distinct_keys_mean']:,} distinct fingerprint keys: "
        f"{texts['postings_calls']['mean']} postings calls of at most 1,024 keys each), everything over HTTP "
        "through a real `neardup serve` (1 worker) on one embedded Valkey, a 3-primary LocalCluster whose "
        "nodes load neardup's module, and the same cluster without it (the Lua path); every node "
        "`appendfsync always`. Server CPU is INFO cpu summed over the nodes; commands are INFO commandstats "
        "summed over the nodes (calls made inside scripts and module commands included); round trips "
        "are counted in process on the same store code (a round: a wait that starts with none of the "
        "store's calls in flight).",
        "",
        "| | " + " | ".join(STORE_LABELS[name] for name in stores) + " |",
        "| --- |" + " --- |" * len(stores),
        row(
            f"check/batch with passages on, docs/s (median of {settings['repeats']}, "
            f"{settings['check_documents']:,} documents)",
            lambda s: check(s)["documents_per_s"],
        ),
        row("servers' CPU per checked document, us", lambda s: check(s)["server_cpu_us"]),
        row("service's CPU per checked document, us", lambda s: check(s)["service_cpu_us"]),
        row("server commands per checked document", lambda s: check(s)["commands"]),
        row(
            "round trips per check of 250 documents",
            lambda s: rounds[s]["per_check_batch"]["mean"],
        ),
        row(f"bytes per document at {n:,} documents, all nodes", lambda s: memory(s)["bytes_per_document"]),
        row(
            f"bytes per document at {n:,} documents, per node",
            lambda s: " / ".join(f"{x:,.0f}" for x in memory(s)["bytes_per_document_per_node"]),
        ),
        row(f"search p50 at {n:,} documents, ms", lambda s: search(s)["p50_ms"]),
        row(f"search p99 at {n:,} documents, ms", lambda s: search(s)["p99_ms"]),
        row("servers' CPU per search, us", lambda s: search(s)["server_cpu_us"]),
        row(
            "server time in the calls the service makes (EVALSHA, ND.BUCKETSGET; commandstats usec), us",
            call_us,
        ),
        row("service's CPU per search, us", lambda s: search(s)["service_cpu_us"]),
        row("server commands per search", lambda s: search(s)["commands"]),
        row("round trips per search", lambda s: rounds[s]["per_search"]["mean"]),
        "",
        "As the collection grows (search figures: median of "
        f"{settings['search_repeats']} passes of {texts['count']} searches, one at a time; the load step's "
        "docs/s is that step's documents through check/batch):",
        "",
        "| documents | store | load step docs/s | bytes/doc | search p50 ms | p99 ms "
        "| servers' CPU/search us | commands/search |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for step in steps:
        for name, v in step["stores"].items():
            m = v["search"]["median_of_passes"]
            lines.append(
                f"| {step['documents']:,} | {STORE_LABELS.get(name, name)} | "
                f"{v['load_step']['documents_per_s']:,} | {v['memory']['bytes_per_document']:,} | "
                f"{m['p50_ms']} | {m['p99_ms']} | {m['server_cpu_us']:,} | {m['commands']:,} |"
            )
    shards = run.get("shards", {})
    if shards.get("primaries"):
        lines += [
            "",
            f"By the number of shards (module, {shards['documents']:,} documents):",
            "",
            "| primaries | search p50 ms | p99 ms | servers' CPU/search us | commands/search | bytes/doc |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for primaries, v in shards["primaries"].items():
            m = v["search"]["median_of_passes"]
            lines.append(
                f"| {primaries}{' (the sizes run)' if v.get('from') else ''} | {m['p50_ms']} | "
                f"{m['p99_ms']} | {m['server_cpu_us']:,} | "
                f"{m['commands']:,} | {v['memory']['bytes_per_document']:,} |"
            )
    lines += ["", *cluster_cost_lines(run, side, stores)]
    if target:
        lines += [
            "",
            f"Search p99 at {target['documents']:,} stored documents on the 3-node cluster with the module: "
            f"**{target['value']} ms** (target {target['target']}: {met}).",
        ]
    return "\n".join([*lines, "", "Raw results: `bench/results/cluster_passages.json`.", ""]) + "\n"


def cluster_cost_lines(run: dict[str, Any], side: dict[str, Any], stores: list[str]) -> list[str]:
    """What the cluster run's ratios say: the cluster over one server, where the servers' search time
    goes (the postings read), and the growth with the number of shards."""
    out: list[str] = []
    checks, searches = run["checks"].get("vs_one_server", {}), side.get("vs_one_server", {})
    for name in stores[1:]:
        c, q = checks.get(name, {}), searches.get(name, {})
        if c and q:
            out.append(
                f"- {STORE_LABELS[name]} over one server: check throughput {c['documents_per_s']}x, "
                f"servers' CPU per checked document {c['server_cpu_us']}x; per search at "
                f"{side['documents']:,} documents: servers' CPU {q['server_cpu_us']}x, the service's CPU "
                f"{q['service_cpu_us']}x, p50 {q['p50_ms']}x."
            )

    def postings_us(name: str, command: str) -> float:
        passes = side["stores"][name]["search"]["passes"]
        return float(statistics.median(p["command_us_by_name"].get(command, 0) for p in passes))

    if {"one_server", "cluster_3_module"} <= set(side["stores"]):
        one, cluster = (
            postings_us("one_server", "nd.postings"),
            postings_us("cluster_3_module", "nd.bucketsget"),
        )
        if one and cluster:
            out.append(
                f"- Reading the postings: ND.BUCKETSGET on the cluster's nodes {cluster:,.0f} us per search "
                f"(summed over the nodes), ND.POSTINGS on one server {one:,.0f} us ({cluster / one:.2f}x)."
            )
    shards = run.get("shards", {})
    growth = shards.get("vs_1_primaries", {})
    if growth:
        each = ", ".join(f"{p} primaries {v['server_cpu_us']}x" for p, v in growth.items())
        out.append(
            f"- Servers' CPU per search by the number of shards, over 1 primary ({shards['documents']:,} "
            f"documents): {each}."
        )
    idle = run.get("idle", {}).get("server_cpu_us_per_s", {})
    if idle:
        out.append(
            "- The servers' CPU while idle (cron, a cluster's bus), in every figure above: "
            + ", ".join(f"{STORE_LABELS.get(k, k)} {v:,} us/s" for k, v in idle.items())
            + "."
        )
    return out


def memory_lines(results: Path, passages_run: dict[str, Any]) -> list[str]:
    """``bench/passage_memory.py``'s run, when it was saved: where the passage bytes go. Where the
    store kept blobs with 3-byte keys in ``bench_passages.py``'s run but not in this one (a run that does
    not say ``stored_key_bytes`` kept 3), both are said, with passage_memory's run on 3-byte keys
    (``passage_memory_3byte_keys.json``) beside it when saved."""
    path = results / "passage_memory.json"
    if not path.exists():
        return []
    run = json.loads(path.read_text())
    on = run["on"]["bytes_per_doc"]
    lines = [
        f"Where the bytes go (`python bench/passage_memory.py --chunk-bytes 0`: every key's `MEMORY USAGE`, "
        f"{run['corpus']['documents']:,} documents of ~{run['mean_kb']} KB): per document, passage blobs "
        f"{on['passage blobs']} B and the passage index {on['passage index']} B; "
        f"{run['extra_bytes_per_kb']} extra bytes per KB of text ({run['ratio_on_off']}x). Raw results: "
        "`bench/results/passage_memory.json`.",
        "",
    ]
    width = run.get("stored_key_bytes", 3)
    if passages_run.get("stored_key_bytes", 3) == width:
        return lines
    earlier = results / "passage_memory_3byte_keys.json"
    mt = passages_run["memory_throughput"]
    note = (
        f"The check/batch figure above ({mt['extra_bytes_per_kb_of_text']} extra bytes per KB, "
        "bench_passages.py's run) was measured when the store kept blobs with 3-byte keys; this "
        f"passage_memory run keeps them whole ({width}-byte keys)"
    )
    if earlier.exists():
        old = json.loads(earlier.read_text())
        was = old["on"]["bytes_per_doc"]
        note += (
            f": on the same documents with 3-byte keys it measured passage blobs {was['passage blobs']} B "
            f"and {old['extra_bytes_per_kb']} extra bytes per KB, so whole keys cost "
            f"{round(on['passage blobs'] - was['passage blobs'], 1)} B more a document, "
            f"{round(run['extra_bytes_per_kb'] - old['extra_bytes_per_kb'], 1)} more per KB "
            "(`bench/results/passage_memory_3byte_keys.json`)"
        )
    return [*lines, note + ".", ""]


def search_cost_lines(results: Path) -> list[str]:
    """``bench/passage_search_cost.py``'s run, when it was saved: the server's time per search by the
    text's size, with the module and in Lua."""
    path = results / "passage_search_cost.json"
    if not path.exists():
        return []
    run = json.loads(path.read_text())
    lines = [
        f"The server's work per search, by the text's size (`{run['command']}`: "
        f"{run['corpus']['documents']:,} stored documents of the same mix, texts made of stored text so "
        f"that most keys have postings; at most {run['keys_per_call']:,} keys a call; medians of repeats):",
        "",
        "| text | words | calls | server time, module | longest call, module | server time, Lua "
        "| longest call, Lua | search (wall), module / Lua |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m, lua in zip(run["paths"]["module"], run["paths"]["lua"], strict=True):
        lines.append(
            f"| {m['text_kb']:,} KB | {m['words']:,} | {m['calls']} | {m['server_ms']} ms | "
            f"{m['longest_call_ms']} ms | {lua['server_ms']} ms | {lua['longest_call_ms']} ms | "
            f"{m['wall_ms']} / {lua['wall_ms']} ms |"
        )
    return [*lines, ""]


def verbatim_held_line(run: dict[str, Any]) -> list[str]:
    """The verbatim cases whose text more stored documents hold than a posting keeps, when measured."""
    many = run.get("verbatim_held_by_more_than_64")
    if not many:
        return []
    found = "none in this run" if not many["cases"] else f"**{many['found']}** found of {many['cases']}"
    return [
        f"- Of those, copies of text held by more than 64 stored documents ({many['how']}; the most: "
        f"{many['most_holders']:,}): {found}."
    ]


def replace_section(markdown_path: Path, section: str, title_prefix: str | None = None) -> None:
    """Put ``section`` (starting "## Title") into the markdown file in place of the section of that
    title (or the first whose title starts with ``title_prefix``), or at its end."""
    text = markdown_path.read_text() if markdown_path.exists() else ""
    title = section.splitlines()[0]
    start = text.find(title + "\n") if title_prefix is None else text.find("\n" + title_prefix) + 1
    if title_prefix is not None and start == 0:
        start = 0 if text.startswith(title_prefix) else -1
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 3)
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    markdown_path.write_text(text)


def estimators_lines(est: dict[str, Any]) -> list[str]:
    """The estimators at equal bytes (bench_estimators.py's JSON), as lines of markdown."""
    svc = est["service"]
    lines = [
        f"### Estimators at (about) equal bytes: `python bench/bench_estimators.py` ({est['documents']:,} "
        f"documents; {est['pairs']['natural']:,} natural truth pairs; {est['pairs']['even']:,} even-spread "
        f"pairs, {est['per_bucket']:,} per 0.05 bucket of true Jaccard from 0.5 to 1.0)",
        "",
        "Standard error (std of estimate - J) per bucket of true J on the even-spread pairs; P/R at "
        f"threshold {est['threshold']} with the service's banding (b={svc['bands']}, r={svc['rows']}) "
        f"and floor t; sketch speed one thread on the corpus's first {est['speed_documents']:,} documents, "
        "each estimator timed apart while other work ran: read them as rough.",
        "",
    ]
    buckets = ["0.50", "0.60", "0.70", "0.75", "0.80", "0.85", "0.90", "0.95"]
    lines.append(
        "| estimator | bytes/doc | MB/s | "
        + " | ".join(f"SE {b}" for b in buckets)
        + " | even P / R | natural P / R |"
    )
    lines.append("| --- " * (5 + len(buckets)) + "|")
    for label, e in est["estimators"].items():
        se = e["even"]["buckets"] or {}
        even, natural = e["even"]["banded"], e["natural"]["banded"]
        lines.append(
            f"| {label} | {e['bytes_per_document']} | {e['sketch_mb_per_s']} | "
            + " | ".join(str(se.get(b, {}).get("std_error", "")) for b in buckets)
            + f" | {even['precision']:.4f} / {even['recall']:.4f} | "
            f"{natural['precision']:.4f} / {natural['recall']:.4f} |"
        )
    lines += [
        "",
        "Bytes per document are the verification sketch's only (the estimate sketch: its mode byte and "
        "the bins); the service stores the band keys beside it (8 bytes per band).",
        "",
    ]
    sized = {k: e["even"].get("by_union_size") for k, e in est["estimators"].items()}
    sized = {k: v for k, v in sized.items() if v}
    if sized:
        groups = list(next(iter(sized.values())))
        lines += [
            "Near the threshold (even-spread pairs of true J 0.7 .. 0.9), by the number of shingles in the "
            "pair's union: standard error, and false positives / misses at the floor with every pair a "
            "candidate.",
            "",
            "| estimator | " + " | ".join(f"union {g}: pairs, SE, FP / missed" for g in groups) + " |",
            "| --- " * (1 + len(groups)) + "|",
        ]
        for label, by in sized.items():
            cells = [
                f"{by[g]['pairs']}, {by[g]['std_error']}, {by[g]['false_positives']} / {by[g]['missed']}"
                if g in by
                else "-"
                for g in groups
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def verification_section(results: Path) -> str:
    """What verification decides on, from the runs saved in ``results``: estimators.json
    (bench_estimators.py), quality_{even,natural}_{estimate,exact}.json (quality.py --no-libraries
    --no-curves --thresholds 0.8, with ``--create '{"verify": "exact"}'`` for exact mode) and merge.json
    (bench_merge.py)."""

    def load(name: str) -> Any:
        path = results / name
        return json.loads(path.read_text()) if path.exists() else None

    est = load("estimators.json")
    if est is not None and "service" not in est:
        est = None  # a run of an older bench_estimators.py
    params = CollectionParams.create("x")
    lines = [
        "## Verification: what a match is decided on",
        "",
        "Every candidate (a stored document sharing a band key with the text) is verified on the sketch "
        "stored with it before the service answers. By default (`verify: estimate`) that sketch is "
        f"{params.bins:,} one-permutation bins of 2 bits (code 0: empty bin; else 1 + the bin's minimum "
        "mod 3), estimating J from the bins filled on either side; a document of at most bins / 4 "
        "shingles keeps a filled-bin bitmap and every shingle's code there instead (w = bins / shingles "
        "- 1 bits each), so that two short documents are compared shingle by shingle. With "
        "`verify: exact` the service keeps the sorted 32-bit shingle hashes and decides on the exact "
        f"Jaccard. The band keys come from a 128-slot MinHash either way ({params.stored_bytes} bytes per "
        "document at the defaults, band keys included).",
        "",
    ]
    if est:
        lines += estimators_lines(est)
    rows = []
    for corpus in ("even", "natural"):
        for mode in ("estimate", "exact"):
            run = load(f"quality_{corpus}_{mode}.json")
            if not run:
                continue
            t = run["neardup_service"]["thresholds"]["0.8"]
            c = t["check"]
            mut = t["mutations"].get("0.02", {})
            rows.append(
                f"| {corpus} ({run['documents']:,} docs) | {mode} | {t['bands']} x {t['rows']} | "
                f"{c['precision']:.4f} / {c['recall']:.4f} | "
                f"{c['precision_non_identical']:.4f} / {c['recall_non_identical']:.4f} | "
                f"{c['predicted'] - c['true_positives']} / {c['positives'] - c['true_positives']} | "
                f"{mut.get('detected', '')} | {t['check_seconds']} | {t['redis_bytes_per_document']} |"
            )
    if rows:
        lines += [
            "### Estimate and exact through the service at threshold 0.8 (`python bench/quality.py "
            '--no-libraries --no-curves --thresholds 0.8`, and `--create \'{"verify": "exact"}\'`; even: '
            "`bench/even_corpus.py`'s corpus)",
            "",
            "The even corpus: pairs drawn from every 0.05 bucket of J from 0.5 to 1.0, kept apart (no two "
            "chosen pairs share a near-duplicate), at most 400 per bucket (fewer in the scarce buckets "
            "0.55-0.70); its truth recomputed.",
            "",
            "| corpus | verify | b x r | P / R | non-identical P / R | false pos. / missed | "
            "2%-edited copies found | check s | Redis B/doc |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    merge = load("merge.json")
    if merge:
        lines += [
            "### Exact mode's merge (`python bench/bench_merge.py`)",
            "",
            f"{merge['pairs']:,} truth pairs (both directions), {merge['mean_pair_elements']} shingles per "
            "pair on average.",
            "",
            "| ISA | truth pairs/s, floor 0.8 (one call per document) | floor 0 | kernel alone: pairs/s | "
            "elements/s |",
            "| --- | --- | --- | --- | --- |",
        ]
        for isa, e in merge["isa"].items():
            k = e["kernel_one_call"]
            lines.append(
                f"| {isa} | {e['floor_0.8']['pairs_per_second']:,} | "
                f"{e['floor_0.0']['pairs_per_second']:,} | "
                f"{k['pairs_per_second']:,} ({k['mean_pair_elements']} elements/pair) | "
                f"{k['elements_per_second'] / 1e6:.0f} M |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


# --- main -------------------------------------------------------------------------------------------


def defaults_section(q: dict[str, Any], summary: dict[str, Any], results_rel: str) -> list[str]:
    """How the defaults were chosen: the S-curve, the trade-off curve and the seeds (lines of markdown;
    none when the quality run skipped the curves)."""
    if "tradeoff" not in q:
        return []
    lines = [
        "## How the defaults were chosen",
        "",
        f"![S-curve]({results_rel}/s_curve.png)",
        "",
        f"![trade-off]({results_rel}/tradeoff.png)",
        "",
        summary["defaults"]["explanation"],
        "",
        f"The trade-off at threshold {q['tradeoff']['threshold']} (the service's check run in process with "
        "its own code: the collection's sketches, candidates sharing a band key, its verification; a "
        "candidate counts when its similarity is at or above the floor: t + x, or the service's):",
        "",
        "| P(t) target | b | r | bins | P(t) | cand./doc | floor | precision | recall | P non-id. "
        "| R non-id. | R 1% edits |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in q["tradeoff"]["points"]:
        targets = p["recall_targets"]
        target = (f"{targets[0]:g}" + (f"-{targets[-1]:g}" if len(targets) > 1 else "")) if targets else "-"
        off = p["offset"]
        floor = "service" if off == "service" else f"t{off:+.2f}"
        bold = "**" if p["service_banding"] and off == "service" else ""
        lines.append(
            f"| {target} | {p['bands']} | {p['rows']} | {p['bins']} | {p['p_candidate_at_threshold']:.3f} | "
            f"{p['candidates_per_document']:.2f} | {bold}{floor}{bold} | "
            f"{bold}{_f(p['precision'])}{bold} | {bold}{_f(p['recall'])}{bold} | "
            f"{_f(p['precision_non_identical'])} | {_f(p['recall_non_identical'])} | "
            f"{_f(p['recall_at_1pct_edits'])} |"
        )
    seeds = q.get("seeds")
    if seeds:
        lines += [
            "",
            f"The defaults' check at {seeds['threshold']} with other hash seeds (seed 1 is neardup's, part "
            "of the stored format; the others are other draws of hash functions over the same pairs: how "
            "much of a figure is luck):",
            "",
            "| seed | precision | recall | precision (non-identical) | recall (non-identical) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in seeds["rows"]:
            lines.append(
                f"| {row['seed']} | {row['precision']:.4f} | {row['recall']:.4f} | "
                f"{row['precision_non_identical']:.4f} | {row['recall_non_identical']:.4f} |"
            )
        met = [
            x["seed"]
            for x in seeds["rows"]
            if x["precision"] >= quality.TARGETS["precision"] and x["recall"] >= quality.TARGETS["recall"]
        ]
        lines += [
            "",
            f"Seeds meeting both targets: {met or 'none'} of {len(seeds['rows'])} (worst precision "
            f"{min(x['precision'] for x in seeds['rows']):.4f}, worst recall "
            f"{min(x['recall'] for x in seeds['rows']):.4f}); seed 1 is the draw every user gets.",
        ]
    sc = q.get("s_curve")
    if sc:
        lines += ["", "S-curve buckets (true pairs, share that became candidates under the defaults):", ""]
        lines += ["| true Jaccard | pairs | candidate rate | P(mean J) |", "| --- | --- | --- | --- |"]
        for b in sc["buckets"]:
            pj = (
                float(sketch.collision_probability(b["mean_jaccard"], sc["bands"], sc["rows"]))
                if b["mean_jaccard"]
                else None
            )
            rng_label = "1.0 (identical)" if b["low"] >= 1.0 else f"[{b['low']:.2f}, {b['high']:.2f})"
            lines.append(f"| {rng_label} | {b['pairs']} | {_f(b['candidate_rate'])} | {_f(pj)} |")
    lines.append("")
    return lines


def defaults_explanation(q: dict[str, Any]) -> str:
    d = q["defaults"]
    points = q["tradeoff"]["points"]

    def pr(p: dict[str, Any] | None) -> str:
        if p is None:
            return "(not in the curve)"
        return (
            f"precision {p['precision']:.4f}, recall {p['recall']:.4f} "
            f"({p['candidates_per_document']:.2f} candidates per document)"
        )

    def point(service_banding: bool, offset: float | str) -> dict[str, Any] | None:
        found = [p for p in points if p["service_banding"] == service_banding and p["offset"] == offset]
        return found[0] if found else None

    mine = [p for p in points if p["service_banding"]]
    p_t = mine[0]["p_candidate_at_threshold"] if mine else None
    meeting = ", ".join(
        f"b={p['bands']}/r={p['rows']} floor "
        + ("service" if p["offset"] == "service" else f"t{p['offset']:+.2f}")
        for p in points
        if p["precision"] >= quality.TARGETS["precision"] and p["recall"] >= quality.TARGETS["recall"]
    )
    return (
        f"**Defaults at threshold {d['threshold']}: b={d['bands']}, r={d['rows']} (P({d['threshold']}) = "
        f"{_f(p_t)}), verification on the stored sketch ({d.get('bins'):,} two-bit bins, "
        f"{d.get('stored_bytes')} bytes per document with the band keys), a match needs a similarity of at "
        f"least {d.get('floor')}.** "
        "The banding is chosen for recall at the threshold (`recall_bands`: the fewest chance candidates "
        "with P(t) at the target), since every candidate is verified on the stored sketch: more "
        "candidates cost verification work, not precision. With the service's banding: floor t gives "
        f"{pr(point(True, 0.0))}; t+0.01 gives {pr(point(True, 0.01))}; the service's floor gives "
        f"{pr(point(True, 'service'))}. Points of the curve that meet both targets: {meeting or 'none'}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=HERE / "data" / "corpus.jsonl")
    parser.add_argument("--truth", type=Path, default=HERE / "data" / "truth.npz")
    parser.add_argument(
        "--quality", type=Path, help="reuse this quality JSON instead of running bench/quality.py"
    )
    parser.add_argument("--signatures", type=Path, help="reuse bench_sketch.py JSON (--only signatures)")
    parser.add_argument("--service", type=Path, help="reuse bench_service.py JSON")
    parser.add_argument("--skip-speed", action="store_true", help="no speed runs (and no reuse)")
    parser.add_argument(
        "--tiny", type=int, default=0, help="a generated corpus of N documents from the stdlib"
    )
    parser.add_argument("--mutations", type=int, default=300)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument(
        "--only-passages", action="store_true", help="only (re)write the Passages section from passages.json"
    )
    parser.add_argument(
        "--only-cluster-passages",
        action="store_true",
        help="only (re)write the Passages on a Redis Cluster section from cluster_passages.json",
    )
    parser.add_argument(
        "--only-cluster-mirrors",
        action="store_true",
        help="only (re)write the Mirror detection on a Redis Cluster section from cluster_mirrors.json",
    )
    parser.add_argument(
        "--only-verification",
        action="store_true",
        help="only (re)write the Verification section from the JSON of its runs in --results",
    )
    parser.add_argument(
        "--only-headline",
        action="store_true",
        help="only (re)write the Headline section from --quality (default: quality.json in --results) "
        "and print it",
    )
    args = parser.parse_args()
    results: Path = args.results
    if args.only_passages:
        replace_section(args.markdown, passages_section(results))
        return
    if args.only_cluster_passages:
        section = cluster_passages_section(results)
        if not section:
            sys.exit(f"no cluster_passages.json in {results}")
        text = args.markdown.read_text() if args.markdown.exists() else ""
        after = "\n## Mirror detection"  # where a full run puts it: after Passages
        if section.splitlines()[0] + "\n" not in text and after in text:
            at = text.index(after) + 1
            args.markdown.write_text(text[:at] + section + "\n" + text[at:])
        else:
            replace_section(args.markdown, section)
        return
    if args.only_cluster_mirrors:
        section = cluster_mirrors_section(results)
        if not section:
            sys.exit(f"no cluster_mirrors.json in {results}")
        text = args.markdown.read_text() if args.markdown.exists() else ""
        before = "\n## History"  # after Mirror detection, as a full run puts it (History is kept by hand)
        if section.splitlines()[0] + "\n" not in text and before in text:
            at = text.index(before) + 1
            args.markdown.write_text(text[:at] + section + text[at:])  # the section ends with a blank line
        else:
            replace_section(args.markdown, section)
        return
    if args.only_verification:
        replace_section(args.markdown, verification_section(results))
        return
    if args.only_headline:
        q = json.loads((args.quality or results / "quality.json").read_text())
        section = headline_section(q, {"curves": tool_curves(q), "mutations": mutation_table(q)})
        if not section:
            sys.exit(f"no service run at threshold {HEADLINE} in the quality JSON")
        replace_section(args.markdown, section, "## Headline")
        print(section)
        return
    results.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    corpus_name = "bench/corpus.py"
    if args.quality:
        q = json.loads(args.quality.read_text())
    else:
        import corpus as corpus_module

        if args.tiny:
            docs = tiny_corpus(results / "tiny-corpus.jsonl", args.tiny)
            truth_path = None
            corpus_name = f"a generated corpus of {args.tiny} documents from Python's standard library"
        else:
            docs = corpus_module.load(args.corpus)
            truth_path = args.truth
        q = quality.run(docs, truth_path=truth_path, mutation_count=args.mutations)
    (results / "quality.json").write_text(json.dumps(q, indent=1) + "\n")

    signatures = service = None
    if not args.skip_speed:
        if args.signatures:
            signatures = json.loads(args.signatures.read_text())
        else:
            signatures = run_json(["bench/bench_sketch.py", "--only", "signatures", "--quick"])
        if args.service:
            service = json.loads(args.service.read_text())
        else:
            service = run_json(
                ["bench/bench_service.py", "--quick", "--only", "batch", "--only", "datasketch"]
            )
        (results / "signatures.json").write_text(json.dumps(signatures, indent=1) + "\n")
        (results / "service.json").write_text(json.dumps(service, indent=1) + "\n")

    summary: dict[str, Any] = {
        "machine": machine(),
        "corpus_name": corpus_name,
        "curves": tool_curves(q),
        "mutations": mutation_table(q),
        "speed": speed_summary(signatures, service),
        "defaults": {
            **q["defaults"],
            "explanation": defaults_explanation(q) if "tradeoff" in q else None,
            "current_code": CollectionParams.create("x").to_dict(),
        },
        "targets": quality.TARGETS,
        "targets_met": q.get("targets_met"),
    }
    if "s_curve" in q:
        plot_s_curve(q, results / "s_curve.png")
    plot_precision_recall(summary["curves"], results / "precision_recall.png")
    if "tradeoff" in q:
        plot_tradeoff(q, results / "tradeoff.png")
    plot_mutations(summary["mutations"], results / "mutations.png")
    plot_speed(summary["speed"], results / "speed.png")
    summary["seconds"] = round(time.perf_counter() - started, 1)
    (results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    try:
        rel = os.path.relpath(results, args.markdown.parent)
    except ValueError:
        rel = str(results)
    extra = "".join(
        "\n" + section
        for section in (
            crowds_section(results),
            growth_section(results),
            verification_section(results),
            passages_section(results),
            cluster_passages_section(results),
            mirrors_section(results),
            cluster_mirrors_section(results),
        )
        if section
    )
    args.markdown.write_text(markdown(summary, q, rel) + extra)
    print(json.dumps({k: summary[k] for k in ("curves", "mutations", "speed", "targets_met")}, indent=1))


if __name__ == "__main__":
    main()
