"""The main text of an HTML page: what neardup compares for a web page, wherever the page comes from (a
WARC archive, a crawler's response).

The body is decoded as browsers and Scrapy do (w3lib: byte-order mark, then the HTTP charset, then a
``<meta>`` charset, then UTF-8 with replacement characters), and the text is extracted by html-text
(lxml): scripts, styles and markup dropped, words kept with the line breaks the layout implies. Broken
markup, an empty body or an unknown charset give the text that can be read, never an exception.

Needs the ``warc`` or the ``scrapy`` extra (``pip install "neardup[warc]"``), which both bring its libraries.
"""

from __future__ import annotations

import html_text
from w3lib.encoding import html_to_unicode, http_content_type_encoding, read_bom


def decode_html(body: bytes, content_type: str | None = None) -> str:
    """``body`` as text, by the charset the ``Content-Type`` header, a byte-order mark or the page names."""
    encoding, text = html_to_unicode(content_type, body)
    if (
        encoding.replace("-", "").startswith(("utf16", "utf32"))
        and read_bom(body)[0] is None
        and http_content_type_encoding(content_type) is None
    ):
        # The page's own ASCII markup cannot be UTF-16 or UTF-32: browsers read such a declaration as
        # UTF-8 (the HTML standard's encoding sniffing), and so does this.
        text = body.decode("utf-8", errors="replace")
    return text


def main_text(html: str) -> str:
    """The readable text of a page's HTML (empty when it has none)."""
    if not html.strip():
        return ""
    return html_text.extract_text(html).strip()


def page_text(body: bytes, content_type: str | None = None) -> str:
    """The readable text of an HTML response body."""
    return main_text(decode_html(body, content_type))
