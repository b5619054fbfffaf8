"""Every Redis key name neardup uses, and the constants of the storage layout (one place, like arq's
constants.py). The Lua scripts get these prefixes as arguments and only append a group number.

Layout of a collection ``c`` created with generation ``g`` (a random token, so a collection dropped and
created again never meets the old one's keys while they are being unlinked)::

    nd:collections          hash  name -> parameters JSON (with "gen")         the registry, tiny
    nd:dropped              hash  "<name>:<gen>" -> shape and time of a dropped generation not yet
                                  swept (DROPPED below)
    nd:{c}:state            hash  gen, seq, docs, sg, bL bS bN, iL iS iN,     one slot per collection
                                  sseq sfree
    nd:c:g:b:<n>            hash  band key (8 raw bytes) -> ordinals (ORDINAL_WIDTH bytes each, big-endian)
    nd:c:g:i:<n>            hash  document id -> ordinal
    nd:c:g:s:<ord // sg>    hash  ord % sg -> stored sketch
    nd:c:g:d:<ord // 120>   hash  ord % 120 -> record "<inserted_ms>:<id bytes>:<id><metadata JSON>"

With passages on (a collection created with ``passages: true``; docs/design.md, "Passages")::

    nd:{c}:state            hash  ... pL pS pN                                  passage index shape
    nd:c:g:f:<n>            string  packed records sorted by (key, ordinal), each the 4-byte key's
                                  bits 8..31 (3 bytes, big-endian: bits 0..7 are the group number's,
                                  the index starting at pL = PASSAGE_INDEX_LEVEL) then one ordinal
                                  (ORDINAL_WIDTH bytes, big-endian); a key's posting is its run of
                                  records, at most POSTING_CAP; linear hashing with PASSAGE_GROUP_TARGET
                                  records per group (pN: records), up to level PASSAGE_INDEX_TOP
    nd:c:g:p:<ord // 120>   hash  ord % 120 -> passage blob (neardup.domain.fingerprints) as the
                                  service sends it (4-byte keys), in parts of PASSAGE_PART bytes, part j
                                  in the field ord % 120 + 120 j, so that a long blob does not turn its
                                  group into a hashtable

check.lua writes a document's blob and postings with its bands (its passage step: ND.PASSAGES where
the server has neardup's module, else ``scripts/_passages_lua.lua``); remove_document (_common.lua) removes
them wherever a document goes (replace, delete, reclaim), in the same script. On a Redis Cluster the
index is a table of families like the band table's (below), written and removed in the cluster
protocol's write rounds; the blob is kept the same way.

The band table is written by check.lua's band step: in Lua (``scripts/_bands_lua.lua``), or by the
``ND.BANDS`` command of neardup's server module where the server has it (``native/valkey/bands.cpp``);
both follow this layout byte for byte.

A collection with a ``site_field`` (docs/design.md "Sites") also has, under the same ``<base>`` =
``nd:<c>:<gen>`` (the scripts derive these names from the record prefix they get; on a Redis Cluster
``<base>`` is ``nd:<c>:<gen>:{<c>}``, the state's slot, see ``SiteKeys``)::

    <base>:sn               hash  site name -> site id (interned; the state's ``sseq`` is the highest
                                  id issued, 1 .. MAX_SITE_ID)
    <base>:si               hash  site id -> site name
    <base>:sp               hash  site id -> pages (live documents of the site); a site whose pages
                                  fall to 0 is forgotten (sn, si, sp, x) and its id freed
    <base>:sf               hash  the free site ids, a stack: n -> the n-th id freed, for n = 1 .. the
                                  state's ``sfree``; a new site takes the top one before a new id
                                  from ``sseq``, so ids are held by the sites held at once, not by
                                  every site ever seen
    <base>:x:<site id>      hash  other site id -> shared (pages of this site with a partner there);
                                  at most SITE_OTHERS fields
    <base>:e:<ord/32>       hash  ord mod 32 -> entry: site id (4 bytes, big-endian), then per partner
                                  its ordinal (ORDINAL_WIDTH bytes) and site id (4 bytes); at most
                                  SITE_PARTNERS
    <base>:lj               hash  the link journal: a checked batch's first ordinal -> per document of a
                                  site with candidates its ordinal (ORDINAL_WIDTH bytes), their number
                                  (4 bytes, big-endian) and their ordinals; deleted when settled (linked)

Ordinals: each insertion takes the next number of ``seq``; it names the document inside the band
table (ORDINAL_WIDTH = 5 bytes instead of the id, 16 times per document: 2^40 - 1 insertions, 3.5
years at 10,000 a second) and is also its first-seen *stamp* on a standalone server, where one script
per batch does append + stamp + read atomically. The scripts get the width in the shared head of
their arguments.

``sg``, the sketches per signature hash, is fixed at creation and kept in the state: as many as fill
a 64 KiB listpack (``sig_group_size``).

On a Redis Cluster (app/storage/cluster.py) the per-collection state carries a hash tag, so the
scripts that take ordinals and stamps see it on one slot; the signature and record groups have no tag
and spread over all shards; the band and id tables are families, each one slot (its own tag), each
grown by linear hashing on the node that holds it (scripts/_cluster_family.lua)::

    nd:{c}:state            hash  gen, seq (ordinals reserved), top (last stamp), docs, low, ttl, maxd,
                                  sg, bG bL (band families, their groups' first
                                  level), iG iL (the same for ids), abandon (ms); pG
                                  (passages), sS sseq sfree (a site_field)
    nd:{c}:pending          hash  ordinal -> ms it was reserved: appended, not stamped yet (in flight)
    nd:{c}:late             hash  ordinal -> stamp, only for ordinals stamped out of order; or 0 for
                                  a dead ordinal (abandoned or fenced: never stamped, never seen)
    nd:c:g:b:{gb<f>}        hash  L, S, N: band family f's level, split pointer and fields
    nd:c:g:b:{gb<f>}<n>     hash  band key -> ordinals, group n of family f (same slot as its shape)
    nd:c:g:i:{gi<f>}        hash  L, S, N of id family f
    nd:c:g:i:{gi<f>}<n>     hash  document id -> ordinal, group n of id family f
    nd:c:g:f:{gf<f>}        hash  L, S, N of passage family f (collections with passages: pG in the state)
    nd:c:g:f:{gf<f>}<n>     hash  fingerprint key (4 bytes) -> ordinals (at most
                                  POSTING_CAP), group n of passage family f
    nd:c:g:p:<ord // 120>   hash  the passage blob as sent, in parts, as on one server
    nd:c:g:{c}:sn ...       the site keys of a collection with a site_field (sS in the state), as on
                            one server, on the state's slot (SiteKeys; docs/design.md "Sites on a
                            cluster")

A cluster check appends its *ordinal* first, then stamps it. Stamps are issued in increasing order;
an ordinal stamped after every smaller one gets the implicit stamp ``ordinal * STAMP_SCALE``, any
other gets ``top + 1`` recorded in ``late``. So ``late`` only holds the few that raced.

Bounded growth: ``low`` is the ordinal below which everything has been reclaimed; expired (``ttl``,
ms) or evicted (ordinal <= seq - ``maxd``) documents are reclaimed from ``low`` upwards, a bounded
number per write: ordinals are handed out in insertion order, so they are the expiry queue.

Band and id tables are split into groups with linear hashing: group = hash mod 2^L, or mod 2^(L+1)
below the split pointer S; a group is split when the table averages more than its target fields per
group. Small listpack hashes cost a few bytes per field (a key costs ~60-90), and a listpack is
scanned linearly (~35 ns a field; HSETNX scans twice), so ~16 fields per band group keeps both memory
and CPU low at any collection size, with no capacity to declare up front. Growing is not free: every
entry is moved about once (half of a group moves at each split, whatever the target), and in Lua a
move costs about as much as the insertion itself. Measured with callgrind on valkey-server over 1,500
documents (``bench/bench_store.py --docs 1500 --callgrind``, and ``--expected-documents 1500`` for a
table sized up front that never splits): 1,156M instructions, 713M without splits, so growing is ~38%
of the server's work per checked document; 16 instead of 32 fields per group cut the total by 6%
(scans of half the length) for ~1.3 more bytes per field.
"""

