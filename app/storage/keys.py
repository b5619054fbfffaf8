"""Every Redis key name neardup uses, and the constants of the storage layout (one place, like arq's
constants.py). The Lua scripts get these prefixes as arguments and only append a group number.

Layout of a collection ``c`` created with generation ``g`` (a random token, so a collection dropped and
created again never meets the old one's keys while they are being unlinked)::

    nd:collections          hash  name -> parameters JSON (with "gen")         the registry, tiny
    nd:{c}:state            hash  gen, seq, docs, bL bS bN, iL iS iN           one slot per collection
    nd:c:g:b:<n>            hash  band key (8 raw bytes) -> ordinals (4 bytes each, big-endian)
    nd:c:g:i:<n>            hash  document id -> ordinal
    nd:c:g:s:<ord // 120>   hash  ord % 120 -> signature (4 * num_perm raw bytes)
    nd:c:g:d:<ord // 120>   hash  ord % 120 -> record "<inserted_ms>:<id bytes>:<id><metadata JSON>"

Ordinals: each insertion takes the next number of ``seq``; it names the document inside the band
table (4 bytes instead of the id, 16 times per document) and is also its first-seen *stamp* on a
standalone server, where one script per batch does append + stamp + read atomically. The cluster
version (issue 4) keeps ``seq`` on the ``{c}`` slot and adds a stamp map there; the band, id,
signature and record groups carry no hash tag so they spread over the cluster's slots.

Band and id tables are split into groups with linear hashing: group = hash mod 2^L, or mod 2^(L+1)
below the split pointer S; a group is split when the table averages more than its target fields per
group. Small listpack hashes cost a few bytes per field (a key costs ~60-90), and a listpack is
scanned linearly (~35 ns a field), so ~32 fields per band group keeps both memory and CPU low at any
collection size, with no capacity to declare up front.
"""

from __future__ import annotations

NAMESPACE = "nd"
REGISTRY = f"{NAMESPACE}:collections"

#: Target fields per band group before a split (see module docstring).
BAND_GROUP_TARGET = 32
#: Target ids per id group: touched once per document, so larger groups cost little CPU.
ID_GROUP_TARGET = 64
#: Signatures per hash: 120 x (512 B + ~6) stays under 64 KB, where allocators start rounding up.
SIG_GROUP = 120
#: Records per hash (also under the default hash-max-listpack-entries of 128).
DOC_GROUP = 120
#: Bytes of one ordinal inside a band value: 2^32 insertions per collection.
ORDINAL_BYTES = 4
MAX_ORDINAL = 2**32 - 1


def state(collection: str) -> str:
    """Sequence, counters and table shapes of one collection; the hash tag pins it to one slot."""
    return f"{NAMESPACE}:{{{collection}}}:state"


class CollectionKeys:
    """Key prefixes of one collection generation; the scripts append a group number."""

    def __init__(self, collection: str, gen: str) -> None:
        self.collection = collection
        self.gen = gen
        self.state = state(collection)
        base = f"{NAMESPACE}:{collection}:{gen}"
        self.band_prefix = f"{base}:b:"
        self.id_prefix = f"{base}:i:"
        self.sig_prefix = f"{base}:s:"
        self.doc_prefix = f"{base}:d:"

    def band_group(self, n: int) -> str:
        return f"{self.band_prefix}{n}"

    def id_group(self, n: int) -> str:
        return f"{self.id_prefix}{n}"

    def sig_group(self, n: int) -> str:
        return f"{self.sig_prefix}{n}"

    def doc_group(self, n: int) -> str:
        return f"{self.doc_prefix}{n}"

    def data_keys(self, seq: int, band_groups: int, id_groups: int) -> list[str]:
        """All data keys of the generation, from its state (no keyspace scan): for dropping it."""
        keys = [self.band_group(n) for n in range(band_groups)]
        keys += [self.id_group(n) for n in range(id_groups)]
        keys += [self.sig_group(n) for n in range(seq // SIG_GROUP + 1)]
        keys += [self.doc_group(n) for n in range(seq // DOC_GROUP + 1)]
        return keys
