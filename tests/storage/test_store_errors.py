"""Every store failure leaves a store call as StoreDown (a 503): also the event loop's refusal to write to
a connection that closed under the client, which redis-py lets out as a RuntimeError while it connects to
a server that has just died (seen under tests/e2e/test_store_faults.py's kills). Any other RuntimeError
is a bug and stays one."""

from __future__ import annotations

import pytest

from neardup.storage import RedisStore
from neardup.storage.errors import StoreDown, closed_transport

pytestmark = pytest.mark.anyio

CLOSED = (
    "unable to perform operation on <TCPTransport closed=True reading=False 0x55ee>; the handler is closed"
)


async def test_a_closed_transport_is_store_down_and_other_runtime_errors_are_not() -> None:
    store = RedisStore.from_url("redis://127.0.0.1:1/0", timeout=1.0)
    try:
        with pytest.raises(StoreDown, match="closed under the client"):
            async with store._guard():
                raise RuntimeError(CLOSED)
        with pytest.raises(RuntimeError, match="a bug"):
            async with store._guard():
                raise RuntimeError("a bug")
    finally:
        await store.close()
    assert closed_transport(RuntimeError(CLOSED)) and not closed_transport(RuntimeError("closed"))
