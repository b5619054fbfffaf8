// ND.LINK: the loop of link.lua (_link_lua.lua) in C++. A batch's verified cross-site matches become
// edges between the two documents' site entries and counts of the sites' shared pages
// (docs/design.md "Sites"). From Lua each pair costs several redis.call's of a few microseconds of
// plumbing each; here the whole batch is one command, propagated once (verbatim: deterministic given
// the data and its arguments, the TTL cutoff included). It writes exactly what the Lua loop writes,
// so either path reads what the other wrote.
//
//   ND.LINK 1|2 <edges> <shared> <records> <width> <edge group> <record group> <floor> <cutoff>
//             <max partners> <max others> <pairs>
//     1|2           protocol version: 1 for site layout 1, a site's shared counts a hash (other site id
//                   -> count, decimal); 2 (module version 7) for site layout 2, one string of 8-byte
//                   records (other site id, count: 4 bytes big-endian each; Linker::add_packed)
//     edges         entry key prefix: an ordinal's entry is in edges + decimal(ord / edge group), field
//                   decimal(ord % edge group); an entry is its site id (4 bytes big-endian), then per
//                   partner its ordinal (<width> bytes big-endian) and site id (4 bytes)
//     shared        a site's shared counts are at shared + decimal site id
//     records       record key prefix: an ordinal's record is in records + decimal(ord / record group),
//                   field decimal(ord % record group); it starts with "<inserted ms>:"
//     width         bytes of one ordinal (4 or 5: the collection's `ow`)
//     floor         ordinals at or below it are gone (evicted by max_documents; 0 for none)
//     cutoff        documents inserted before this (Unix ms) have expired; -1 for no retention
//     max partners  most partners an entry keeps (keys.SITE_PARTNERS)
//     max others    most other sites a shared hash keeps (keys.SITE_OTHERS)
//     pairs         per pair the checked document's ordinal and its match's, 8 bytes big-endian each,
//                   in the order to try them
//   -> [edges added, edges refused by a bound]
//
// ND.MATCHLINK (module version 3; format 3 from version 4): the link step check.lua ran at the end of
// the check's own script in the releases before the link journal (docs/design.md "Sites"; since then
// the service's own verified pairs ride the next check to ND.LINK), kept for those scripts during an
// upgrade. It verifies each stored document's candidates itself, the way
// the service does (candidate_scorer: format 2's neardup::bbit_estimate, bbit.hpp; format 3's
// neardup::AdaptiveEstimate, adaptive.hpp; the same code as the service's, float32 then compared as a
// double with index.py's threshold - _EPSILON, sent), orders each document's matches on other sites
// as index.py's _site_links does (best first by estimate then ordinal; the best one on each other
// site first, then the rest; at most <max links>), then runs ND.LINK's loop on all the pairs, in
// order: what a link.lua call after the check does with the pairs the service found.
//
//   ND.MATCHLINK 2 <edges> <shared> <records> <width> <edge group> <record group> <floor> <cutoff>
//                <max partners> <max others> <max links> <least> <format> <fixed> <bins> <bits>
//                <sketches> <documents>
//   ND.MATCHLINK 1 ... <least> <fixed> <bins> <bits> <sketches> <documents>   (module version 3: format 2)
//     least         the least estimate counted (the threshold - index.py's _EPSILON), as Python's repr
//     format        the collection's sketch format: 2 or 3 (protocol 1: 2)
//     fixed, bins, bits   a stored sketch is <fixed> bytes (format tag, band keys) then, format 2, <bins>
//                   bins of <bits> bits as bit planes, or, format 3, its mode byte and <bins> / 4 bytes
//                   (bits 2) (<size> bytes in all)
//     sketches      a pool of sketches, <size> bytes each: the batch's, then its candidates' as the
//                   check read them; one that is not of this size and tag is sent as zero bytes and
//                   skipped, as is a format-3 one of an unknown mode (banding.readable)
//     documents     per document to link: its ordinal (<width> bytes big-endian), its sketch (u32
//                   big-endian, an index into the pool), m (u32), then m candidates: ordinal, sketch
//   -> [edges added, edges refused by a bound, matches on other sites]
//
//   ND.MATCHLINK 3 <edges> ... <least> <format> <fixed> <bins> <bits> <first> <sketches> <flags>
//                <candidates 1> ... <candidates n> <fetched> ...     (module version 6: what check.lua sends)
//     first         the ordinal of the batch's first document: document i's is first + i - 1
//     sketches      the batch's sketches, n of <size> bytes (check.lua's ARGV[15] as sent)
//     flags         n bytes, '1' for a document to link (of a site, with candidates), else '0'
//     candidates i  document i's candidates, <width>-byte big-endian ordinals as ND.BANDS answered them
//                   (every document's: those in [first, first + n) are documents of this batch)
//     fetched       the sketches of the other candidates, <size> bytes each, in the order they first
//                   appear in the candidates (as check.lua read them for its reply; one that is absent or
//                   not of this size sent as zero bytes), in one or more arguments (any number each)
//   The same verification and links as protocol 2 given the same sketches: check.lua builds no pool
//   and no documents' blob in Lua (string building and hashing that cost about as much as the command).
// It writes only through ND.LINK's loop, and is propagated as that ND.LINK command (the pairs it
// chose, 16 bytes each), not verbatim: the sketches stay out of the append-only file.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../adaptive.hpp"
#include "../bbit.hpp"
#include "group.hpp"
#include "module_api.hpp"