from __future__ import annotations

from collections.abc import Iterator

NAMESPACE = "nd"
REGISTRY = f"{NAMESPACE}:collections"
#: Generations dropped and not yet swept: "<name>:<gen>" -> "<seq>:<band groups>:<id groups>:<ms>" (the
#: shape names its data keys; ms: when it was dropped, the store's clock). Written with the drop, removed
#: once every data key of the generation is unlinked, so a drop interrupted half way (a killed service,
#: a store that went away) is finished by the next sweep instead of leaking the rest for ever.
DROPPED = f"{NAMESPACE}:dropped"


def dropped_entry(name: str, gen: str) -> str:
    return f"{name}:{gen}"  # names and generations hold no ':'


def dropped_shape(seq: int, band_groups: int, id_groups: int, ms: int) -> str:
    return f"{seq}:{band_groups}:{id_groups}:{ms}"


#: Most ordinals one band bucket keeps. A bucket that full (a band key that hundreds of documents share:
#: a site's template, boilerplate, a page copied thousands of times) takes no more appends, so reading
#: it costs the same whatever the crowd; a document is then found through its other, less crowded
#: buckets, and candidates are ranked by how many of the document's buckets hold them (not by age), so
#: a crowd cannot push a real near-duplicate out of the verified ones. See docs/design.md, "Crowds".
BUCKET_CAP = 256

