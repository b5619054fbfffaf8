// ND.LINK: the loop of link.lua (_link_lua.lua) in C++. A batch's verified cross-site matches become
// edges between the two documents' site entries and counts of the sites' shared pages
// (docs/design.md "Sites"). From Lua each pair costs several redis.call's of a few microseconds of
// plumbing each; here the whole batch is one command, propagated once (verbatim: deterministic given
// the data and its arguments, the TTL cutoff included). It writes exactly what the Lua loop writes,
// so either path reads what the other wrote.
//
//   ND.LINK 1 <edges> <shared> <records> <edge group> <record group> <floor> <cutoff> <max partners>
//           <max others> <pairs>
//     1             protocol version
//     edges         entry key prefix: an ordinal's entry is in edges + decimal(ord / edge group), field
//                   decimal(ord % edge group); an entry is its site id (4 bytes big-endian), then per
//                   partner its ordinal (5 bytes big-endian) and site id (4 bytes)
//     shared        a site's shared counts are at shared + decimal site id: one string of 8-byte
//                   records (other site id, count: 4 bytes big-endian each; Linker::add_shared)
//     records       record key prefix: an ordinal's record is in records + decimal(ord / record group),
//                   field decimal(ord % record group); it starts with "<inserted ms>:"
//     floor         ordinals at or below it are gone (evicted by max_documents; 0 for none)
//     cutoff        documents inserted before this (Unix ms) have expired; -1 for no retention
//     max partners  most partners an entry keeps (keys.SITE_PARTNERS)
//     max others    most other sites a site's shared counts hold (keys.SITE_OTHERS)
//     pairs         per pair the checked document's ordinal and its match's, 8 bytes big-endian each,
//                   in the order to try them
//   -> [edges added, edges refused by a bound]
//
// On a cluster node (a collection's site keys are on its state's slot: docs/design.md, "Sites on a
// cluster") it first asks the server's routing about every key it may touch, before writing anything
// (Linker::served_here), and answers an error naming "a non local key" where one is not served here;
// it takes no cutoff there (-1: the records are on other slots).
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

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
// in the keyspace) cost more than the operation on it, and a command comes back to the same
// entry groups and shared counts many times.
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
  explicit Linker(VmCtx* ctx) : ctx_(ctx), keys_(ctx) {}

  std::string edges, shared, records;
  uint64_t edge_group = 32, record_group = 120, floor = 0;
  long long cutoff = -1, max_partners = 16, max_others = 256;
  long long added = 0, refused = 0;
  bool wrote = false, wrong_type = false;

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

  // Adds d to site a's shared count of site b; false when a bound refused it (nothing written). shared(a)
  // is one string of 8-byte records, the other site id then the count (4 bytes big-endian each). b's
  // record is found by a scan and its count changed in place; a new one is appended (refused when a
  // has max_others already); one whose count falls to 0 is replaced by the last record. The same bytes
  // as _common.lua's shared_add, and the same allocations (a new record writes the whole value, so the
  // string is never over-allocated).
  bool add_shared(uint64_t a, uint64_t b, long long d) {
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
    for (size_t q = 4 + kOrdinal; q + 4 <= entry.size(); q += kStep)
      if (big_endian(entry.data() + q, 4) == site) return true;
    return false;
  }

  bool has_partner(const std::string& entry, const char* ordinal) const {
    for (size_t q = 4; q + kOrdinal <= entry.size(); q += kStep)
      if (std::memcmp(entry.data() + q, ordinal, kOrdinal) == 0) return true;
    return false;
  }

  size_t partners(const std::string& entry) const { return (entry.size() - 4) / kStep; }

  // On a cluster node (docs/design.md, "Sites on a cluster"): whether this node serves every key the
  // loop over `pairs` may touch, asked before anything is written, as ND.BUCKETS asks: the entry groups
  // of the pairs' ordinals, then (their entries read) the shared counts of those entries' sites. A
  // collection's site keys share its state's slot, so on a node that serves it they all are; where the
  // slot moved, or is migrating and a key is gone from here, `why` holds the server's refusal.
  bool served_here(const char* pairs, size_t len, std::string& why) {
    std::unordered_set<uint64_t> ordinals, groups, sites;
    for (size_t p = 0; p + 16 <= len; p += 16) {
      ordinals.insert(big_endian(pairs + p, 8));
      ordinals.insert(big_endian(pairs + p + 8, 8));
    }
    for (const uint64_t ord : ordinals) groups.insert(ord / edge_group);
    SlotRouting routing(ctx_, groups.size() + 2 * ordinals.size());
    const auto served = [&](const std::string& prefix, uint64_t number) {
      VmKey* key = open(prefix, number, false);
      const bool here = key && api.KeyType(key) != kKeyTypeEmpty;
      const std::string name = prefix + std::to_string(number);
      VmString* text = api.CreateString(ctx_, name.data(), name.size());
      const bool ok = routing.served(text, here, why);
      api.FreeString(ctx_, text);
      return ok;
    };
    for (const uint64_t g : groups)
      if (!served(edges, g)) return false;
    std::string value;
    for (const uint64_t ord : ordinals)
      if (entry(ord, value) && value.size() >= 4) sites.insert(site_of(value));
    for (const uint64_t site : sites)
      if (!served(shared, site)) return false;
    return true;
  }

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
          for (size_t q = 4 + kOrdinal; q + 4 <= vx.size(); q += kStep) x_sites.insert(big_endian(vx.data() + q, 4));
          x_live = live(x);
          x_bytes.clear();
          append_big_endian(x_bytes, x, kOrdinal);
        }
      }
      if (!have_x || !x_live || x == y) continue;
      if (!entry(y, vy) || vy.size() < 4 || site_of(vy) == a) continue;
      y_bytes.clear();
      append_big_endian(y_bytes, y, kOrdinal);
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

  static constexpr size_t kStep = kOrdinal + 4;  // a partner in an entry: its ordinal and site id

  VmCtx* ctx_;
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

