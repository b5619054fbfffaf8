"""``neardup dedup``: offline, through the native core and an embedded Valkey in a temporary directory;
kept records unchanged and in order, duplicate groups by union-find over verified matches."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from neardup.commands.dedup import UnionFind


def neardup_command() -> list[str]:
    """The installed console script next to this interpreter (``python -m neardup.cli`` from the repository
    root would import the source tree, which has no compiled module in a fresh clone)."""
    script = Path(sys.executable).with_name("neardup")
    return [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]


def words(rng: random.Random, n: int = 60) -> list[str]:
    return [f"w{rng.randrange(100_000)}" for _ in range(n)]


def neardup(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    return subprocess.run(
        [*neardup_command(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_groups_kept_and_transitive_chains(tmp_path: Path) -> None:
    rng = random.Random(7)
    a = words(rng)
    b = [*a[:54], *words(rng, 6)]  # J ~0.81 with a
    chain_1 = words(rng, 100)
    chain_2 = [*chain_1[:90], *words(rng, 10)]  # J ~0.81 with chain_1
    chain_3 = [*chain_2[10:], *words(rng, 10)]  # J ~0.81 with chain_2, ~0.66 with chain_1
    docs: list[dict[str, Any]] = [
        {"id": "a", "text": " ".join(a), "keep": "me"},
        {"id": "solo", "text": " ".join(words(rng))},
        {"id": "a-copy", "text": " ".join(a).upper()},
        {"id": "c1", "text": " ".join(chain_1)},
        {"id": "b", "text": " ".join(b)},
        {"id": "c2", "text": " ".join(chain_2)},
        {"id": "c3", "text": " ".join(chain_3)},
        {"id": "a", "text": " ".join(a)},  # a repeated id is still its own record
    ]
    source = tmp_path / "in.jsonl"
    lines = [json.dumps(d, separators=(",", ":")) for d in docs]
    source.write_text("\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:]) + "\n" + '{"id": "broken"}\n')
    out, dups = tmp_path / "kept.jsonl", tmp_path / "dups.jsonl"
    result = neardup(
        "dedup", str(source), "--out", str(out), "--duplicates", str(dups), "--threshold", "0.7", "--json"
    )
    assert result.returncode == 3, result.stderr  # one record without text
    summary = json.loads(result.stdout)
    assert summary["documents"] == 8 and summary["errors"] == 1
    assert out.read_text().splitlines() == [lines[0], lines[1], lines[3]]  # unchanged, in input order
    groups = [json.loads(line) for line in dups.read_text().splitlines()]
    assert [(g["kept"], g["size"], [d["id"] for d in g["duplicates"]]) for g in groups] == [
        ("a", 4, ["a-copy", "b", "a"]),
        ("c1", 3, ["c2", "c3"]),
    ]
    c3 = groups[1]["duplicates"][1]
    assert c3["matched"] == "c2" and c3["record"] == 7 and 0.7 <= c3["similarity"] < 1.0
    assert (summary["kept"], summary["duplicates"], summary["groups"]) == (3, 5, 2)


def test_stdin_to_stdout(tmp_path: Path) -> None:
    text = "the same few words again and again in a row here"
    stdin = "".join(json.dumps({"id": str(i), "text": text}) + "\n" for i in range(3))
    result = neardup("dedup", "-", "--out", "-", "--no-progress", stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [json.dumps({"id": "0", "text": text})]
    assert "kept" in result.stderr  # the summary goes to stderr when the records go to stdout


def test_union_find_roots_are_the_earliest() -> None:
    groups = UnionFind()
    for _ in range(6):
        groups.add()
    groups.union(4, 5)
    groups.union(5, 2)
    groups.union(3, 1)
    groups.union(1, 4)
    assert [groups.find(i) for i in range(6)] == [0, 1, 1, 1, 1, 1]