#: Target fields per band group before a split (see module docstring).
BAND_GROUP_TARGET = 16
#: Target ids per id group: touched once per document, so larger groups cost little CPU.
ID_GROUP_TARGET = 64
#: The fewest signatures a collection groups per hash (so ``data_keys`` names every signature group
#: from ``seq``), and the group of sketches whose length varies or is too long for a listpack.
MIN_SIG_GROUP = 120
#: Most signatures per hash: under the embedded server's hash-max-listpack-entries (256).
MAX_SIG_GROUP = 240
#: A listpack's bytes around its entries (6-byte header, end byte), and the size a signature group
#: fills: 64 KiB is a size class of mimalloc (the embedded server's) and jemalloc (Valkey's own builds;
#: glibc's malloc rounds to 16 bytes), so a full group wastes nothing, where one just over it takes the
#: next class (mimalloc: 80 KiB) and one well under it wastes the difference (482-byte sketches: 120
#: per hash would be 58,567 bytes in a 64 KiB block, 58 bytes per document).
_LISTPACK_OVERHEAD = 7
_SIG_GROUP_BYTES = 65536
#: Longest value the embedded server keeps in a listpack (embedded.LISTPACK_SETTINGS).
_LISTPACK_VALUE_LIMIT = 600


def _listpack_string_entry(size: int) -> int:
    """Bytes of a string of ``size`` bytes in a listpack: encoding header, data, back length."""
    header = 1 if size < 64 else 2 if size < 4096 else 5
    body = header + size
    return body + (1 if body < 128 else 2 if body < 16384 else 3)


def sig_group_size(sketch_bytes: int) -> int:
    """Sketches per signature hash for a new collection whose stored sketches are ``sketch_bytes`` each
    (0: their length varies, as in exact mode): as many as fill a 64 KiB listpack (each field, the slot
    number, takes at most 3 bytes), from MIN_SIG_GROUP to MAX_SIG_GROUP; MIN_SIG_GROUP where the sketch
    is too long for a listpack or varies. The default sketch (482 bytes): 134."""
    if not 0 < sketch_bytes <= _LISTPACK_VALUE_LIMIT:
        return MIN_SIG_GROUP
    fits = (_SIG_GROUP_BYTES - _LISTPACK_OVERHEAD) // (_listpack_string_entry(sketch_bytes) + 3)
    return max(MIN_SIG_GROUP, min(MAX_SIG_GROUP, fits))