namespace neardup::vm {
namespace {

void append_big_endian(std::string& out, uint64_t value, size_t width) {
  for (size_t i = width; i-- > 0;) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// "<digits>:" at the start of a record: its insertion time; 0 otherwise (record_ms in _common.lua).
long long record_ms(const char* v, size_t len) {
  size_t i = 0;
  long long ms = 0;
  while (i < len && v[i] >= '0' && v[i] <= '9') {
    ms = ms * 10 + (v[i] - '0');
    if (ms > (1LL << 53)) return 0;  // no clock gets there: not a record this module wrote
    ++i;
  }
  return i > 0 && i < len && v[i] == ':' ? ms : 0;
}

// The keys one command reads and writes, each opened once (a key opened for reading is opened again
// the first time it is written); all closed when the command ends. Opening a key (its name made, looked up
// in the keyspace) cost more than the hash operation on it, and a command comes back to the same
// entry groups and shared hashes many times.
class KeyCache {
 public:
  explicit KeyCache(VmCtx* ctx) : ctx_(ctx) {}
  ~KeyCache() {
    for (auto& entry : keys_) {
      if (entry.second.key) api.CloseKey(entry.second.key);
      api.FreeString(ctx_, entry.second.name);
    }
  }
  KeyCache(const KeyCache&) = delete;
  KeyCache& operator=(const KeyCache&) = delete;

  // Key number `number` of prefix number `kind` (< 4), whose text is `prefix`.
  VmKey* open(const std::string& prefix, unsigned kind, uint64_t number, bool write) {
    Open& k = keys_[number << 2 | kind];
    if (!k.name) {
      const std::string name = prefix + std::to_string(number);
      k.name = api.CreateString(ctx_, name.data(), name.size());
    } else if (k.write || !write) {
      return k.key;
    }
    if (k.key) api.CloseKey(k.key);
    k.key = api.OpenKey(ctx_, k.name, write ? kRead | kWrite : kRead);
    k.write = write;
    return k.key;
  }

 private:
  struct Open {
    VmString* name = nullptr;
    VmKey* key = nullptr;
    bool write = false;
  };
  VmCtx* ctx_;
  std::unordered_map<uint64_t, Open> keys_;
};

class Linker {
 public:
  Linker(VmCtx* ctx, size_t width) : ctx_(ctx), width_(width), step_(width + 4), keys_(ctx) {}

  std::string edges, shared, records;
  uint64_t edge_group = 32, record_group = 120, floor = 0;
  long long cutoff = -1, max_partners = 16, max_others = 256;
  long long added = 0, refused = 0;
  bool wrote = false, wrong_type = false;
  bool packed = false;  // site layout 2's shared counts (protocol 2)

  // The value of a field, as HGET: false when the key or the field is absent.
  bool get(const std::string& prefix, uint64_t number, uint64_t field, std::string& out) {
    Group group(ctx_, open(prefix, number, false));
    if (group.wrong_type()) wrong_type = true;
    VmString* value = group.get(Decimal(field).text);
    if (!value) return false;
    size_t len = 0;
    const char* v = api.StringPtrLen(value, &len);
    out.assign(v, len);
    api.FreeString(ctx_, value);
    return true;
  }

  void set(const std::string& prefix, uint64_t number, uint64_t field, const std::string& value) {
    Group group(ctx_, open(prefix, number, true));
    if (group.wrong_type()) {
      wrong_type = true;
      return;
    }
    VmString* v = api.CreateString(ctx_, value.data(), value.size());
    group.set(Decimal(field).text, v);
    api.FreeString(ctx_, v);
    wrote = true;
  }

  // A number's decimal text, NUL-terminated, on the stack: a hash field passed as a C string (no
  // module string made and freed per field).
  struct Decimal {
    explicit Decimal(uint64_t n) { *std::to_chars(text, text + sizeof text - 1, n).ptr = '\0'; }
    char text[24];
  };

  // HINCRBY shared(a) b d, then what link.lua does with the answer: a count that falls to 0 goes
  // (shared_add); a new field past max_others goes again and the call answers false (count).
  bool add_shared(uint64_t a, uint64_t b, long long d) {
    if (packed) return add_packed(a, b, d);
    Group group(ctx_, open(shared, a, true));
    if (group.wrong_type()) {
      wrong_type = true;
      return false;
    }
    const Decimal field(b);
    const char* name = field.text;
    long long n = d;
    if (VmString* old = group.get(name)) {
      long long before = 0;
      if (api.StringToLongLong(old, &before) == kOk) n += before;
      api.FreeString(ctx_, old);
    }
    bool kept = true;
    if (n <= 0) {
      group.set(name, kHashDelete);
    } else {
      const std::string text = std::to_string(n);
      VmString* v = api.CreateString(ctx_, text.data(), text.size());
      group.set(name, v);
      api.FreeString(ctx_, v);
      if (d > 0 && n == 1 && static_cast<long long>(api.ValueLength(group.key())) > max_others) {
        group.set(name, kHashDelete);
        kept = false;
      }
    }
    wrote = true;
    return kept;
  }

  // Site layout 2 (protocol 2): shared(a) is one string of 8-byte records, the other site id then the
  // count (4 bytes big-endian each). b's record is found by a scan and its count changed in place; a
  // new one is appended (refused, nothing written, when a has max_others already); one whose count
  // falls to 0 is replaced by the last record. The same bytes as _common.lua's shared_add, and the
  // same allocations (a new record writes the whole value, so the string is never over-allocated).
  bool add_packed(uint64_t a, uint64_t b, long long d) {
    VmKey* key = open(shared, a, true);
    const int type = key ? api.KeyType(key) : kKeyTypeEmpty;
    if (type != kKeyTypeEmpty && type != kKeyTypeString) {
      wrong_type = true;
      return false;
    }
    size_t len = 0;
    char* s = type == kKeyTypeString ? api.StringDMA(key, &len, kRead | kWrite) : nullptr;
    size_t at = len;
    for (size_t q = 0; q + 8 <= len; q += 8) {
      if (big_endian(s + q, 4) == b) {
        at = q;
        break;
      }
    }
    const long long n = d + (at < len ? static_cast<long long>(big_endian(s + at + 4, 4)) : 0);
    if (n > 0 && at < len) {
      put_u32(s + at + 4, static_cast<uint64_t>(n));
    } else if (n > 0) {  // a new value of the exact size: growing a string in place doubles its room
      if (static_cast<long long>(len / 8) >= max_others) return false;
      std::string grown;
      if (len > 0) grown.assign(s, len);
      append_big_endian(grown, b, 4);
      append_big_endian(grown, static_cast<uint64_t>(n), 4);
      VmString* value = api.CreateString(ctx_, grown.data(), grown.size());
      api.StringSet(key, value);
      api.FreeString(ctx_, value);
    } else if (at < len && len == 8) {
      api.DeleteKey(key);
    } else if (at < len) {
      if (at != len - 8) std::memcpy(s + at, s + len - 8, 8);
      api.StringTruncate(key, len - 8);
    } else {
      return true;  // a count below 1 of a site it does not hold: nothing to change
    }
    wrote = true;
    return true;
  }

  static void put_u32(char* p, uint64_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * (3 - i))) & 0xff);
  }

