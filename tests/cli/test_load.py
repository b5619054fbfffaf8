"""``neardup load`` against a real ``neardup serve``: JSONL, CSV, a folder and stdin, the summary and exit
codes, rejected documents, resuming after an interruption, and an unreachable service."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def neardup_command() -> list[str]:
    """The installed console script next to this interpreter (``python -m neardup.cli`` from the repository
    root would import the source tree, which has no compiled module in a fresh clone)."""
    script = Path(sys.executable).with_name("neardup")
    return [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]


BASE = (
    "The lighthouse on the northern point was built in 1874 after two ships ran aground on the reef in a "
    "single winter and its first keeper kept a logbook of the weather the ships and the birds"
)


def documents(n: int, prefix: str = "d") -> list[dict[str, Any]]:
    """Pairs: every odd document is a near-duplicate of the even one before it; pairs are unrelated."""
    rng = random.Random(n)
    docs = []
    for i in range(n):
        if i % 2 == 0:
            words = [f"w{rng.randrange(100_000)}" for _ in range(60)]
        text = " ".join(words) + (" again" if i % 2 else "")
        docs.append({"id": f"{prefix}{i}", "text": text, "source": "test"})
    return docs


def write_jsonl(path: Path, docs: list[dict[str, Any]], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs) + "".join(line + "\n" for line in extra))
    return path


def neardup(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    return subprocess.run(
        [*neardup_command(), *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def count(service: Any, collection: str) -> int:
    return int(httpx.get(f"{service.url}/v1/collections/{collection}").json()["documents"])


def test_jsonl_with_rejected_lines(service: Any, tmp_path: Path) -> None:
    source = write_jsonl(
        tmp_path / "in.jsonl",
        documents(40),
        ['{"id": "no-text"}', "not json", json.dumps({"id": "big", "text": "x " * 600_000})],
    )
    result = neardup(
        "load",
        str(source),
        "-c",
        "l1",
        "--create",
        "--threshold",
        "0.7",
        "--expected-documents",
        "40",
        "--url",
        service.url,
        "--json",
        "--batch-size",
        "16",
        "--metadata-field",
        "source",
    )
    assert result.returncode == 3, result.stderr  # finished, some rejected
    assert httpx.get(f"{service.url}/v1/collections/l1").json()["expected_documents"] == 40
    summary = json.loads(result.stdout)
    assert (summary["inserted"], summary["duplicates"], summary["errors"]) == (40, 20, 3)
    samples = " ".join(summary["error_samples"])
    assert "record 41 (id 'no-text'): no 'text' field" in samples and "record 42: not JSON" in samples
    assert "id 'big'" in samples and "1000000" in samples  # the service's 422, one document alone
    assert count(service, "l1") == 40
    assert httpx.get(f"{service.url}/v1/collections/l1/documents/d3").json()["metadata"] == {"source": "test"}
    assert not (tmp_path / "in.jsonl.neardup-checkpoint").exists()  # removed once complete


def test_csv_folder_and_stdin(service: Any, tmp_path: Path) -> None:
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text('url,body\nu1,"a first, quoted text with a comma"\nu2,another text\n')
    result = neardup(
        "load",
        str(csv_path),
        "-c",
        "l2",
        "--create",
        "--url",
        service.url,
        "--id-field",
        "url",
        "--text-field",
        "body",
    )
    assert result.returncode == 0, result.stderr
    assert "inserted" in result.stdout and count(service, "l2") == 2

    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(BASE)
    (folder / "sub" / "b.txt").write_text(BASE + " again")
    (folder / "blob.bin").write_bytes(b"\0\1\2")
    (folder / ".hidden").write_text("skipped")
    result = neardup("load", str(folder), "-c", "l2", "--url", service.url, "--json")
    assert result.returncode == 3, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["inserted"], summary["duplicates"], summary["errors"]) == (2, 1, 1)
    assert httpx.get(f"{service.url}/v1/collections/l2/documents/sub%2Fb.txt").status_code == 200

    lines = "".join(json.dumps(d) + "\n" for d in documents(6, "s")).encode()
    result = neardup("load", "-", "-c", "l2", "--url", service.url, "--json", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["inserted"] == 6


def test_missing_collection_and_unreachable_service(service: Any, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", documents(4))
    result = neardup("load", str(source), "-c", "absent", "--url", service.url)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"neardup: error: collection 'absent' does not exist at {service.url}: add --create "
        "(with --threshold etc. to choose its parameters)"
    ]
    result = neardup(
        "load", str(source), "-c", "x", "--url", "http://127.0.0.1:9", "--retries", "1", "--backoff", "0.01"
    )
    assert result.returncode == 4
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("neardup: error: service unavailable after retries")
    result = neardup("load", str(tmp_path / "nope.jsonl"), "-c", "x", "--url", service.url)
    assert result.returncode == 2 and "no such file" in result.stderr


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before it runs: SIGINT's default action, as in a terminal. A process started in the
    background by a non-interactive shell (a CI runner's ``cmd &``) inherits SIGINT ignored, and Python
    then leaves it ignored: the load would not see the Ctrl-C at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_resumes_after_an_interruption(service: Any, tmp_path: Path) -> None:
    docs = documents(3000)
    source = write_jsonl(tmp_path / "big.jsonl", docs)
    checkpoint = tmp_path / "big.jsonl.neardup-checkpoint"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    arguments = [
        "load",
        str(source),
        "-c",
        "l3",
        "--create",
        "--threshold",
        "0.7",
        "--url",
        service.url,
        "--batch-size",
        "5",
        "--json",
    ]
    with subprocess.Popen(  # closes its pipes on the way out, whatever happens
        [*neardup_command(), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    ) as first:
        try:
            deadline = time.monotonic() + 30
            while not checkpoint.exists() and time.monotonic() < deadline and first.poll() is None:
                time.sleep(0.01)
            first.send_signal(signal.SIGINT)  # Ctrl-C
            _, err = first.communicate(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    assert first.returncode == 130, err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    acknowledged = json.loads(checkpoint.read_text())["records"]
    assert 0 < acknowledged < len(docs)

    second = neardup(*arguments)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["resumed_at"] == acknowledged
    # Only what the first run had not seen acknowledged is sent again (a batch in flight at most).
    assert len(docs) - acknowledged <= summary["documents"] <= len(docs) - acknowledged + 5
    assert summary["inserted"] >= len(docs) and summary["duplicates"] >= len(docs) // 2 - 5
    assert count(service, "l3") == len(docs)
    assert not checkpoint.exists()