#: Records per hash (also under the default hash-max-listpack-entries of 128).
DOC_GROUP = 120
#: Entries (site and partners of one document) per edge hash of a collection with a site_field: fewer
#: than records per hash, because entries are rewritten as partners come and go (a listpack hash is
#: scanned and its value moved at every write: 32 entries of up to 148 bytes keep that short).
EDGE_GROUP = 32
#: Most partners (matched documents of other sites) kept per document: a page copied onto hundreds of
#: sites (a license text, an error page) links to its first SITE_PARTNERS partners, both sides having
#: room; an entry is then at most 4 + 16 * 9 = 148 bytes. Later matches beyond it are not counted.
SITE_PARTNERS = 16
#: In place of a document's count of candidates in a link journal entry: not read yet (a cluster
#: stamp's entry, which its check replaces once it has read them; _common.lua's JOURNAL_UNREAD).
JOURNAL_UNREAD = 2**32 - 1
#: Most other sites one site's ``shared`` hash holds: an edge that would add a new other site to a
#: full hash (on either side) is not recorded. Slots come back when a pair's count falls to 0.
SITE_OTHERS = 256
#: The highest site id: ids are 4 bytes (big-endian) in entries and shared counts (_common.lua's and
#: site_page.hpp's MAX_SITE_ID). Ids of forgotten sites are reused, so this bounds the sites a collection
#: holds at once; a batch that would need one more is refused before any write (CollectionFull).
MAX_SITE_ID = 2**32 - 1
#: Bytes of one ordinal wherever one is stored (band buckets, postings, site entries): 2^40 - 1
#: insertions. The scripts get it in their shared head (store.py), the module's commands as an argument.
ORDINAL_WIDTH = 5
#: Cluster: the implicit stamp of an ordinal stamped in order is ordinal * this. Every stamp must stay
#: exact in a Lua double (below 2^53: 2^52 at the last ordinal), and the gap between two ordinals'
#: stamps is room for ordinals stamped late (``top + 1``).
STAMP_SCALE = 2**12


def max_ordinal(width: int) -> int:
    """The last ordinal that ``width`` bytes hold."""
    return int(2 ** (8 * width)) - 1


#: Passages: most ordinals one posting keeps, blobs per hash; target records per index group (a string
#: of ~2 KB: a search reads and binary-searches one per key of the text, an insertion rewrites one per
#: key of the document), the index's first level (2^8 groups: a record needs no byte of the key the
#: group number gives), and the bytes of one blob part (the embedded server's listpack value limit,
#: _LISTPACK_VALUE_LIMIT). The Lua scripts hold the same numbers (scripts/_common.lua;
#: tests/storage/test_passages_store.py pins them).
POSTING_CAP = 64
PASSAGE_GROUP = 120
PASSAGE_GROUP_TARGET = 128
PASSAGE_INDEX_LEVEL = 8
#: ... and its last level (2^23 groups). It was set by the blob once stored with 24-bit keys, whose
#: groups removal had to name from those bits; blobs now keep the whole 32-bit key and a record keeps its
#: bits 8..31 (the group gives 0..7), so the layout would let the index split on to level 32. Kept at 23
#: (~1 billion records at PASSAGE_GROUP_TARGET a group) until a larger index is measured.
PASSAGE_INDEX_TOP = 23
PASSAGE_PART = _LISTPACK_VALUE_LIMIT
#: Most fingerprint keys one passage search call reads the postings of (passages.lua): a call's server
#: work is at most this many group reads and binary searches and this many x POSTING_CAP ordinals
#: copied, whatever the text's size; a longer text takes more calls.
PASSAGE_KEYS_PER_CALL = 1024


#: A collection's band and id tables on a cluster: CLUSTER_BAND_FAMILIES and CLUSTER_ID_FAMILIES
#: families, each one slot (a hash tag), each growing its own groups by linear hashing to
#: CLUSTER_BAND_TARGET band fields or CLUSTER_ID_TARGET ids per group (docs/design.md, "Groups on a
#: cluster"): a group stays under the nodes' hash-max-listpack-entries (256) as the collection grows,
#: and nothing moves to another slot. Families spread each table over every shard; the targets keep the
#: groups few (a key costs ~60-90 bytes) and short enough to scan (a group just before its split holds
#: about twice the target).
CLUSTER_BAND_FAMILIES = 2**10
CLUSTER_BAND_TARGET = 64
CLUSTER_ID_FAMILIES = 2**8
CLUSTER_ID_TARGET = ID_GROUP_TARGET
#: Cluster, collections with passages: the passage index is a table of families like the band table's
#: (the same families, groups and splits: a posting is a field, its key the fingerprint key's 4 bytes
#: its value the ordinals, at most POSTING_CAP), so it spreads over every shard and
#: grows inside its slots (docs/design.md, "Passages on a cluster").
CLUSTER_PASSAGE_FAMILIES = 2**10


