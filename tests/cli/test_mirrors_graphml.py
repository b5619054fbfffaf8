"""``neardup mirrors --graphml``: the site pairs as a GraphML graph, read back with an XML parser and
compared with the JSON report of the same run; usage errors for GraphML on the report's path."""

from __future__ import annotations

import json
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tests.cli.test_dedup import neardup, words

NS = "{http://graphml.graphdrawing.org/xmlns}"
ODD = 'A & <B> "c"'  # a site_field value that is no URL: the site is the text itself
CONTROL = "ctl\x01site"  # a character XML cannot hold


def crawl(path: Path) -> None:
    rng = random.Random(7)
    originals = [words(rng, 80) for _ in range(6)]
    lines: list[dict[str, Any]] = []
    for k, text in enumerate(originals):
        lines.append({"id": f"o{k}", "text": " ".join(text), "url": f"https://origin.example/{k}"})

    def copy(k: int, site: str) -> None:
        lines.append({"id": f"{site}-{k}", "text": " ".join([*originals[k][:-1], "changed"]), "url": site})

    for k in range(3):
        copy(k, "https://mirror.example/")
    for k in (3, 4):
        copy(k, ODD)
    copy(5, CONTROL)
    lines.append({"id": "u", "text": " ".join(words(rng, 80)), "url": "https://other.example/"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def typed(kind: str, text: str) -> Any:
    return {"long": int, "double": float, "string": str}[kind](text)


def read_graph(path: Path) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
    """Nodes by label and edges by (source label, target label), values converted by their key's type."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{NS}graphml"
    keys = {k.get("id"): k for k in root.iter(f"{NS}key")}
    assert {(k, e.get("for"), e.get("attr.name"), e.get("attr.type")) for k, e in keys.items()} == {
        ("label", "node", "label", "string"),
        ("pages", "node", "pages", "long"),
        ("shared", "edge", "shared", "long"),
        ("other_shared", "edge", "other_shared", "long"),
        ("share", "edge", "share", "double"),
        ("share_of_other", "edge", "share_of_other", "double"),
        ("weight", "edge", "weight", "double"),
    }
    [graph] = root.findall(f"{NS}graph")
    assert graph.get("edgedefault") == "directed"

    def values(element: ET.Element, owner: str) -> dict[str, Any]:
        out = {}
        for item in element.findall(f"{NS}data"):
            key = keys[item.get("key")]
            assert key.get("for") == owner
            out[key.get("attr.name")] = typed(key.get("attr.type", ""), item.text or "")
        return out

    labels: dict[str, str] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for node in graph.findall(f"{NS}node"):
        node_id = node.get("id", "")
        assert re.fullmatch(r"n\d+", node_id) and node_id not in labels  # XML name tokens, unique
        attrs = values(node, "node")
        labels[node_id] = attrs["label"]
        nodes[attrs["label"]] = attrs
    edges = {}
    for edge in graph.findall(f"{NS}edge"):
        edges[(labels[edge.get("source", "")], labels[edge.get("target", "")])] = values(edge, "edge")
    assert len(edges) == len(graph.findall(f"{NS}edge"))
    return nodes, edges


def test_graphml_holds_the_pairs_of_the_report(tmp_path: Path) -> None:
    source = tmp_path / "crawl.jsonl"
    crawl(source)
    report, graph = tmp_path / "pairs.json", tmp_path / "out" / "mirrors.graphml"
    done = neardup(
        "mirrors", str(source), "--site-field", "url", "--out", str(report), "--graphml", str(graph),
        "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"-> {graph} (GraphML)" in done.stdout and "graph sites" in done.stdout
    assert graph.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>\n<graphml")
    pairs = json.loads(report.read_text())["pairs"]
    nodes, edges = read_graph(graph)

    shown = CONTROL.replace("\x01", "\ufffd")
    assert nodes == {
        "origin.example": {"label": "origin.example", "pages": 6},
        "mirror.example": {"label": "mirror.example", "pages": 3},
        ODD: {"label": ODD, "pages": 2},
        shown: {"label": shown, "pages": 1},
    }
    assert {(p["site"], p["other"]) for p in pairs} == {
        ("mirror.example", "origin.example"),
        (ODD, "origin.example"),
        (CONTROL, "origin.example"),
    }
    for pair in pairs:
        edge = edges[(pair["site"].replace("\x01", "\ufffd"), pair["other"])]
        assert edge == {
            "shared": pair["shared"],
            "other_shared": pair["other_shared"],
            "share": pair["share"],
            "share_of_other": pair["share_of_other"],
            "weight": pair["share"],
        }
    assert edges[(ODD, "origin.example")]["share_of_other"] == 2 / 6
    assert edges[("mirror.example", "origin.example")]["shared"] == 3
    assert len(edges) == 3


def test_graphml_on_stdout_and_usage_errors(tmp_path: Path) -> None:
    source = tmp_path / "crawl.jsonl"
    crawl(source)
    done = neardup(
        "mirrors", str(source), "--site-field", "url", "--out", str(tmp_path / "pairs.csv"), "--graphml", "-",
        "--min-share", "0.9", "--min-pages", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (tmp_path / "stdout.graphml").write_text(done.stdout)
    nodes, edges = read_graph(tmp_path / "stdout.graphml")  # the summary went to stderr
    assert set(edges) == {("mirror.example", "origin.example"), (ODD, "origin.example")}
    assert set(nodes) == {"mirror.example", "origin.example", ODD}
    csv_lines = (tmp_path / "pairs.csv").read_text().splitlines()
    assert csv_lines[0] == "site,other,pages,other_pages,shared,other_shared,share,share_of_other"
    assert len(csv_lines) == 3

    both = neardup("mirrors", str(source), "--site-field", "url", "--graphml", "-")
    assert both.returncode == 2 and "--graphml - and --out -" in both.stderr
    wrong = neardup("mirrors", str(source), "--site-field", "url", "--out", str(tmp_path / "m.graphml"))
    assert wrong.returncode == 2 and "write GraphML with --graphml FILE" in wrong.stderr
    assert not (tmp_path / "m.graphml").exists()