int link_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 12) return api.WrongArity(ctx);
  if (text_of(argv[1]) != "1") return api.ReplyWithError(ctx, "ERR ND.LINK: unknown protocol version");
  long long edge_group = 0, record_group = 0, floor = 0, cutoff = 0, max_partners = 0, max_others = 0;
  if (!integer(argv[5], 1, 1LL << 20, edge_group) || !integer(argv[6], 1, 1LL << 20, record_group) ||
      !integer(argv[7], 0, 1LL << 40, floor) || !integer(argv[8], -1, 1LL << 53, cutoff) ||
      !integer(argv[9], 0, 1LL << 20, max_partners) || !integer(argv[10], 0, 1LL << 30, max_others))
    return api.ReplyWithError(ctx, "ERR ND.LINK: groups, floor, cutoff or bounds out of range");
  size_t len = 0;
  const char* pairs = api.StringPtrLen(argv[11], &len);
  if (len % 16 != 0) return api.ReplyWithError(ctx, "ERR ND.LINK: pairs are 16 bytes each");
  Linker linker(ctx);
  linker.edges = text_of(argv[2]);
  linker.shared = text_of(argv[3]);
  linker.records = text_of(argv[4]);
  linker.edge_group = static_cast<uint64_t>(edge_group);
  linker.record_group = static_cast<uint64_t>(record_group);
  linker.floor = static_cast<uint64_t>(floor);
  linker.cutoff = cutoff;
  linker.max_partners = max_partners;
  linker.max_others = max_others;
  // On a cluster node the keys are asked about first; the records are on other slots, so no cutoff.
  const bool cluster = (api.GetContextFlags(ctx) & kCtxFlagsCluster) != 0 &&
                       !(api.MustObeyClient && api.MustObeyClient(ctx));
  if (cluster) {
    if (cutoff >= 0)
      return api.ReplyWithError(ctx, "ERR ND.LINK on a cluster node takes no cutoff: records are elsewhere");
    std::string why;
    if (!linker.served_here(pairs, len, why)) {
      const std::string message = "ERR a site key of this call is a non local key: " + why;
      return api.ReplyWithError(ctx, message.c_str());
    }
  }
  linker.run(pairs, len);
  // Propagated only when it wrote: a replay runs on the same data, so it writes the same.
  if (linker.wrote) api.ReplicateVerbatim(ctx);
  if (linker.wrong_type)
    return api.ReplyWithError(ctx, "WRONGTYPE ND.LINK: a site key holds a value of another type");
  api.ReplyWithArray(ctx, 2);
  api.ReplyWithLongLong(ctx, linker.added);
  api.ReplyWithLongLong(ctx, linker.refused);
  return kOk;
}

}  // namespace

int register_site_commands(VmCtx* ctx) {
  return api.CreateCommand(ctx, "nd.link", link_command, "write deny-oom", 0, 0, 0);
}

}  // namespace neardup::vm
