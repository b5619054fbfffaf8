"""The page at ``GET /`` in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven
by selenium; no browser is ever downloaded): paste a text with a stored near-duplicate, click, see the
match and its similarity, the collection's parameters, document count and S-curve; keep a screenshot."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from neardup.client import Client, NotFound

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install '.[test]')")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service as DriverService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
]

ORIGINAL = (
    "The lighthouse on the northern point was built in 1874, after two ships ran aground on the reef in a "
    "single winter. Its first keeper, a retired sailor named Thomas Avery, kept a logbook in which he noted "
    "the weather every four hours, the ships that passed, and the birds that struck the lantern glass during "
    "the autumn migration. The lamp burned whale oil at first, then kerosene, and finally electricity when a "
    "cable was laid across the bay in 1931."
)
PASTED = ORIGINAL.replace("retired sailor", "retired seaman").replace("The lamp", "THE LAMP")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed "
            "(scripts/test.sh installs them when run as root: apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_paste_find_and_see_the_match(service: Any, browser: Any, tmp_path: Path) -> None:
    with Client(service.url) as nd:
        with contextlib.suppress(NotFound):
            nd.delete_collection("web")
        nd.create_collection("web", threshold=0.6)
        nd.check("web", "lighthouse-1874", ORIGINAL, metadata={"url": "https://example.org/lighthouse"})
        nd.check("web", "unrelated", "Compilers allocate registers and spill values to memory when short.")
        expected = nd.query("web", PASTED)[0]
    assert expected.id == "lighthouse-1874"

    browser.get(f"{service.url}/?collection=web")
    wait = WebDriverWait(browser, 15)
    wait.until(ec.text_to_be_present_in_element((By.ID, "params-name"), "web"))
    assert Select(browser.find_element(By.ID, "collection")).first_selected_option.text == "web"
    params = browser.find_element(By.ID, "params-list").text
    assert "documents\n2" in params and "0.6" in params
    curve = browser.find_element(By.CSS_SELECTOR, "#s-curve polyline.curve")
    assert len(curve.get_attribute("points").split()) == 201

    browser.find_element(By.ID, "text").send_keys(PASTED)
    browser.find_element(By.ID, "find").click()
    row = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#matches tr.match")))
    assert row.find_element(By.CSS_SELECTOR, "td.id").text == "lighthouse-1874"
    assert row.find_element(By.CSS_SELECTOR, "td.similarity").text == f"{expected.similarity:.3f}"
    assert "example.org/lighthouse" in row.find_element(By.CSS_SELECTOR, "td.metadata").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#matches tr.match")) == 1
    assert "1 match" in browser.find_element(By.ID, "status").text

    screenshot = tmp_path / "page.png"
    assert browser.save_screenshot(str(screenshot))
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    if keep := os.environ.get("NEARDUP_SCREENSHOT"):  # to look at it: NEARDUP_SCREENSHOT=page.png
        shutil.copyfile(screenshot, keep)


def test_static_files(service: Any) -> None:
    with httpx.Client(base_url=service.url) as http:
        page = http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "/web/app.js" in page.text
        assert http.get("/web/app.js").headers["content-type"].startswith("text/javascript")
        assert http.get("/web/style.css").headers["content-type"].startswith("text/css")
        assert http.get("/web/index.html").status_code == 404  # only the listed assets
        assert http.get("/web/..%2Fapi%2F__init__.py").status_code == 404


def test_a_sites_mirrors(service: Any, browser: Any) -> None:
    with Client(service.url) as nd:
        with contextlib.suppress(NotFound):
            nd.delete_collection("crawl")
        nd.create_collection("crawl", threshold=0.6, site_field="url")
        nd.check("crawl", "o1", ORIGINAL, metadata={"url": "https://origin.example/lighthouse"})
        nd.check(
            "crawl",
            "o2",
            "Compilers allocate registers and spill values.",
            metadata={"url": "https://origin.example/c"},
        )
        nd.check("crawl", "m1", PASTED, metadata={"url": "https://mirror.example/copy"})
        nd.create_collection("plain-page")

    browser.get(f"{service.url}/?collection=crawl")
    wait = WebDriverWait(browser, 15)
    wait.until(ec.visibility_of_element_located((By.ID, "sites")))
    assert browser.find_element(By.ID, "site-field").text == "url"
    browser.find_element(By.ID, "site").send_keys("https://Origin.example/")
    browser.find_element(By.ID, "show-site").click()
    row = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#mirrors tr.mirror")))
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells == ["origin.example", "mirror.example", "2", "1", "1", "0.500", "1.000"]
    assert "origin.example: 2 pages" in browser.find_element(By.ID, "site-status").text

    browser.find_element(By.ID, "site").clear()
    browser.find_element(By.ID, "show-site").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "site-status"), "1 pair"))
    cells = [
        td.text
        for td in browser.find_element(By.CSS_SELECTOR, "#mirrors tr.mirror").find_elements(By.TAG_NAME, "td")
    ]
    assert cells[:2] == ["mirror.example", "origin.example"] and cells[5] == "1.000"

    browser.get(f"{service.url}/?collection=plain-page")  # a collection without a site_field: no panel
    wait.until(ec.text_to_be_present_in_element((By.ID, "params-name"), "plain-page"))
    assert not browser.find_element(By.ID, "sites").is_displayed()


def test_paste_and_see_the_copied_passage_highlighted(service: Any, browser: Any) -> None:
    """The passage is highlighted under its best source, the other stored copy named under it, and the
    sentence's share is the highlighted one."""
    stored = ORIGINAL + " " + PASTED.split(".")[0]
    copied = " ".join(ORIGINAL.split()[8:44]).rstrip(",.")
    # Characters outside the BMP before the passage: offsets are code points, JavaScript's are not.
    essay = "🙂🙂 My own words come first, then a copy: " + copied + ". And my own ending 🙂."
    with Client(service.url) as nd:
        with contextlib.suppress(NotFound):
            nd.delete_collection("web-passages")
        nd.create_collection("web-passages", passages=True)
        nd.check("web-passages", "lighthouse", stored, metadata={"url": "https://example.org/lighthouse"})
        nd.check("web-passages", "mirror", stored)  # the same text: the tie goes to the smaller id

    browser.get(f"{service.url}/?collection=web-passages")
    wait = WebDriverWait(browser, 15)
    wait.until(ec.text_to_be_present_in_element((By.ID, "params-name"), "web-passages"))
    button = wait.until(ec.visibility_of_element_located((By.ID, "find-passages")))
    browser.find_element(By.ID, "text").send_keys(essay)
    button.click()
    mark = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#highlighted mark")))
    assert mark.text == copied
    assert mark.get_attribute("title") == "lighthouse; also in 1 stored document: mirror"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#highlighted mark")) == 1
    assert browser.find_element(By.ID, "highlighted").text == essay
    [source] = browser.find_elements(By.CSS_SELECTOR, "#sources li.source")
    assert source.get_attribute("data-id") == "lighthouse" and "example.org/lighthouse" in source.text
    assert "also in 1 stored document: mirror" in source.text
    share, sentence = browser.find_element(By.ID, "coverage").text.split("%", 1)
    assert float(share) == pytest.approx(100 * len(copied) / len(essay), abs=0.051)  # len: code points
    assert sentence.endswith(
        " of the text is in passages of 1 stored document (found in 2 stored documents in all)."
    )
