"""Talks to Redis/Valkey: key names (keys.py), server-side scripts (*.lua), the store wrapper, and the
embedded Valkey server used when no Redis is configured; ``ClusterStore`` for a Redis Cluster."""

from app.storage.cluster import ClusterStore
from app.storage.embedded import EmbeddedValkey, LocalCluster
from app.storage.store import RedisStore, Store

__all__ = ["ClusterStore", "EmbeddedValkey", "LocalCluster", "RedisStore", "Store"]
