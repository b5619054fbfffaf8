"""Talks to Redis/Valkey: key names (keys.py), server-side scripts (*.lua), the store wrapper, and the
embedded Valkey server used when no Redis is configured; ``ClusterStore`` for a Redis Cluster."""

from neardup.storage.cluster import ClusterStore
from neardup.storage.embedded import EmbeddedValkey
from neardup.storage.lock import DataDirInUse
from neardup.storage.store import RedisStore, Store

__all__ = ["ClusterStore", "DataDirInUse", "EmbeddedValkey", "RedisStore", "Store"]
