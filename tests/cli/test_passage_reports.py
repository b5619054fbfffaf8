"""``neardup passages --pan-xml DIR --html FILE``: the PAN text-alignment XML read back with an XML parser
and compared with the JSON answer, and the HTML report opened in a real headless Chromium (Debian's
``chromium`` and ``chromium-driver`` through selenium): the highlights land on the copied words in both
columns, a passage and its source span share a colour, and a ``<script>`` in a text stays text."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from neardup.client import Client, Passages, PassageSource, Span
from neardup.reports import html_report, pan_xml
from tests.cli.test_dedup import neardup
from tests.e2e.test_flows import BREAD, LIGHTHOUSE

HOSTILE = (
    "Harbour pilots learn the channel by heart before they are trusted with a ship of any size, and the "
    "older pilots say that the tide tables only tell half the story of the bar at the river mouth. "
    "<script>document.title='pwned';window.pwned=1</script> & \"quoted\" <b>bold</b> words follow here "
    "in the middle of the paragraph, where a careless page would run them instead of showing them, "
    "and the sentence goes on about sandbanks that move a little with every winter storm and buoys "
    "that are laid again each spring by the crew of the small white tender from the harbour office."
)
OWN = (
    "My own opening paragraph explains why I chose to write about coastal history and home cooking in a "
    "single essay, which my teacher found an odd pairing at first but accepted after some discussion."
)


def parts() -> dict[str, str]:
    """The copied passage of each source, as it stands in the source (whitespace aside)."""
    return {
        "lighthouse": " ".join(LIGHTHOUSE.split()[40:120]),
        "bread": " ".join(BREAD.split()[20:70]),
        "harbour": " ".join(HOSTILE.split()[10:]),
    }


def essay_bytes() -> bytes:
    """An essay copying a part of each source, written with Windows line ends: the offsets must index
    the file as stored."""
    copied = parts()
    text = "\r\n\r\n".join(
        [OWN, copied["lighthouse"].upper(), "Then a thought of my own.", copied["harbour"], copied["bread"]]
    )
    return text.encode("utf-8")


def normalized(text: str) -> str:
    return " ".join(text.split()).rstrip(",.")


@pytest.fixture(scope="module")
def collection(service: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The collection holding the three sources, and a sources file holding two of them (not bread)."""
    sources = tmp_path_factory.mktemp("sources") / "sources.jsonl"
    records: list[dict[str, Any]] = [
        {"id": "lighthouse", "text": LIGHTHOUSE, "metadata": {"title": "The <i>lighthouse</i>"}},
        {"id": "bread", "text": BREAD},
        {"id": "harbour", "text": HOSTILE},
    ]
    sources.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records if r["id"] != "bread"))
    with Client(service.url) as nd:
        nd.create_collection("reports", passages=True)
        for record in records:
            nd.put("reports", record["id"], record["text"], metadata=record.get("metadata"))
        yield service.url, sources
        nd.delete_collection("reports")


def search(url: str, tmp_path: Path, *options: str) -> tuple[dict[str, Any], str]:
    """The JSON answer for the essay (the reports are written beside it), and the essay as stored."""
    path = tmp_path / "essay.txt"
    path.write_bytes(essay_bytes())
    done = neardup("passages", str(path), "-c", "reports", "--url", url, "--json", *options)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout), essay_bytes().decode("utf-8")