  // An ordinal's entry, read once per command: later reads come from the copy, which set_entry keeps
  // up to date (entries change only through it while the command runs).
  bool entry(uint64_t ord, std::string& out) {
    const auto it = entries_.find(ord);
    if (it != entries_.end()) {
      if (it->second.first) out = it->second.second;
      return it->second.first;
    }
    const bool have = get(edges, ord / edge_group, ord % edge_group, out);
    entries_.emplace(ord, std::make_pair(have, have ? out : std::string()));
    return have;
  }

  void set_entry(uint64_t ord, const std::string& value) {
    set(edges, ord / edge_group, ord % edge_group, value);
    entries_[ord] = std::make_pair(true, value);
  }

  bool live(uint64_t ord) {
    if (ord <= floor) return false;
    if (cutoff < 0) return true;
    std::string record;
    if (!get(records, ord / record_group, ord % record_group, record)) return false;
    return record_ms(record.data(), record.size()) >= cutoff;
  }

  static uint64_t site_of(const std::string& entry) { return big_endian(entry.data(), 4); }

  bool has_site(const std::string& entry, uint64_t site) const {
    for (size_t q = 4 + width_; q + 4 <= entry.size(); q += step_)
      if (big_endian(entry.data() + q, 4) == site) return true;
    return false;
  }

