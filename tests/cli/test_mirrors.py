"""``neardup mirrors``: offline mirror detection from a JSONL file, CSV and JSON reports."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

from tests.cli.test_dedup import neardup, words


def crawl(path: Path) -> None:
    rng = random.Random(3)
    originals = [words(rng, 80) for _ in range(6)]
    lines = []
    for k, text in enumerate(originals):
        lines.append({"id": f"o{k}", "text": " ".join(text), "url": f"https://Origin.example/{k}"})
    for k, text in enumerate(originals[:3]):  # a mirror of half of origin's pages, one word changed
        edited = [*text[:-1], "changed"]
        lines.append({"id": f"m{k}", "text": " ".join(edited), "url": f"https://mirror.example/{k}"})
    lines.append({"id": "u", "text": " ".join(words(rng, 80)), "url": "https://other.example/"})
    lines.append({"id": "n", "text": " ".join(originals[4])})  # no site: counted nowhere
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_csv_and_json_reports(tmp_path: Path) -> None:
    source = tmp_path / "crawl.jsonl"
    crawl(source)
    done = neardup("mirrors", str(source), "--site-field", "url", "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["site"], r["other"], r["shared"], r["share"], r["share_of_other"]) for r in rows] == [
        ("mirror.example", "origin.example", "3", "1.0", "0.5")
    ]
    assert "without site" in done.stderr and "1" in done.stderr

    out = tmp_path / "report.json"
    done = neardup(
        "mirrors", str(source), "--site-field", "url", "--out", str(out), "--min-share", "0.9", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pairs"] == 1 and json.loads(done.stdout)["documents"] == 11
    [pair] = json.loads(out.read_text())["pairs"]
    assert pair["pages"] == 3 and pair["other_pages"] == 6 and pair["share"] == 1.0

    none = neardup("mirrors", str(source), "--site-field", "url", "--min-pages", "4", "--no-progress")
    assert none.returncode == 0 and none.stdout.strip() == ",".join(
        ["site", "other", "pages", "other_pages", "shared", "other_shared", "share", "share_of_other"]
    )
    bad = neardup("mirrors", str(source), "--site-field", "url", "--min-share", "2")
    assert bad.returncode != 0 and "min-share" in bad.stderr