def test_the_pan_xml_holds_the_answers_offsets(collection: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = collection
    answer, text = search(url, tmp_path, "--pan-xml", str(tmp_path / "pan"))
    assert [s["id"] for s in answer["sources"]] == ["lighthouse", "harbour", "bread"]
    root = ET.parse(tmp_path / "pan" / "essay.xml").getroot()
    assert root.tag == "document" and root.attrib == {"reference": "essay.txt"}
    features = [
        (
            f.attrib["name"],
            int(f.attrib["this_offset"]),
            int(f.attrib["this_length"]),
            f.attrib["source_reference"],
            int(f.attrib["source_offset"]),
            int(f.attrib["source_length"]),
        )
        for f in root
    ]
    expected = sorted(
        (
            "detected-plagiarism",
            s["start"],
            s["end"] - s["start"],
            source["id"],
            s["source_start"],
            s["source_end"] - s["source_start"],
        )
        for source in answer["sources"]
        for s in source["spans"]
    )
    assert features == sorted(features, key=lambda f: f[1]) and sorted(features) == expected
    assert len(features) == 3
    # The offsets are code points of the file as stored (its \r\n line ends counted) and of the source.
    stored = {"lighthouse": LIGHTHOUSE, "bread": BREAD, "harbour": HOSTILE}
    for _, offset, length, source_id, source_offset, source_length in features:
        copied = normalized(parts()[source_id])
        assert normalized(text[offset : offset + length]) == (
            copied.upper() if source_id == "lighthouse" else copied
        )
        assert normalized(stored[source_id][source_offset : source_offset + source_length]) == copied

    # stdin is the document "stdin"; a search without a passage still writes its (empty) document
    done = neardup(
        "passages", "-", "-c", "reports", "--url", url, "--pan-xml", str(tmp_path / "pan"), stdin=OWN
    )
    assert done.returncode == 0, done.stderr
    empty = ET.parse(tmp_path / "pan" / "stdin.xml").getroot()
    assert empty.attrib == {"reference": "stdin"} and len(empty) == 0


def test_the_html_report_without_sources_and_usage_errors(
    collection: tuple[str, Path], tmp_path: Path
) -> None:
    url, sources = collection
    page = tmp_path / "report.html"
    search(url, tmp_path, "--html", str(page))
    html = page.read_text("utf-8")
    assert html.count("is not available: give the file the collection was loaded from with --sources") == 3
    assert "<script>" not in html and "&lt;script&gt;document.title" in html
    assert "http://" not in html and "https://" not in html and "src=" not in html  # no external asset
    assert "The &lt;i&gt;lighthouse&lt;/i&gt;" in html  # metadata escaped too
    bad = neardup(
        "passages", str(tmp_path / "essay.txt"), "-c", "reports", "--url", url, "--sources", str(sources)
    )
    assert bad.returncode == 2 and "--html" in bad.stderr
    # texts that are not the ones stored: one ends too soon, the other holds other words there
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(
        orjson.dumps({"id": "lighthouse", "text": LIGHTHOUSE[:300]})
        + b"\n"
        + orjson.dumps({"id": "harbour", "text": " ".join(w[::-1] for w in HOSTILE.split(" "))})
        + b"\n"
    )
    search(url, tmp_path, "--html", str(page), "--sources", str(edited))
    html = page.read_text("utf-8")
    assert "The text of lighthouse is not the stored one: the text given (300 characters, from " in html
    assert "ends before passage 1 (" in html
    assert "The text of harbour is not the stored one: the text given (from " in html
    assert "does not hold the words of passage 1 at " in html
    assert "The text of bread is not in " in html and '<mark class="c0" id="s1-1"' not in html
    missing = neardup(
        "passages", str(tmp_path / "essay.txt"), "-c", "reports", "--url", url, "--html", str(page),
        "--sources", str(tmp_path / "nope.jsonl"),
    )  # fmt: skip
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr


def test_a_source_passage_copied_twice_is_one_mark_linked_from_both() -> None:
    passage = " ".join(BREAD.split()[20:70])
    text = f"{passage}\n\nand again:\n\n{passage}"
    start = BREAD.index(BREAD.split()[20])
    spans = [
        Span(0, len(passage), start, start + 300),
        Span(len(text) - len(passage), len(text), start + 100, start + 400),
    ]
    found = Passages(1.0, [PassageSource("bread", 0.3, spans)], 1.0, 0, 1)
    page = html_report.render(text, "twice.txt", "c", found, {"bread": BREAD}, "sources.jsonl")
    assert page.count('<mark class="c0" id="s1-1" data-passage="1 2">') == 1 and 'id="s1-2"' not in page
    assert page.count('<a href="#s1-1">') == 2
    root = ET.fromstring(ET.tostring(pan_xml.document("twice.txt", found)))
    assert [(f.get("this_offset"), f.get("source_offset")) for f in root] == [
        ("0", str(start)),
        (str(len(text) - len(passage)), str(start + 100)),
    ]


selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install '.[test]')")

from selenium.webdriver.common.by import By  # noqa: E402

from tests.web import test_page as page  # noqa: E402

browser = page.browser  # the same headless Chromium fixture


def test_the_html_report_highlights_the_copied_words_in_both_texts(
    collection: tuple[str, Path], tmp_path: Path, browser: Any
) -> None:
    url, sources = collection
    page = tmp_path / "report.html"
    answer, text = search(url, tmp_path, "--html", str(page), "--sources", str(sources))
    browser.get(page.as_uri())
    assert browser.title == "Passages of " + str(tmp_path / "essay.txt")  # the script did not set it
    assert browser.execute_script("return window.pwned === undefined") is True
    summary = browser.find_element(By.ID, "summary").text
    assert f"{answer['coverage']:.1%} of the text is in passages of 3 stored documents" in summary
    rows = browser.find_elements(By.CSS_SELECTOR, "#sources tr.source")
    assert [r.find_element(By.CSS_SELECTOR, "td.containment").text for r in rows] == [
        f"{s['containment']:.1%}" for s in answer["sources"]
    ]

    stored = {"lighthouse": LIGHTHOUSE, "harbour": HOSTILE}
    colours = []
    for rank, source in enumerate(answer["sources"], 1):
        section = browser.find_element(By.ID, f"source-{rank}")
        assert section.get_attribute("data-source") == source["id"]
        [span] = source["spans"]
        copied = normalized(parts()[source["id"]])
        [mark] = section.find_elements(By.CSS_SELECTOR, ".column.text mark")
        shown = mark.get_attribute("textContent")
        assert shown == text[span["start"] : span["end"]]
        assert normalized(shown) == (copied.upper() if source["id"] == "lighthouse" else copied)
        colour = mark.value_of_css_property("background-color")
        colours.append(colour)
        source_marks = section.find_elements(By.CSS_SELECTOR, ".column.source mark")
        if source["id"] == "bread":  # not in the sources file: said so, the text side highlighted only
            assert source_marks == []
            assert "The text of bread is not in " in section.find_element(By.CSS_SELECTOR, ".missing").text
            continue
        [source_mark] = source_marks
        shown = source_mark.get_attribute("textContent")
        assert shown == stored[source["id"]][span["source_start"] : span["source_end"]]
        assert normalized(shown) == copied
        assert source_mark.value_of_css_property("background-color") == colour
        assert section.find_elements(By.CSS_SELECTOR, ".missing") == []
    assert len(set(colours)) == 3  # each source its own colour
    # the hostile text is shown as text, in both columns
    harbour = browser.find_element(By.ID, "source-2")
    for column in ("text", "source"):
        marked = harbour.find_element(By.CSS_SELECTOR, f".column.{column} mark").text
        assert "<script>document.title='pwned';window.pwned=1</script> & \"quoted\" <b>bold</b>" in marked
    assert browser.find_elements(By.CSS_SELECTOR, "main script, main b") == []