  bool has_partner(const std::string& entry, const char* ordinal) const {
    for (size_t q = 4; q + width_ <= entry.size(); q += step_)
      if (std::memcmp(entry.data() + q, ordinal, width_) == 0) return true;
    return false;
  }

  size_t partners(const std::string& entry) const { return (entry.size() - 4) / step_; }

  // link.lua's loop over the pairs, step for step.
  void run(const char* pairs, size_t len) {
    bool have_cur = false, have_x = false, x_live = false, dirty = false;
    uint64_t cur = 0, a = 0;
    std::string vx, vy, x_bytes, y_bytes;
    std::unordered_set<uint64_t> x_sites;
    const auto flush = [&] {
      if (dirty) set_entry(cur, vx);
      dirty = false;
    };
    for (size_t p = 0; p + 16 <= len && !wrong_type; p += 16) {
      const uint64_t x = big_endian(pairs + p, 8), y = big_endian(pairs + p + 8, 8);
      if (!have_cur || x != cur) {
        flush();
        have_cur = true;
        cur = x;
        have_x = entry(x, vx);
        if (have_x) {
          a = site_of(vx);
          x_sites.clear();
          for (size_t q = 4 + width_; q + 4 <= vx.size(); q += step_) x_sites.insert(big_endian(vx.data() + q, 4));
          x_live = live(x);
          x_bytes.clear();
          append_big_endian(x_bytes, x, width_);
        }
      }
      if (!have_x || !x_live || x == y) continue;
      if (!entry(y, vy) || vy.size() < 4 || site_of(vy) == a) continue;
      y_bytes.clear();
      append_big_endian(y_bytes, y, width_);
      if (has_partner(vx, y_bytes.data()) || !live(y)) continue;
      const uint64_t b = site_of(vy);
      const bool new_x = x_sites.count(b) == 0, new_y = !has_site(vy, a);
      const long long cap = max_partners;
      bool ok = static_cast<long long>(partners(vx)) < cap && static_cast<long long>(partners(vy)) < cap;
      // count first (the increment answers whether the pair of sites is new), undo if a bound says no
      const bool counted_x = ok && new_x && add_shared(a, b, 1);
      if (ok && new_x && !counted_x) ok = false;
      if (ok && new_y && !add_shared(b, a, 1)) {
        ok = false;
        if (counted_x) add_shared(a, b, -1);
      }
      if (ok) {
        vx += y_bytes;
        append_big_endian(vx, b, 4);
        x_sites.insert(b);
        dirty = true;
        vy += x_bytes;
        append_big_endian(vy, a, 4);
        set_entry(y, vy);
        ++added;
      } else {
        ++refused;
      }
    }
    if (!wrong_type) flush();
  }

