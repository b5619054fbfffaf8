// neardup's Valkey module: ND.BANDS, the band-table step of check.lua done in C++.
//
// The check script's hottest loop appends a document's ordinal to each of its band buckets, reads the
// ordinals already there, and splits groups of the table (linear hashing). From Lua each band costs one
// to three redis.call's of several thousand instructions of plumbing each, plus one propagated
// command per write; here the whole loop is one command, propagated once to the append-only file
// (verbatim: it is deterministic given the data, so replaying it rebuilds the same hashes). The data
// layout is exactly the one the Lua path writes (app/storage/keys.py), so a collection written by
// either path is read by the other and the embedded server and an external one store the same bytes.
//
//   ND.BANDS 1 <prefix> <L> <S> <N> <target> <mode> <ord> <fields> <cap> <floor> <limit> <state>
//            <site base> <edge group> <name>
//     1            protocol version
//     prefix       band group key prefix; a group's key is prefix + decimal group number
//     L S N        the table's level, split pointer and field count (from the collection's state hash)
//     target       fields per group before a split
//     mode         insert (append and report), put (append only), read (report only, no writes)
//     ord          the document's ordinal, 5 bytes big-endian ('' in read mode)
//     fields       the document's band keys, 8 raw bytes each (little-endian; the low 32 bits pick a group)
//     cap          most ordinals a bucket keeps: a bucket that holds cap already takes no append
//     floor        ordinals at or below it are not reported (evicted by max_documents; 0 for none)
//     limit        most ordinals reported: when more are found, those that the most of the document's
//                  buckets hold, then the smallest
//     state        the collection's state hash
//     site base    the site keys' prefix: <base>sn, <base>si, <base>sp, <base>sf, and the document's entry in
//                  <base>e: + decimal(ord / edge group), field decimal(ord % edge group)
//     name         the document's site: in insert or put mode its page is counted as check.lua's
//                  add_site_page counts it (site_page.hpp), so a page of a site costs no command of its
//                  own; '' for a document of no site (then state, site base and edge group are unused)
//   -> [L, S, N, found, counts]: the table's new shape, the ordinals already in the document's
//      buckets above floor (5 bytes each, each once: in the order first met, or ranked as above when
//      cut to limit) and for each of them how many of those buckets hold it (2 bytes each,
//      big-endian). The same answer as _bands_lua.lua's band_step.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"
#include "site_page.hpp"
#include "table.hpp"

