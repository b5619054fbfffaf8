"""Store wrapper around redis.asyncio (placeholder while the scripts are written)."""

from __future__ import annotations

import redis.asyncio as aioredis


class RedisStore:
    """Wraps one ``redis.asyncio.Redis`` client; build with :meth:`from_url`, close with :meth:`close`."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 5.0, max_connections: int = 64) -> RedisStore:
        """``redis://``, ``rediss://`` or ``unix://`` URL; ``timeout`` bounds connect and each command."""
        client = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, max_connections=max_connections
        )
        return cls(client)

    async def close(self) -> None:
        await self._client.aclose()
