"""Pairs of mirror sites as GraphML, the graph format Gephi, yEd, networkx and igraph read.

One node per site of the pairs (``label``: the site, ``pages``: its pages), one directed edge per pair
from ``site`` (the side with the larger share) to ``other``, with the pair's counts and shares.
``weight`` repeats ``share`` because Gephi draws an edge's thickness from the attribute of that name.
Node ids are ``n0``, ``n1``... in order of first appearance: GraphML ids are XML name tokens, which a
site name (any text of a ``site_field``) need not be.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from typing import Any

NAMESPACE = "http://graphml.graphdrawing.org/xmlns"
SCHEMA = "http://graphml.graphdrawing.org/xmlns/1.0/graphml.xsd"
XSI = "http://www.w3.org/2001/XMLSchema-instance"

#: (id, for, type): every attribute written, its GraphML key id being its name.
KEYS = (
    ("label", "node", "string"),
    ("pages", "node", "long"),
    ("shared", "edge", "long"),
    ("other_shared", "edge", "long"),
    ("share", "edge", "double"),
    ("share_of_other", "edge", "double"),
    ("weight", "edge", "double"),
)

# Characters XML 1.0 cannot hold, even as references (controls, lone surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: str) -> str:
    """``value`` with each character XML cannot hold replaced by U+FFFD (a label only: ids are apart)."""
    return _NOT_XML.sub("\ufffd", value)


def mirror_graph(pairs: Iterable[Mapping[str, Any]]) -> bytes:
    """The GraphML document of ``pairs``: mappings with the keys of a ``/mirrors`` pair (``site``,
    ``other``, ``pages``, ``other_pages``, ``shared``, ``other_shared``, ``share``, ``share_of_other``)."""
    ET.register_namespace("", NAMESPACE)
    ET.register_namespace("xsi", XSI)
    root = ET.Element(f"{{{NAMESPACE}}}graphml", {f"{{{XSI}}}schemaLocation": f"{NAMESPACE} {SCHEMA}"})
    for key, owner, kind in KEYS:
        ET.SubElement(
            root, f"{{{NAMESPACE}}}key", {"id": key, "for": owner, "attr.name": key, "attr.type": kind}
        )
    graph = ET.SubElement(root, f"{{{NAMESPACE}}}graph", {"id": "mirrors", "edgedefault": "directed"})
    ids: dict[str, str] = {}
    edges: list[tuple[str, str, Mapping[str, Any]]] = []

    def node(site: str, pages: int) -> str:
        if site not in ids:
            ids[site] = f"n{len(ids)}"
            element = ET.SubElement(graph, f"{{{NAMESPACE}}}node", {"id": ids[site]})
            data(element, "label", xml_text(site))
            data(element, "pages", str(pages))
        return ids[site]

    for pair in pairs:
        edges.append((node(pair["site"], pair["pages"]), node(pair["other"], pair["other_pages"]), pair))
    # GraphML allows nodes and edges in any order; nodes first is what every reader handles.
    for number, (source, target, pair) in enumerate(edges):
        element = ET.SubElement(
            graph, f"{{{NAMESPACE}}}edge", {"id": f"e{number}", "source": source, "target": target}
        )
        for key in ("shared", "other_shared"):
            data(element, key, str(pair[key]))
        for key in ("share", "share_of_other"):
            data(element, key, repr(float(pair[key])))
        data(element, "weight", repr(float(pair["share"])))
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def data(element: ET.Element, key: str, value: str) -> None:
    ET.SubElement(element, f"{{{NAMESPACE}}}data", {"key": key}).text = value
