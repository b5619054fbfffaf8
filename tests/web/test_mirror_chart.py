"""The Mirrors panel's bar chart in a real headless Chromium against a real service: a site's mirrors,
then the pairs of sites, each row's two bars as long as its two shares and labelled with them, a site
name holding markup shown as text; keep a screenshot."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from neardup.client import Client, NotFound

pytest.importorskip("selenium", reason="selenium is not installed (pip install '.[test]')")

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.web import test_page as page

browser = page.browser  # the same headless Chromium fixture

#: A site_field value that is no URL, so the site is the text itself: it must show as text.
MARKUP = "<img src=x onerror=alert(1)>"
#: Length of a bar at share 1 (app.js, drawShares).
FULL = 300.0


def text_of(rng: random.Random) -> list[str]:
    return [f"w{rng.randrange(100_000)}" for _ in range(80)]


def load_crawl(nd: Client) -> None:
    """origin.example: 4 pages; mirror.example copies 1 of them (its only page), copy.example 2 (and has
    a page of its own), the MARKUP site 1 (its only page)."""
    rng = random.Random(11)
    originals = [text_of(rng) for _ in range(4)]
    for k, text in enumerate(originals):
        nd.check("chart", f"o{k}", " ".join(text), metadata={"url": f"https://origin.example/{k}"})
    copies = [(0, "https://mirror.example/a"), (1, "https://copy.example/b"), (2, "https://copy.example/c")]
    for k, url in [*copies, (3, MARKUP)]:
        nd.check("chart", f"copy-{k}", " ".join([*originals[k][:-1], "edited"]), metadata={"url": url})
    nd.check("chart", "own", " ".join(text_of(rng)), metadata={"url": "https://copy.example/own"})


def chart_rows(browser: Any) -> list[dict[str, Any]]:
    rows = []
    for g in browser.find_elements(By.CSS_SELECTOR, "#mirror-chart g.bar-row"):
        row: dict[str, Any] = {
            "site": g.get_attribute("data-site"),
            "other": g.get_attribute("data-other"),
            "label": g.find_element(By.CSS_SELECTOR, "text.label").get_attribute("textContent"),
            "title": g.find_element(By.CSS_SELECTOR, ":scope > title").get_attribute("textContent"),
        }
        for kind in ("share", "share-of-other"):
            bar = g.find_element(By.CSS_SELECTOR, f"rect.bar.{kind}")
            value = g.find_element(By.CSS_SELECTOR, f"text.value.{kind}").get_attribute("textContent")
            row[kind] = (float(bar.get_attribute("data-share")), float(bar.get_attribute("width")), value)
        rows.append(row)
    return rows


def assert_bars(row: dict[str, Any], share: float, share_of_other: float) -> None:
    for kind, expected in (("share", share), ("share-of-other", share_of_other)):
        data_share, width, value = row[kind]
        assert data_share == expected
        assert width == pytest.approx(expected * FULL, abs=0.01)
        assert value == f"{100 * expected:.1f}%"


def test_a_sites_mirrors_as_a_bar_chart(service: Any, browser: Any, tmp_path: Path) -> None:
    with Client(service.url) as nd:
        with contextlib.suppress(NotFound):
            nd.delete_collection("chart")
        nd.create_collection("chart", threshold=0.6, site_field="url")
        load_crawl(nd)
        answer = nd.site("chart", "origin.example")
    assert answer.pages == 4
    assert {(m.site, m.shared, m.share, m.share_of_other) for m in answer.mirrors} == {
        ("mirror.example", 1, 0.25, 1.0),
        ("copy.example", 2, 0.5, 2 / 3),
        (MARKUP, 1, 0.25, 1.0),
    }

    browser.get(f"{service.url}/?collection=chart")
    wait = WebDriverWait(browser, 15)
    wait.until(ec.visibility_of_element_located((By.ID, "sites")))
    assert not browser.find_element(By.ID, "mirror-chart-box").is_displayed()
    browser.find_element(By.ID, "site").send_keys("origin.example")
    browser.find_element(By.ID, "show-site").click()
    chart = wait.until(ec.visibility_of_element_located((By.ID, "mirror-chart")))
    rows = chart_rows(browser)
    assert [(r["site"], r["other"], r["label"]) for r in rows] == [
        ("origin.example", m.site, m.site) for m in answer.mirrors
    ]  # the service's order, best first
    for row, mirror in zip(rows, answer.mirrors, strict=True):
        assert_bars(row, mirror.share, mirror.share_of_other)
    by_site = {r["other"]: r for r in rows}
    assert by_site["copy.example"]["share"][1:] == (150.0, "50.0%")
    assert by_site["copy.example"]["share-of-other"][1:] == (200.0, "66.7%")
    assert by_site["mirror.example"]["share"][1:] == (75.0, "25.0%")
    # The name holding markup is text in the chart and the table, never an element.
    assert by_site[MARKUP]["label"] == MARKUP
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []
    assert MARKUP in [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#mirrors td.other")]
    legend = browser.find_element(By.ID, "mirror-legend").text
    assert "pages of origin.example with a near-duplicate on that site" in legend

    browser.execute_script("arguments[0].scrollIntoView()", chart)
    screenshot = tmp_path / "mirror-chart.png"
    assert browser.save_screenshot(str(screenshot))
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    if keep := os.environ.get("NEARDUP_SCREENSHOT"):  # to look at it: NEARDUP_SCREENSHOT=chart.png
        shutil.copyfile(screenshot, keep)

    # No site: the pairs sharing at least half of one side's pages, a row per pair.
    browser.find_element(By.ID, "site").clear()
    browser.find_element(By.ID, "show-site").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "site-status"), "3 pairs"))
    rows = {(r["site"], r["other"]): r for r in chart_rows(browser)}
    assert set(rows) == {
        ("mirror.example", "origin.example"),
        ("copy.example", "origin.example"),  # the side with the larger share comes first
        (MARKUP, "origin.example"),
    }
    assert rows[("copy.example", "origin.example")]["label"] == "copy.example ↔ origin.example"
    assert_bars(rows[("copy.example", "origin.example")], 2 / 3, 0.5)
    assert_bars(rows[("mirror.example", "origin.example")], 1.0, 0.25)
    # A label longer than 32 characters is cut; its row's tooltip has it whole.
    long_row = rows[(MARKUP, "origin.example")]
    assert long_row["label"] == (MARKUP + " ↔ origin.example")[:31] + "…"
    assert long_row["title"] == MARKUP + " ↔ origin.example"
    assert (
        "first site with a near-duplicate on the second" in browser.find_element(By.ID, "mirror-legend").text
    )