namespace neardup::vm {
namespace {

struct Ranked {
  std::string ordinals;  // kOrdinal bytes each, big-endian
  std::string counts;    // 2 bytes each, big-endian
};

// The ordinals above floor, in the order first met; when more than limit, the limit of them that the
// most buckets hold, then the smallest (ordinals are unique, so the order is total: the Lua band step
// sorts the same way and gets the same answer).
Ranked rank(const std::string& found, const std::vector<uint16_t>& times, uint64_t floor, size_t limit) {
  const auto ordinal = [&](size_t i) { return big_endian(found.data() + kOrdinal * i, kOrdinal); };
  std::vector<size_t> kept;
  kept.reserve(times.size());
  for (size_t i = 0; i < times.size(); ++i)
    if (ordinal(i) > floor) kept.push_back(i);
  if (kept.size() > limit) {
    auto better = [&](size_t a, size_t b) {
      if (times[a] != times[b]) return times[a] > times[b];
      return ordinal(a) < ordinal(b);
    };
    std::partial_sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(limit), kept.end(), better);
    kept.resize(limit);
  }
  Ranked out;
  out.ordinals.reserve(kOrdinal * kept.size());
  out.counts.reserve(2 * kept.size());
  for (const size_t i : kept) {
    out.ordinals.append(found, kOrdinal * i, kOrdinal);
    out.counts.push_back(static_cast<char>(times[i] >> 8));
    out.counts.push_back(static_cast<char>(times[i] & 0xff));
  }
  return out;
}

int bands_command(VmCtx* ctx, VmString** argv, int argc) {
  if (standalone_only(ctx, "ND.BANDS")) return kOk;
  if (argc != 17) return api.WrongArity(ctx);
  size_t len = 0;
  const char* version = api.StringPtrLen(argv[1], &len);
  if (len != 1 || version[0] != '1') return api.ReplyWithError(ctx, "ERR ND.BANDS: unknown protocol version");
  long long cap = 0, floor = 0, limit = 0;
  if (!integer(argv[10], 1, 1LL << 24, cap) || !integer(argv[11], 0, 1LL << 40, floor) ||
      !integer(argv[12], 1, 1LL << 24, limit))
    return api.ReplyWithError(ctx, "ERR ND.BANDS: cap, floor or limit out of range");
  const size_t full = static_cast<size_t>(cap) * kOrdinal;
  Table t;
  if (!read_table(argv + 2, t)) return api.ReplyWithError(ctx, "ERR ND.BANDS: L, S, N or target out of range");
  const char* mode = api.StringPtrLen(argv[7], &len);
  const std::string mode_name(mode, len);
  const bool write = mode_name == "insert" || mode_name == "put";
  const bool report = mode_name == "insert" || mode_name == "read";
  if (!write && !report) return api.ReplyWithError(ctx, "ERR ND.BANDS: mode must be insert, put or read");
  size_t ord_len = 0, fields_len = 0;
  const char* ord = api.StringPtrLen(argv[8], &ord_len);
  const char* fields = api.StringPtrLen(argv[9], &fields_len);
  if ((write && ord_len != kOrdinal) || fields_len % 8 != 0)
    return api.ReplyWithError(ctx, "ERR ND.BANDS: the ordinal is 5 bytes and band keys 8 bytes each");
  // The document's page of a site, counted here (site_page.hpp), read before any write.
  size_t name_len = 0;
  api.StringPtrLen(argv[16], &name_len);
  std::unique_ptr<SitePage> page;
  if (write && name_len > 0) {
    long long group = 0;
    if (!integer(argv[15], 1, 1LL << 20, group))
      return api.ReplyWithError(ctx, "ERR ND.BANDS: the edge group is out of range");
    size_t base_len = 0;
    const char* base = api.StringPtrLen(argv[14], &base_len);
    page = std::make_unique<SitePage>(ctx, argv[13], std::string(base, base_len), static_cast<uint64_t>(group),
                                      big_endian(ord, kOrdinal), argv[16]);
    if (const char* error = page->prepare()) return api.ReplyWithError(ctx, error);
  }
  std::string found;  // the reply: ordinals already in the buckets, each once
  std::vector<uint16_t> times;  // for each of them, in the same order: the buckets that hold it

  // Each group the document's bands fall in is opened once, and all of them are type-checked before
  // any write, so an error leaves the table untouched. The handles are closed before grow() opens
  // groups of its own.
  {
    const int mode_flags = write ? kRead | kWrite : kRead;
    std::unordered_map<uint64_t, std::unique_ptr<Group>> groups;
    std::vector<Group*> of_band;
    of_band.reserve(fields_len / 8);
    for (size_t p = 0; p < fields_len; p += 8) {
      const uint64_t number = t.group(band_hash(fields + p));
      auto& group = groups[number];
      if (!group) {
        group = std::make_unique<Group>(ctx, t.prefix, number, mode_flags);
        if (group->wrong_type())
          return api.ReplyWithError(ctx, "WRONGTYPE ND.BANDS: a band group key holds a non-hash value");
      }
      of_band.push_back(group.get());
    }
    if (write) api.ReplicateVerbatim(ctx);

    std::string appended;
    std::unordered_map<uint64_t, size_t> seen;  // ordinal -> its place in `times`
    for (size_t b = 0; b < of_band.size(); ++b) {
      Group& group = *of_band[b];
      VmString* field = api.CreateString(ctx, fields + 8 * b, 8);
      VmString* value = group.get(field);
      if (value) {
        const char* v = api.StringPtrLen(value, &len);
        if (report)
          for (size_t q = 0; q + kOrdinal <= len; q += kOrdinal) {
            const auto [at, added] = seen.try_emplace(big_endian(v + q, kOrdinal), times.size());
            if (added) {
              found.append(v + q, kOrdinal);
              times.push_back(1);
            } else if (times[at->second] < UINT16_MAX) {
              times[at->second] += 1;
            }
          }
        if (write) group.append(field, v, len, ord, kOrdinal, full, appended);
        api.FreeString(ctx, value);
      } else if (write) {
        VmString* first = api.CreateString(ctx, ord, kOrdinal);
        group.set(field, first);
        api.FreeString(ctx, first);
        t.fields += 1;
      }
      api.FreeString(ctx, field);
    }
  }
  if (page) {
    page->apply();
    page.reset();  // its keys closed before grow() opens groups
  }
  if (write) grow(ctx, t);

  const Ranked ranked = rank(found, times, static_cast<uint64_t>(floor), static_cast<size_t>(limit));
  api.ReplyWithArray(ctx, 5);
  api.ReplyWithLongLong(ctx, t.level);
  api.ReplyWithLongLong(ctx, t.split);
  api.ReplyWithLongLong(ctx, t.fields);
  api.ReplyWithStringBuffer(ctx, ranked.ordinals.data(), ranked.ordinals.size());
  api.ReplyWithStringBuffer(ctx, ranked.counts.data(), ranked.counts.size());
  return kOk;
}

}  // namespace
}  // namespace neardup::vm

extern "C" __attribute__((visibility("default"))) int RedisModule_OnLoad(VmCtx* ctx, VmString** argv, int argc) {
  using namespace neardup::vm;
  // The module's version: the scripts use its commands only when MODULE LIST reports exactly this one
  // (app/storage/scripts.py's MODULE_VERSION, the module built with the same release).
  if (init(ctx, "neardup", 1) != kOk) return kErr;
  if (api.CreateCommand(ctx, "nd.bands", bands_command, "write deny-oom", 0, 0, 0) != kOk) return kErr;
  if (register_passage_commands(ctx) != kOk) return kErr;
  if (register_site_commands(ctx) != kOk) return kErr;
  if (register_huge_pages(ctx, argv, argc) != kOk) return kErr;
  return register_bucket_commands(ctx);
}
