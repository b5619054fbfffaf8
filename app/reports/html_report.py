"""The HTML report of a passage search: one self-contained page (no script, no external asset) with the
text's coverage and each source's containment on top, then the submitted text beside each source's text,
every passage highlighted in both in its source's colour and linked to its counterpart. The service does
not return stored texts: the caller passes the ones it has, and a source without one is shown with the
submitted text's side highlighted only. Every text, id and metadata value is escaped."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape

import orjson

from neardup.client import Passages, PassageSource

#: Highlight colours, one per source by rank (repeated past the tenth): light, so dark text stays
#: readable on them, and told apart side by side.
COLOURS = (
    "#ffd54f",
    "#81d4fa",
    "#a5d6a7",
    "#f48fb1",
    "#ce93d8",
    "#ffab91",
    "#80cbc4",
    "#e6ee9c",
    "#b0bec5",
    "#bcaaa4",
)

#: Words as the service's passage search reads them: maximal runs of letters and digits.
_WORD = re.compile(r"[^\W_]+")
#: Share of a passage's words its source span must hold for a given text to be taken as the stored one.
_SAME_WORDS = 0.5

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em;color:#222}"
    "h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.5em 0 .4em}"
    "h3{font-size:1em;margin:0 0 .4em}"
    "table{border-collapse:collapse;margin:.5em 0}th,td{padding:.2em .7em;text-align:left;"
    "border-bottom:1px solid #ddd;vertical-align:top}td.number{text-align:right}"
    ".swatch{display:inline-block;width:1em;height:1em;border-radius:3px;vertical-align:middle}"
    ".columns{display:grid;grid-template-columns:1fr 1fr;gap:1.2em}"
    ".column{border:1px solid #ccc;border-radius:4px;padding:.6em .8em;overflow-wrap:anywhere}"
    ".body{white-space:pre-wrap;max-height:80vh;overflow:auto}"
    "mark{color:inherit;border-radius:2px}mark a{color:inherit;text-decoration:none}"
    ".missing{background:#fff3cd;border:1px solid #e0c36a;padding:.5em .8em;border-radius:4px}"
    ".metadata{font-family:monospace;font-size:.9em}.note{color:#555}"
    + "".join(f".c{k}{{background:{colour}}}" for k, colour in enumerate(COLOURS))
)


def _colour(rank: int) -> str:
    return f"c{(rank - 1) % len(COLOURS)}"


def _percent(share: float) -> str:
    return f"{share:.1%}"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


@dataclass(frozen=True)
class _Mark:
    """A highlighted range: ``start``/``end`` code points of the text shown, the HTML that opens and
    closes it."""

    start: int
    end: int
    opening: str
    closing: str


def _highlighted(text: str, marks: list[_Mark]) -> str:
    """The escaped text with the marks (sorted, not overlapping) around their ranges."""
    out: list[str] = []
    position = 0
    for mark in marks:
        start, end = max(mark.start, position), min(mark.end, len(text))
        if start >= end:
            continue
        out += [escape(text[position:start]), mark.opening, escape(text[start:end]), mark.closing]
        position = end
    out.append(escape(text[position:]))
    return "".join(out)


def _metadata(source: PassageSource) -> str:
    if not source.metadata:
        return ""
    return escape(orjson.dumps(source.metadata).decode())


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _unavailable(source: PassageSource, text: str, texts: Mapping[str, str], where: str | None) -> str | None:
    """Why the source's text cannot be shown, or None when it can. A text given that is not the one
    stored (edited since it was loaded) would put the highlights on other words: it is refused when a
    passage ends past it or when fewer than half of a passage's words are in its span there."""
    given = texts.get(source.id)
    if given is None:
        if where is None:
            return "not available: give the file the collection was loaded from with --sources"
        return f"not in {where}"
    for number, span in enumerate(source.spans, 1):
        if span.source_end > len(given):
            return (
                f"not the stored one: the text given ({_plural(len(given), 'character')}, from {where}) "
                f"ends before passage {number} ({span.source_end:,})"
            )
        words = _words(text[span.start : span.end])
        if len(words & _words(given[span.source_start : span.source_end])) < _SAME_WORDS * len(words):
            return (
                f"not the stored one: the text given (from {where}) does not hold the words of passage "
                f"{number} at {span.source_start:,}-{span.source_end:,}"
            )
    return None