 private:
  // One of the three prefixes' keys, through the command's KeyCache. Entry groups and shared counts
  // are opened for writing at once (the loop writes most of those it reads: one lookup, not two);
  // records are only read.
  VmKey* open(const std::string& prefix, uint64_t number, bool write) {
    const unsigned kind = &prefix == &edges ? 0 : &prefix == &shared ? 1 : 2;
    return keys_.open(prefix, kind, number, write || kind != 2);
  }

  VmCtx* ctx_;
  size_t width_, step_;
  KeyCache keys_;
  std::unordered_map<uint64_t, std::pair<bool, std::string>> entries_;
};

bool integer(VmString* s, long long lo, long long hi, long long& out) {
  return api.StringToLongLong(s, &out) == kOk && out >= lo && out <= hi;
}

std::string text_of(VmString* s) {
  size_t len = 0;
  const char* p = api.StringPtrLen(s, &len);
  return {p, len};
}

// The arguments ND.LINK and ND.MATCHLINK share, argv[2..11]: the edge, shared-count and record key
// prefixes, the ordinal width, the edge and record group sizes, the eviction floor, the TTL cutoff and
// the bounds per document and per site.
struct LinkArgs {
  long long width = 0, edge_group = 0, record_group = 0, floor = 0, cutoff = 0, max_partners = 0, max_others = 0;

  // False when a number is out of range.
  bool read(VmString** argv) {
    return integer(argv[5], 4, 5, width) && integer(argv[6], 1, 1LL << 20, edge_group) &&
           integer(argv[7], 1, 1LL << 20, record_group) && integer(argv[8], 0, 1LL << 40, floor) &&
           integer(argv[9], -1, 1LL << 53, cutoff) && integer(argv[10], 0, 1LL << 20, max_partners) &&
           integer(argv[11], 0, 1LL << 30, max_others);
  }
  void apply(Linker& linker, VmString** argv) const {
    linker.edges = text_of(argv[2]);
    linker.shared = text_of(argv[3]);
    linker.records = text_of(argv[4]);
    linker.edge_group = static_cast<uint64_t>(edge_group);
    linker.record_group = static_cast<uint64_t>(record_group);
    linker.floor = static_cast<uint64_t>(floor);
    linker.cutoff = cutoff;
    linker.max_partners = max_partners;
    linker.max_others = max_others;
  }
};

int link_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 13) return api.WrongArity(ctx);
  const std::string protocol = text_of(argv[1]);
  if (protocol != "1" && protocol != "2") return api.ReplyWithError(ctx, "ERR ND.LINK: unknown protocol version");
  LinkArgs args;
  if (!args.read(argv))
    return api.ReplyWithError(ctx, "ERR ND.LINK: width, groups, floor, cutoff or bounds out of range");
  size_t len = 0;
  const char* pairs = api.StringPtrLen(argv[12], &len);
  if (len % 16 != 0) return api.ReplyWithError(ctx, "ERR ND.LINK: pairs are 16 bytes each");
  Linker linker(ctx, static_cast<size_t>(args.width));
  args.apply(linker, argv);
  linker.packed = protocol == "2";
  linker.run(pairs, len);
  // Propagated only when it wrote: a replay runs on the same data, so it writes the same.
  if (linker.wrote) api.ReplicateVerbatim(ctx);
  if (linker.wrong_type) return api.ReplyWithError(ctx, "WRONGTYPE ND.LINK: a site key holds a non-hash value");
  api.ReplyWithArray(ctx, 2);
  api.ReplyWithLongLong(ctx, linker.added);
  api.ReplyWithLongLong(ctx, linker.refused);
  return kOk;
}

uint32_t u32(const char* p) { return static_cast<uint32_t>(big_endian(p, 4)); }

