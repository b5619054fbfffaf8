"""Talks to Redis/Valkey: key names (keys.py), server-side scripts (*.lua), the store wrapper, and the
embedded Valkey server used when no Redis is configured."""

from app.storage.embedded import EmbeddedValkey
from app.storage.store import RedisStore

__all__ = ["EmbeddedValkey", "RedisStore"]
