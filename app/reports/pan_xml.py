"""PAN text-alignment XML of a passage search: one ``<document reference=...>`` per submitted text, one
``detected-plagiarism`` feature per passage, against its best source (the copies listed under a
passage's ``also_in`` are not features). Offsets and lengths are code points, as PAN's corpora and
evaluation read UTF-8 files (no newline translation); the ids of the stored documents are the
``source_reference``s (a collection loaded from a folder of PAN source files has their file names)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from neardup.client import Passages

#: Characters XML 1.0 cannot hold, even escaped; replaced so that every file parses.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_safe(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def document(reference: str, found: Passages) -> ET.Element:
    """The ``<document>`` element: features in the text's order, whatever their source."""
    root = ET.Element("document", reference=_xml_safe(reference))
    spans = sorted(
        ((span, source.id) for source in found.sources for span in source.spans),
        key=lambda item: (item[0].start, item[0].end),
    )
    for span, source_id in spans:
        ET.SubElement(
            root,
            "feature",
            {
                "name": "detected-plagiarism",
                "this_offset": str(span.start),
                "this_length": str(span.end - span.start),
                "source_reference": _xml_safe(source_id),
                "source_offset": str(span.source_start),
                "source_length": str(span.source_end - span.source_start),
            },
        )
    return root


def file_name(reference: str) -> str:
    """``essay.txt`` -> ``essay.xml``, the name PAN gives the detections of a suspicious document."""
    stem = Path(reference).stem or reference
    return f"{stem}.xml"


def write(directory: Path, reference: str, found: Passages) -> Path:
    """Writes ``directory/<reference's stem>.xml`` (the folder is created) and returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(reference)
    tree = ET.ElementTree(document(reference, found))
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
