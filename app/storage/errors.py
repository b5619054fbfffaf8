"""Errors of the storage layer; the domain turns them into its own (storage never imports the domain).

StoreError
 ├── StoreDown          the server cannot be reached, timed out, is loading, refused (read-only...)
 ├── CollectionMissing  the collection's state is gone (dropped, or never created)
 ├── GenerationChanged  the collection was dropped and created again since the caller read it
 ├── OrdinalsExhausted  the collection has handed out every ordinal: it can take no more insertions
 └── SiteIdsExhausted   every site id is held by a site with pages: it can take no page of a new site
"""

from __future__ import annotations

import re


class StoreError(Exception):
    pass


class StoreDown(StoreError):
    pass


class CollectionMissing(StoreError):
    pass


class GenerationChanged(StoreError):
    pass


class OrdinalsExhausted(StoreError):
    """Permanent: no write to the collection can succeed again (retrying does not help)."""

    @property
    def last(self) -> int | None:
        """The collection's last ordinal, as the script named it ("... exhausted (last N)")."""
        found = re.search(r"\(last (\d+)\)", str(self))
        return int(found.group(1)) if found else None


class SiteIdsExhausted(StoreError):
    """Permanent while the collection holds its sites: a retry cannot help until some lose every page."""


#: The error the scripts answer when a write would need an ordinal past the last one.
EXHAUSTED_MESSAGE = "ordinals of this collection exhausted"
#: The error the scripts (and ND.BANDS) answer when a batch would need a site id and none is left.
SITE_IDS_EXHAUSTED_MESSAGE = "site ids of this collection exhausted"


def permanent(error: Exception) -> StoreError | None:
    """The permanent store error a server's error reply stands for, if it is one."""
    if EXHAUSTED_MESSAGE in str(error):
        return OrdinalsExhausted(str(error))
    if SITE_IDS_EXHAUSTED_MESSAGE in str(error):
        return SiteIdsExhausted(str(error))
    return None


def closed_transport(error: RuntimeError) -> bool:
    """Whether a RuntimeError is the event loop refusing to write to a connection that closed under the
    client (uvloop: "unable to perform operation on <TCPTransport closed=True ...>; the handler is
    closed"): redis-py lets it out while it connects to a server that has just died. A store failure
    (a 503), not a bug; any other RuntimeError stays one."""
    text = str(error)
    return "unable to perform operation on" in text and "closed" in text