def state(collection: str) -> str:
    """Sequence, counters and table shapes of one collection; the hash tag pins it to one slot."""
    return f"{NAMESPACE}:{{{collection}}}:state"


def pending(collection: str) -> str:
    """Cluster only: ordinals reserved and not stamped yet (same slot as the state)."""
    return f"{NAMESPACE}:{{{collection}}}:pending"


def late(collection: str) -> str:
    """Cluster only: stamps of ordinals stamped out of order (same slot as the state)."""
    return f"{NAMESPACE}:{{{collection}}}:late"


def initial_shape(capacity: int, bands: int) -> tuple[int, int, int, int]:
    """(L, S) of the band table, then of the id table, of a new collection on one server: as many
    groups (2^L + S) as hold their target fields when ``capacity`` documents of ``bands`` bands are in,
    so the tables need no split until then; (0, 0, 0, 0) without a capacity: one group each, grown by
    splitting."""
    if capacity <= 0 or bands <= 0:
        return 0, 0, 0, 0

    def shape(fields: int, target: int) -> tuple[int, int]:
        groups = max(1, -(-fields // target))
        level = groups.bit_length() - 1
        return level, groups - 2**level

    return (*shape(capacity * bands, BAND_GROUP_TARGET), *shape(capacity, ID_GROUP_TARGET))


def cluster_groups(capacity: int, bands: int) -> tuple[int, int, int, int]:
    """(band families, the level their groups start at, id families, the level theirs start at) of a
    new collection on a cluster: with ``capacity`` documents of ``bands`` bands, each family starts
    with as many groups (a power of two) as hold about its target then, so it need not split until
    then; without a capacity, one group per family, grown by splitting."""

    def level(fields: int, families: int, target: int) -> int:
        if capacity <= 0 or bands <= 0:
            return 0
        per_family = -(-fields // (target * families))
        return min(33 - families.bit_length(), max(0, (per_family - 1).bit_length()))

    band, ids = CLUSTER_BAND_FAMILIES, CLUSTER_ID_FAMILIES
    return (
        band,
        level(capacity * bands, band, CLUSTER_BAND_TARGET),
        ids,
        level(capacity, ids, CLUSTER_ID_TARGET),
    )


class SiteKeys:
    """The site keys of a collection under one base (``<base>sn`` ...): ``nd:<c>:<gen>:`` on one
    server, ``nd:<c>:<gen>:{<c>}:`` on a cluster (the state's slot). The scripts derive them from
    the record prefix of their head, ``doc_prefix`` here."""

    def __init__(self, base: str) -> None:
        self.doc_prefix = f"{base}d:"
        self.site_names = f"{base}sn"
        self.site_ids = f"{base}si"
        self.site_pages = f"{base}sp"
        self.site_free = f"{base}sf"
        self.shared_prefix = f"{base}x:"
        self.edge_prefix = f"{base}e:"
        self.link_journal = f"{base}lj"

    def shared(self, site_id: int | str) -> str:
        """Other site id -> shared pages, of one site."""
        return f"{self.shared_prefix}{site_id}"


class CollectionKeys:
    """Key prefixes of one collection generation; the scripts append a group number."""

    def __init__(self, collection: str, gen: str) -> None:
        self.collection = collection
        self.gen = gen
        self.state = state(collection)
        self.pending = pending(collection)
        self.late = late(collection)
        base = f"{NAMESPACE}:{collection}:{gen}"
        self.band_prefix = f"{base}:b:"
        #: Cluster: family f of the band table is the hash ``<band_family_prefix>f}`` (its shape) and
        #: its groups ``<band_family_prefix>f}<group>``; the tag names the generation, the table and f.
        self.band_family_prefix = f"{base}:b:{{{gen}b"
        self.id_prefix = f"{base}:i:"
        #: Cluster: the same for the id table's families.
        self.id_family_prefix = f"{base}:i:{{{gen}i"
        self.sig_prefix = f"{base}:s:"
        self.doc_prefix = f"{base}:d:"
        self.passage_index_prefix = f"{base}:f:"
        #: Cluster: the passage index's families, named like the band table's.
        self.passage_family_prefix = f"{base}:f:{{{gen}f"
        self.passage_blob_prefix = f"{base}:p:"
        #: The passage index's and blobs' keys of this generation (names hold no glob characters).
        self.passage_pattern = f"{base}:[fp]:*"
        # Sites (collections with a site_field): see the module docstring.
        sites = SiteKeys(f"{base}:")
        self.site_names = sites.site_names
        self.site_ids = sites.site_ids
        self.site_pages = sites.site_pages
        self.site_free = sites.site_free
        self.shared_prefix = sites.shared_prefix
        self.edge_prefix = sites.edge_prefix
        self.link_journal = sites.link_journal
        #: Cluster: the same keys on the collection's state slot (tag ``{c}``), under ``<base>:{c}:``,
        #: so every site step is one script on one slot (docs/design.md, "Sites on a cluster").
        self.cluster_sites = SiteKeys(f"{base}:{{{collection}}}:")
        #: Every data key of this generation matches it (names and generations hold no glob characters).
        self.data_pattern = f"{base}:*"

    def band_group(self, n: int) -> str:
        return f"{self.band_prefix}{n}"

    def id_group(self, n: int) -> str:
        return f"{self.id_prefix}{n}"

    def sig_group(self, n: int) -> str:
        return f"{self.sig_prefix}{n}"

    def doc_group(self, n: int) -> str:
        return f"{self.doc_prefix}{n}"

    def shared(self, site_id: int | str) -> str:
        """Other site id -> shared pages, of one site."""
        return f"{self.shared_prefix}{site_id}"

    def edge_group(self, n: int) -> str:
        return f"{self.edge_prefix}{n}"

    def data_keys(
        self, seq: int, band_groups: int, id_groups: int, passage_groups: int = 0, sites: int = 0
    ) -> Iterator[str]:
        """Every name a data key of the generation can have, from its state (no keyspace scan), lazily:
        a table sized by a large capacity hint has millions of names, most of them never written (the
        stores scan for the keys instead when that is cheaper, see ``named_cost``)."""
        yield from (self.band_group(n) for n in range(band_groups))
        yield from (self.id_group(n) for n in range(id_groups))
        # a collection groups at least MIN_SIG_GROUP sketches per hash (its ``sg``), so these names
        # cover its signature groups
        yield from (self.sig_group(n) for n in range(seq // MIN_SIG_GROUP + 1))
        yield from (self.doc_group(n) for n in range(seq // DOC_GROUP + 1))
        if passage_groups:
            yield from (f"{self.passage_index_prefix}{n}" for n in range(passage_groups))
            yield from (f"{self.passage_blob_prefix}{n}" for n in range(seq // PASSAGE_GROUP + 1))
        if sites:  # ``sites``: the highest site id issued (the state's sseq)
            yield from (self.site_names, self.site_ids, self.site_pages, self.site_free, self.link_journal)
            yield from (self.shared(n) for n in range(1, sites + 1))
            yield from (self.edge_group(n) for n in range(seq // EDGE_GROUP + 1))

    @staticmethod
    def named_cost(
        seq: int, band_groups: int, id_groups: int, passage_groups: int = 0, sites: int = 0
    ) -> int:
        """How many names ``data_keys`` yields."""
        passages = passage_groups + seq // PASSAGE_GROUP + 1 if passage_groups else 0
        site_keys = 5 + sites + seq // EDGE_GROUP + 1 if sites else 0
        return band_groups + id_groups + seq // MIN_SIG_GROUP + seq // DOC_GROUP + 2 + passages + site_keys