// The collection's stored sketches as the service reads them: which ones it verifies with
// (banding.readable: its format's tag and size, and in format 3 a known mode byte) and its estimate
// of a pair (candidate_scorer: format 2's bbit_similarity, format 3's adaptive_similarity), from the
// same headers as the service's.
class Verifier {
 public:
  long long format = 2, fixed = 0, bins = 0, bits = 0;

  // False when the layout is not one the service stores: bins a multiple of 64 from 64 to 4096, format
  // 3 with 2-bit bins.
  bool valid() const {
    return (format == 2 || (format == 3 && bits == 2)) && bins >= 64 && bins <= 4096 && bins % 64 == 0;
  }
  size_t size() const {
    const size_t f = static_cast<size_t>(fixed), b = static_cast<size_t>(bins);
    return format == 3 ? f + 1 + b / 4 : f + b * static_cast<size_t>(bits) / 8;
  }
  bool readable(const char* sketch) const {
    if (static_cast<unsigned char>(sketch[0]) != format) return false;
    if (format == 2) return true;
    const size_t mode = static_cast<unsigned char>(sketch[fixed]);
    return mode == 0 || (mode >= kAdaptiveMinWidth && mode <= kAdaptiveMaxWidth);
  }

  // The estimates of one document's sketch q with others, one pair at a time.
  class Pairs {
   public:
    Pairs(const Verifier& v, const char* q)
        : v_(v), q_(reinterpret_cast<const uint8_t*>(q) + v.fixed),
          adaptive_(q_, static_cast<size_t>(v.bins), v.decoded_[0], v.decoded_[1]) {}
    float operator()(const char* sketch) {
      const uint8_t* c = reinterpret_cast<const uint8_t*>(sketch) + v_.fixed;
      if (v_.format == 3) return adaptive_(c);
      return bbit_estimate(q_, c, static_cast<size_t>(v_.bins), static_cast<int>(v_.bits));
    }

   private:
    const Verifier& v_;
    const uint8_t* q_;
    AdaptiveEstimate adaptive_;
  };

 private:
  // Format 3's decoding scratch: two sketches of up to 4096 bins (~82 KB), taken once per command.
  std::unique_ptr<AdaptiveDecoded[]> decoded_{new AdaptiveDecoded[2]};
};

// match_link_command's check of the pool and documents' layout, before anything is read: an error
// writes nothing.
bool documents_fit(const char* docs, size_t docs_len, size_t w, size_t sketches) {
  for (size_t p = 0; p < docs_len;) {
    if (p + w + 8 > docs_len || u32(docs + p + w) >= sketches) return false;
    const size_t m = u32(docs + p + w + 4);
    p += w + 8;
    if (m > (docs_len - p) / (w + 4)) return false;
    for (size_t k = 0; k < m; ++k)
      if (u32(docs + p + k * (w + 4) + w) >= sketches) return false;
    p += m * (w + 4);
  }
  return true;
}

