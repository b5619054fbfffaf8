"""The store SIGKILLed again and again under concurrent clients of a real ``neardup serve``.

The service runs its embedded Valkey (supervised: started again when it dies). Clients send checks
(single and batches, with sites), PUTs, deletes, passage searches and site reads, while the server is
SIGKILLed every few seconds. Every answer must be a 2xx (or a 404 for a document deleted before) or a
503 with ``Retry-After``, never a 500 nor a dropped connection; at the end every acknowledged write is
read back: a document whose check or PUT answered 2xx is there, one whose delete answered 204 is gone.

Prints one JSON object: answers by operation and status, the answers that broke the rule, the
documents lost, and how long each kill took to recover from (first 2xx after the kill).

    python bench/store_faults.py                      # 120 s, a kill every 12 s, 8 clients
    python bench/store_faults.py --seconds 30 --every 3

Kills closer together than 10 s count as a server that keeps dying: the supervisor spaces its restarts
(doubling from NEARDUP_STORE_RESTART_BACKOFF, 0.1 s here) and gives up after
NEARDUP_STORE_RESTART_ATTEMPTS in a row (set high here, so that the run measures answers, not the
give-up).

``stress()`` is also the short test's driver (tests/e2e/test_store_faults.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

WEB = "/v1/collections/web"
TEXTS = "/v1/collections/texts"


def text_of(i: int) -> str:
    """Unrelated texts (each matches only itself), long enough for passages."""
    return " ".join(f"w{i}x{j} v{(i * 31 + j) % 997}y{i}" for j in range(60))


@dataclass
class Outcome:
    answers: Counter[str] = field(default_factory=Counter)
    broken: list[str] = field(default_factory=list)
    #: path -> text id of documents acknowledged as stored (GET must be 200)
    stored: dict[str, int] = field(default_factory=dict)
    #: paths of documents acknowledged as deleted (GET must be 404)
    deleted: set[str] = field(default_factory=set)
    kills: list[float] = field(default_factory=list)
    recovered_after: list[float] = field(default_factory=list)
    #: when the latest-sent request that got a 2xx was sent, and when its answer came
    ok_sent: float = 0.0
    ok_at: float = 0.0


def _judge(out: Outcome, op: str, response: httpx.Response, sent: float) -> bool:
    """Counts the answer to a request sent at ``sent``; True for a 2xx. A 503 must carry
    Retry-After; anything else is broken."""
    status = response.status_code
    out.answers[f"{op} {status}"] += 1
    if 200 <= status < 300:
        if sent > out.ok_sent:
            out.ok_sent, out.ok_at = sent, time.monotonic()
        return True
    if status == 503 and int(response.headers.get("retry-after", "0")) >= 1:
        return False
    out.broken.append(f"{op}: {status} {response.text[:300]}")
    return False


async def _client(n: int, url: str, out: Outcome, stop: asyncio.Event) -> None:
    rnd = random.Random(n)
    mine: list[str] = []  # this client's PUT documents acknowledged and not deleted
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
        i = 0
        while not stop.is_set():
            i += 1
            key = n * 1_000_000 + i
            op = rnd.choice(["check", "batch", "put", "put", "delete", "passages", "site", "mirrors"])
            sent = time.monotonic()
            try:
                if op == "check":
                    doc = f"c{key}"
                    body = {
                        "id": doc,
                        "text": text_of(key),
                        "metadata": {"url": f"https://s{i % 4}.example/{doc}"},
                    }
                    if _judge(out, op, await http.post(f"{WEB}/check", json=body), sent):
                        out.stored[f"{WEB}/documents/{doc}"] = key
                elif op == "batch":
                    docs = [
                        {
                            "id": f"b{key}-{k}",
                            "text": text_of(key * 8 + k),
                            "metadata": {"url": f"https://s{k}.example/{key}"},
                        }
                        for k in range(4)
                    ]
                    if _judge(out, op, await http.post(f"{WEB}/check/batch", json={"documents": docs}), sent):
                        for k in range(4):
                            out.stored[f"{WEB}/documents/b{key}-{k}"] = key * 8 + k
                elif op == "put":
                    path = f"{TEXTS}/documents/p{key}"
                    if _judge(out, op, await http.put(path, json={"text": text_of(key)}), sent):
                        out.stored[path] = key
                        mine.append(path)
                elif op == "delete" and mine:
                    path = mine.pop(rnd.randrange(len(mine)))
                    response = await http.delete(path)
                    if _judge(out, op, response, sent):
                        out.stored.pop(path, None)
                        out.deleted.add(path)
                    elif response.status_code == 503:  # it may or may not have been deleted
                        out.stored.pop(path, None)
                elif op == "passages" and mine:
                    source = out.stored.get(mine[-1], key)
                    _judge(
                        out, op, await http.post(f"{TEXTS}/passages", json={"text": text_of(source)}), sent
                    )
                elif op == "site":
                    _judge(out, op, await http.get(f"{WEB}/sites/s{i % 4}.example"), sent)
                elif op == "mirrors":
                    _judge(out, op, await http.get(f"{WEB}/mirrors"), sent)
            except httpx.HTTPError as error:  # a dropped connection is an answer no client can use
                out.answers[f"{op} {type(error).__name__}"] += 1
                out.broken.append(f"{op}: {error!r}")


async def _killer(
    valkey_pid: Callable[[], int | None], out: Outcome, stop: asyncio.Event, seconds: float, every: float
) -> None:
    started = time.monotonic()
    last: int | None = None
    while time.monotonic() - started + every < seconds:
        await asyncio.sleep(every)
        pid = valkey_pid()
        if pid is None or pid == last:  # the server killed last time is not back yet
            continue
        last = pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        out.kills.append(killed - started)
        while out.ok_sent <= killed and time.monotonic() - killed < 60:  # a 2xx to a request sent after
            await asyncio.sleep(0.02)
        out.recovered_after.append(round(out.ok_at - killed, 3) if out.ok_sent > killed else -1.0)
    await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
    stop.set()


async def _read_back(url: str, out: Outcome) -> list[str]:
    lost: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
        for path in sorted(out.stored):
            got = await http.get(path)
            for _ in range(100):  # the store may be coming back from the last kill
                if got.status_code != 503:
                    break
                await asyncio.sleep(0.1)
                got = await http.get(path)
            if got.status_code != 200:
                lost.append(f"{path}: {got.status_code}")
        for path in sorted(out.deleted):
            if (await http.get(path)).status_code != 404:
                lost.append(f"{path}: deleted, still there")
    return lost


async def stress(
    url: str, valkey_pid: Callable[[], int | None], *, seconds: float, every: float, clients: int = 8
) -> dict[str, Any]:
    """Run the clients and the kills for ``seconds`` against the service at ``url``; the outcome."""
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
        for body in ({"name": "web", "site_field": "url"}, {"name": "texts", "passages": True}):
            created = await http.post("/v1/collections", json=body)
            assert created.status_code in (200, 201), created.text
    out = Outcome()
    stop = asyncio.Event()
    await asyncio.gather(
        _killer(valkey_pid, out, stop, seconds, every), *(_client(n, url, out, stop) for n in range(clients))
    )
    lost = await _read_back(url, out)
    return {
        "seconds": seconds,
        "clients": clients,
        "kills": len(out.kills),
        "recovered_after_s": out.recovered_after,
        "answers": dict(sorted(out.answers.items())),
        "broken": out.broken[:20],
        "broken_count": len(out.broken),
        "acknowledged_stored": len(out.stored),
        "acknowledged_deleted": len(out.deleted),
        "lost": lost[:20],
        "lost_count": len(lost),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--every", type=float, default=12.0, help="seconds between two kills")
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="neardup-faults-") as tmp:
        data_dir = Path(tmp) / "data"
        with socket_port() as port:
            pass
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
        env |= {
            "NEARDUP_STORE_RESTART_BACKOFF": "0.1",
            "NEARDUP_STORE_RESTART_ATTEMPTS": "1000",
            "NEARDUP_STORE_TIMEOUT": "2",
        }
        script = Path(sys.executable).with_name("neardup")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]
        log_path = Path(tmp) / "service.log"
        with open(log_path, "wb") as log:
            service = subprocess.Popen(
                [*command, "serve", "--port", str(port), "--data-dir", str(data_dir)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz").status_code == 200:
                        break
                time.sleep(0.1)

            def valkey_pid() -> int | None:
                with contextlib.suppress(OSError, ValueError):
                    return int((data_dir / "valkey.pid").read_text())
                return None

            result = asyncio.run(
                stress(url, valkey_pid, seconds=args.seconds, every=args.every, clients=args.clients)
            )
            metrics = httpx.get(f"{url}/metrics").text
            result["restarts_metric"] = next(
                (
                    float(line.split()[1])
                    for line in metrics.splitlines()
                    if line.startswith("neardup_store_restarts_total ")
                ),
                None,
            )
            result["unexpected_errors_logged"] = log_path.read_text(errors="replace").count(
                "unexpected error"
            )
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(60)
    print(json.dumps(result, indent=1))


@contextlib.contextmanager
def socket_port() -> Any:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


if __name__ == "__main__":
    main()