def _source_section(
    rank: int, source: PassageSource, text: str, label: str, texts: Mapping[str, str], where: str | None
) -> str:
    colour = _colour(rank)
    why = _unavailable(source, text, texts, where)
    # Passages of the source side, merged where they overlap (a source passage copied twice into the
    # text): one mark names every passage it holds; each text-side mark links to it.
    source_marks: list[tuple[int, int, list[int]]] = []
    for number, span in sorted(enumerate(source.spans, 1), key=lambda item: item[1].source_start):
        if source_marks and span.source_start < source_marks[-1][1]:
            start, end, numbers = source_marks[-1]
            source_marks[-1] = (start, max(end, span.source_end), [*numbers, number])
        else:
            source_marks.append((span.source_start, span.source_end, [number]))
    target = {number: numbers[0] for _, _, numbers in source_marks for number in numbers}
    text_marks = []
    for number, span in enumerate(source.spans, 1):
        title = escape(
            f"passage {number} of {source.id}: text {span.start:,}-{span.end:,}, "
            f"source {span.source_start:,}-{span.source_end:,}"
        )
        link = f'<a href="#s{rank}-{target[number]}">' if why is None else ""
        text_marks.append(
            _Mark(
                span.start,
                span.end,
                f'<mark class="{colour}" id="t{rank}-{number}" data-passage="{number}" '
                f'title="{title}">{link}',
                ("</a>" if link else "") + "</mark>",
            )
        )
    source_id = escape(source.id)
    parts = [
        f'<section class="pair" id="source-{rank}" data-source="{escape(source.id)}">',
        f'<h2><span class="swatch {colour}"></span> {rank}. {source_id} '
        f'<span class="note">containment {_percent(source.containment)}, '
        f"{_plural(len(source.spans), 'passage')}</span></h2>",
    ]
    if source.metadata:
        parts.append(f'<p class="metadata">{_metadata(source)}</p>')
    if why is not None:
        parts.append(
            f'<p class="missing">The text of {source_id} is {escape(why)}; its passages are highlighted '
            "in the submitted text only.</p>"
        )
    parts += [
        '<div class="columns">',
        f'<div class="column text"><h3>{escape(label)}</h3><div class="body">'
        f"{_highlighted(text, text_marks)}</div></div>",
    ]
    if why is None:
        marks = [
            _Mark(
                start,
                end,
                f'<mark class="{colour}" id="s{rank}-{numbers[0]}" '
                f'data-passage="{" ".join(map(str, numbers))}">'
                f'<a href="#t{rank}-{numbers[0]}">',
                "</a></mark>",
            )
            for start, end, numbers in source_marks
        ]
        parts.append(
            f'<div class="column source"><h3>{source_id}</h3><div class="body">'
            f"{_highlighted(texts[source.id], marks)}</div></div>"
        )
    else:
        parts.append(
            f'<div class="column source unavailable"><h3>{source_id}</h3>'
            '<p class="note">(text not available)</p></div>'
        )
    parts.append("</div>")
    rows = []
    for number, span in enumerate(source.spans, 1):
        copies = ", ".join(escape(copy.id) for copy in span.also_in)
        rest = span.also_in_count - len(span.also_in)
        if rest > 0:
            copies += f" and {rest:,} more"
        rows.append(
            f'<tr><td class="number"><a href="#t{rank}-{number}">{number}</a></td>'
            f'<td class="number">{span.start:,}-{span.end:,}</td>'
            f'<td class="number">{span.source_start:,}-{span.source_end:,}</td>'
            f'<td class="number">{len(text[span.start : span.end].split()):,}</td><td>{copies}</td></tr>'
        )
    parts += [
        '<table class="passages"><thead><tr><th>passage</th><th>text</th><th>source</th><th>words</th>'
        "<th>also in</th></tr></thead><tbody>",
        *rows,
        "</tbody></table></section>",
    ]
    return "\n".join(parts)


def render(
    text: str,
    label: str,
    collection: str,
    found: Passages,
    texts: Mapping[str, str],
    where: str | None = None,
) -> str:
    """The page. ``texts``: the stored texts the caller has, by id (``where``: where they were read,
    named when a source's text is missing from it)."""
    words = len(text.split())
    title = f"Passages of {label}"
    if found.sources:
        summary = (
            f"{_plural(words, 'word')}; {_percent(found.coverage)} of the text is in passages of "
            f"{_plural(len(found.sources), 'stored document')} (collection {collection!r}; found in "
            f"{_plural(found.documents, 'stored document')} in all)"
        )
    else:
        summary = f"{_plural(words, 'word')}; no passage found in collection {collection!r}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing in the page may load or run anything, whatever a text holds.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f'<header><h1>{escape(title)}</h1><p id="summary">{escape(summary)}</p>',
    ]
    if found.more_sources:
        parts.append(
            f'<p class="note" id="more">The limit left out {_plural(found.more_sources, "source")} '
            "of further "
            f"passages: with them, {_percent(found.coverage_all)} of the text is in passages.</p>"
        )
    if found.sources:
        parts.append(
            '<table id="sources"><thead><tr><th></th><th>#</th><th>source</th><th>containment</th>'
            "<th>passages</th><th>metadata</th></tr></thead><tbody>"
        )
        for rank, source in enumerate(found.sources, 1):
            parts.append(
                f'<tr class="source"><td><span class="swatch {_colour(rank)}"></span></td>'
                f'<td class="number">{rank}</td><td><a href="#source-{rank}">{escape(source.id)}</a></td>'
                f'<td class="number containment">{_percent(source.containment)}</td>'
                f'<td class="number">{len(source.spans):,}</td>'
                f'<td class="metadata">{_metadata(source)}</td></tr>'
            )
        parts.append("</tbody></table>")
    parts.append("</header><main>")
    for rank, source in enumerate(found.sources, 1):
        parts.append(_source_section(rank, source, text, label, texts, where))
    if not found.sources:
        parts.append(f'<div class="column text"><div class="body">{escape(text)}</div></div>')
    parts.append("</main></body></html>\n")
    return "\n".join(parts)