int match_link_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc < 2) return api.WrongArity(ctx);
  // Protocol 1 (module version 3): format 2 sketches, no <format>; protocol 2 (version 4): <format>
  // after <least>; protocol 3 (version 6): protocol 2's layout, then the stored sketches' prefix and
  // group, the batch's first ordinal, its sketches and each document's candidates as ND.BANDS gave them.
  const std::string protocol = text_of(argv[1]);
  if (protocol != "1" && protocol != "2" && protocol != "3")
    return api.ReplyWithError(ctx, "ERR ND.MATCHLINK: unknown protocol version");
  const bool batch = protocol == "3";
  const int at = protocol == "1" ? 14 : 15;  // argv[at]: <fixed>
  if (batch ? argc < at + 6 : argc != at + 5) return api.WrongArity(ctx);
  LinkArgs args;
  Verifier verifier;
  long long max_links = 0, first = 0;
  if (!args.read(argv) || !integer(argv[12], 0, 1LL << 20, max_links) ||
      (at == 15 && !integer(argv[14], 2, 3, verifier.format)) || !integer(argv[at], 1, 1LL << 20, verifier.fixed) ||
      !integer(argv[at + 1], 64, 4096, verifier.bins) || !integer(argv[at + 2], 1, 8, verifier.bits) ||
      !verifier.valid() || (batch && !integer(argv[at + 3], 0, 1LL << 40, first)))
    return api.ReplyWithError(ctx, "ERR ND.MATCHLINK: an integer argument is out of range");
  const std::string least_text = text_of(argv[13]);
  char* end = nullptr;
  const double least = std::strtod(least_text.c_str(), &end);
  if (least_text.empty() || end != least_text.c_str() + least_text.size())
    return api.ReplyWithError(ctx, "ERR ND.MATCHLINK: the least estimate is not a number");
  const size_t w = static_cast<size_t>(args.width);
  const size_t size = verifier.size();
  size_t pool_len = 0, docs_len = 0, n = 0;
  const char* pool = api.StringPtrLen(argv[batch ? at + 4 : at + 3], &pool_len);
  const char* docs = api.StringPtrLen(argv[at + 4 + (batch ? 1 : 0)], &docs_len);  // protocol 3: <flags>
  // Protocol 3: each fetched sketch, by candidate ordinal.
  std::unordered_map<uint64_t, const char*> fetched;
  if (batch) {
    n = docs_len;
    const uint64_t base = static_cast<uint64_t>(first);
    bool fits = pool_len == n * size && static_cast<size_t>(argc - at - 6) >= n;
    std::vector<uint64_t> order;
    for (size_t i = 0; i < n && fits; ++i) {
      size_t len = 0;
      const char* cands = api.StringPtrLen(argv[at + 6 + static_cast<int>(i)], &len);
      fits = len % w == 0 && (docs[i] == '0' || docs[i] == '1');
      for (size_t k = 0; fits && k < len; k += w) {
        const uint64_t c = big_endian(cands + k, w);
        if (c >= base && c - base < n) continue;
        if (fetched.emplace(c, nullptr).second) order.push_back(c);
      }
    }
    // the fetched sketches, in order, over the arguments after the candidates
    size_t next = 0;
    for (int a = at + 6 + static_cast<int>(n); a < argc && fits; ++a) {
      size_t len = 0;
      const char* sketches = api.StringPtrLen(argv[a], &len);
      fits = len % size == 0;
      for (size_t off = 0; fits && off < len; off += size) {
        if (next == order.size()) {
          fits = false;
          break;
        }
        fetched[order[next++]] = sketches + off;
      }
    }
    if (!fits || next != order.size())
      return api.ReplyWithError(ctx, "ERR ND.MATCHLINK: <sketches> are the batch's, <size> bytes each; <flags> "
                                     "n of 0 or 1; candidates are <width>-byte ordinals; one fetched sketch "
                                     "of <size> bytes per other candidate");
  } else if (pool_len % size != 0 || !documents_fit(docs, docs_len, w, pool_len / size)) {
    return api.ReplyWithError(ctx, "ERR ND.MATCHLINK: sketches are <size> bytes each; documents are "
                                   "<ordinal> <sketch> <m> then m <ordinal> <sketch>, sketches in range");
  }
  Linker linker(ctx, w);
  args.apply(linker, argv);
  std::string vx, vc, pairs;
  std::vector<std::pair<std::pair<float, uint64_t>, uint64_t>> matches;  // (estimate, ordinal), site
  std::unordered_set<uint64_t> seen;
  long long found = 0;
  // One document: x with sketch q, m candidates; candidate(k, c) gives the k-th one's ordinal and its
  // sketch (nullptr for none).
  const auto verify = [&](uint64_t x, const char* q, size_t m, const auto& candidate) {
    if (!verifier.readable(q) || !linker.entry(x, vx) || vx.size() < 4) return;
    const uint64_t a = Linker::site_of(vx);
    Verifier::Pairs estimate(verifier, q);
    matches.clear();
    for (size_t k = 0; k < m; ++k) {
      uint64_t c = 0;
      const char* sig = candidate(k, c);
      if (c == x || c <= linker.floor) continue;
      if (!sig || !verifier.readable(sig)) continue;  // banding.readable: only sketches the service verifies with
      // index.py's test first (most candidates of a mirror's page are matches, on other sites; each
      // test is cheaper than the entry's read)
      const float e = estimate(sig);
      if (static_cast<double>(e) < least) continue;
      if (!linker.entry(c, vc) || vc.size() < 4) continue;
      const uint64_t b = Linker::site_of(vc);
      if (b == a || !linker.live(c)) continue;
      matches.push_back({{e, c}, b});
    }
    found += static_cast<long long>(matches.size());
    // _site_links: best first (estimate, then the smaller ordinal), the best one on each other site
    // first, then the rest; at most <max links>
    std::sort(matches.begin(), matches.end(), [](const auto& l, const auto& r) {
      if (l.first.first != r.first.first) return l.first.first > r.first.first;
      return l.first.second < r.first.second;
    });
    long long taken = 0;
    const auto take = [&](uint64_t c) {
      if (taken++ >= max_links) return;
      append_big_endian(pairs, x, 8);
      append_big_endian(pairs, c, 8);
    };
    seen.clear();
    for (const auto& match : matches)
      if (seen.insert(match.second).second) take(match.first.second);
    seen.clear();
    for (const auto& match : matches)
      if (!seen.insert(match.second).second) take(match.first.second);  // the best one of its site: above
  };
  // Every document is verified first, then every pair linked, in order: what a link.lua call after
  // the check does with the service's pairs (verification reads only sites, records and sketches,
  // which linking does not change).
  if (batch) {
    const uint64_t base = static_cast<uint64_t>(first);
    for (size_t i = 0; i < n && !linker.wrong_type; ++i) {
      if (docs[i] != '1') continue;
      size_t len = 0;
      const char* cands = api.StringPtrLen(argv[at + 6 + static_cast<int>(i)], &len);
      verify(base + i, pool + i * size, len / w, [&](size_t k, uint64_t& c) -> const char* {
        c = big_endian(cands + k * w, w);
        if (c >= base && c - base < n) return pool + (c - base) * size;  // a document of this batch
        return fetched.at(c);
      });
    }
  } else {
    for (size_t p = 0; p < docs_len && !linker.wrong_type;) {
      const uint64_t x = big_endian(docs + p, w);
      const char* q = pool + static_cast<size_t>(u32(docs + p + w)) * size;
      const size_t m = u32(docs + p + w + 4);
      const char* cands = docs + p + w + 8;
      p += w + 8 + m * (w + 4);
      verify(x, q, m, [&](size_t k, uint64_t& c) -> const char* {
        c = big_endian(cands + k * (w + 4), w);
        return pool + static_cast<size_t>(u32(cands + k * (w + 4) + w)) * size;
      });
    }
  }
  if (linker.wrong_type) return api.ReplyWithError(ctx, "WRONGTYPE ND.MATCHLINK: a site key holds a non-hash value");
  linker.run(pairs.data(), pairs.size());
  if (linker.wrote) {  // as ND.LINK of these pairs: the same writes on the same data
    // the link arguments are this command's own argv[2..11], in the same places
    VmString* link[12];
    link[0] = api.CreateString(ctx, "1", 1);
    for (int i = 1; i <= 10; ++i) link[i] = argv[i + 1];
    link[11] = api.CreateString(ctx, pairs.data(), pairs.size());
    api.Replicate(ctx, "nd.link", "v", link, static_cast<size_t>(12));
    api.FreeString(ctx, link[0]);
    api.FreeString(ctx, link[11]);
  }
  if (linker.wrong_type) return api.ReplyWithError(ctx, "WRONGTYPE ND.MATCHLINK: a site key holds a non-hash value");
  api.ReplyWithArray(ctx, 3);
  api.ReplyWithLongLong(ctx, linker.added);
  api.ReplyWithLongLong(ctx, linker.refused);
  api.ReplyWithLongLong(ctx, found);
  return kOk;
}

}  // namespace

int register_site_commands(VmCtx* ctx) {
  if (api.CreateCommand(ctx, "nd.link", link_command, "write deny-oom", 0, 0, 0) != kOk) return kErr;
  return api.CreateCommand(ctx, "nd.matchlink", match_link_command, "write deny-oom", 0, 0, 0);
}

}  // namespace neardup::vm
