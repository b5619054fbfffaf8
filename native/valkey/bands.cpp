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
//   ND.BANDS 3 <prefix> <L> <S> <N> <target> <mode> <ord> <fields> <cap> <floor> <limit> <width>
//     3        protocol version (a later version must keep accepting what an old append-only file holds:
//              version 2 is version 3 without <width>, for 4-byte ordinals; version 1 is version 2
//              without <cap> <floor> <limit>: buckets without a limit, every ordinal found reported,
//              replies without counts)
//     prefix   band group key prefix; a group's key is prefix + decimal group number
//     L S N    the table's level, split pointer and field count (from the collection's state hash)
//     target   fields per group before a split
//     mode     insert (append and report), put (append only), read (report only, no writes)
//     ord      the document's ordinal, <width> bytes big-endian ('' in read mode)
//     fields   the document's band keys, 8 raw bytes each (little-endian; the low 32 bits pick a group)
//     cap      most ordinals a bucket keeps: a bucket that holds cap already takes no append
//     floor    ordinals at or below it are not reported (evicted by max_documents; 0 for none)
//     limit    most ordinals reported: when more are found, those that the most of the document's
//              buckets hold, then the smallest
//     width    bytes of one ordinal in a bucket: 4 or 5, the collection's (its state's `ow`)
//
//   ND.BANDS 4 <protocol 3's arguments> <state> <names> <ids> <pages> <entry key> <entry field> <name>
//     (module version 6) and, in insert or put mode with a <name>, the document's page of site <name>
//     counted as check.lua's add_site_page counts it (site_page.hpp: the collection's state hash, the
//     site keys sn, si, sp, and the document's entry), so a page of a site costs no command of its
//     own; with an empty <name> (a document of no site, check.lua's readiness call) protocol 3.
//   ND.BANDS 5 <protocol 3's arguments> <state> <site base> <edge group> <name>
//     (module version 7) protocol 4 with the site keys named from <site base> (<base>sn, <base>si,
//     <base>sp) and the document's entry key and field from its ordinal (<base>e: + decimal(ord / edge
//     group), decimal(ord % edge group)): the same writes, four arguments in the append-only file per
//     document instead of seven.
//   -> [L, S, N, found, counts]: the table's new shape, the ordinals already in the document's
//      buckets above floor (<width> bytes each, each once: in the order first met, or ranked as above when
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
  std::string ordinals;  // width bytes each, big-endian
  std::string counts;    // 2 bytes each, big-endian
};

// The ordinals above floor, in the order first met; when more than limit, the limit of them that the
// most buckets hold, then the smallest (ordinals are unique, so the order is total: the Lua band step
// sorts the same way and gets the same answer).
Ranked rank(const std::string& found, const std::vector<uint16_t>& times, uint64_t floor, size_t limit,
            size_t width) {
  std::vector<size_t> kept;
  kept.reserve(times.size());
  for (size_t i = 0; i < times.size(); ++i)
    if (big_endian(found.data() + width * i, width) > floor) kept.push_back(i);
  if (kept.size() > limit) {
    auto better = [&](size_t a, size_t b) {
      if (times[a] != times[b]) return times[a] > times[b];
      return big_endian(found.data() + width * a, width) < big_endian(found.data() + width * b, width);
    };
    std::partial_sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(limit), kept.end(), better);
    kept.resize(limit);
  }
  Ranked out;
  out.ordinals.reserve(width * kept.size());
  out.counts.reserve(2 * kept.size());
  for (const size_t i : kept) {
    out.ordinals.append(found, width * i, width);
    out.counts.push_back(static_cast<char>(times[i] >> 8));
    out.counts.push_back(static_cast<char>(times[i] & 0xff));
  }
  return out;
}

// Protocol 5's site arguments as protocol 4's (SitePage's): the state and the name given, the site keys
// and the document's entry key and field made from the site key base, the edge group and the ordinal.
class SiteArgs {
 public:
  SiteArgs(VmCtx* ctx, VmString* state, VmString* base, uint64_t group, uint64_t ord, VmString* name) : ctx_(ctx) {
    size_t len = 0;
    const char* b = api.StringPtrLen(base, &len);
    const std::string prefix(b, len);
    const std::string made[] = {prefix + "sn", prefix + "si", prefix + "sp",
                                prefix + "e:" + std::to_string(ord / group), std::to_string(ord % group)};
    for (size_t i = 0; i < 5; ++i) args_[i + 1] = api.CreateString(ctx, made[i].data(), made[i].size());
    args_[0] = state;
    args_[6] = name;
  }
  ~SiteArgs() {
    for (size_t i = 1; i < 6; ++i) api.FreeString(ctx_, args_[i]);
  }
  SiteArgs(const SiteArgs&) = delete;
  SiteArgs& operator=(const SiteArgs&) = delete;
  VmString** args() { return args_; }

 private:
  VmCtx* ctx_;
  VmString* args_[7];
};

int bands_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 10 && argc != 13 && argc != 14 && argc != 18 && argc != 21) return api.WrongArity(ctx);
  size_t len = 0;
  const char* version = api.StringPtrLen(argv[1], &len);
  if (len != 1 || version[0] < '1' || version[0] > '5')
    return api.ReplyWithError(ctx, "ERR ND.BANDS: unknown protocol version");
  const int protocol = version[0] - '0';
  if (argc != (protocol == 1 ? 10 : protocol == 2 ? 13 : protocol == 3 ? 14 : protocol == 4 ? 21 : 18))
    return api.WrongArity(ctx);
  long long cap = 1LL << 40, floor = 0, limit = 1LL << 40, width = 4;  // version 1: no bounds
  if (protocol >= 2 && (!integer(argv[10], 1, 1LL << 24, cap) || !integer(argv[11], 0, 1LL << 40, floor) ||
                        !integer(argv[12], 1, 1LL << 24, limit)))
    return api.ReplyWithError(ctx, "ERR ND.BANDS: cap, floor or limit out of range");
  if (protocol >= 3 && !integer(argv[13], 4, 5, width))
    return api.ReplyWithError(ctx, "ERR ND.BANDS: width must be 4 or 5");
  const size_t w = static_cast<size_t>(width);
  const size_t full = static_cast<size_t>(cap) * w;
  Table t;
  if (!read_table(argv + 2, t)) return api.ReplyWithError(ctx, "ERR ND.BANDS: L, S, N or target out of range");
  const char* mode = api.StringPtrLen(argv[7], &len);
  const std::string mode_name(mode, len);
  const bool write = mode_name == "insert" || mode_name == "put";
  const bool report = mode_name == "insert" || mode_name == "read";
  if (!write && !report) return api.ReplyWithError(ctx, "ERR ND.BANDS: mode must be insert, put or read");
  size_t o4_len = 0, fields_len = 0;
  const char* o4 = api.StringPtrLen(argv[8], &o4_len);
  const char* fields = api.StringPtrLen(argv[9], &fields_len);
  if ((write && o4_len != w) || fields_len % 8 != 0)
    return api.ReplyWithError(ctx, "ERR ND.BANDS: the ordinal is <width> bytes and band keys 8 bytes each");
  // Protocols 4 and 5: the document's page of a site, counted here (site_page.hpp), read before any
  // write.
  size_t name_len = 0;
  if (protocol >= 4) api.StringPtrLen(argv[protocol == 4 ? 20 : 17], &name_len);
  std::unique_ptr<SiteArgs> site_args;
  std::unique_ptr<SitePage> page;
  if (protocol >= 4 && write && name_len > 0) {
    VmString** args = argv + 14;
    if (protocol == 5) {
      long long group = 0;
      if (!integer(argv[16], 1, 1LL << 20, group))
        return api.ReplyWithError(ctx, "ERR ND.BANDS: the edge group is out of range");
      site_args = std::make_unique<SiteArgs>(ctx, argv[14], argv[15], static_cast<uint64_t>(group),
                                             big_endian(o4, w), argv[17]);
      args = site_args->args();
    }
    page = std::make_unique<SitePage>(ctx, args);
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
          for (size_t q = 0; q + w <= len; q += w) {
            const auto [at, added] = seen.try_emplace(big_endian(v + q, w), times.size());
            if (added) {
              found.append(v + q, w);
              times.push_back(1);
            } else if (times[at->second] < UINT16_MAX) {
              times[at->second] += 1;
            }
          }
        if (write) group.append(field, v, len, o4, w, full, appended);
        api.FreeString(ctx, value);
      } else if (write) {
        VmString* first = api.CreateString(ctx, o4, w);
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

  api.ReplyWithArray(ctx, protocol == 1 ? 4 : 5);
  api.ReplyWithLongLong(ctx, t.level);
  api.ReplyWithLongLong(ctx, t.split);
  api.ReplyWithLongLong(ctx, t.fields);
  if (protocol == 1) {
    api.ReplyWithStringBuffer(ctx, found.data(), found.size());
    return kOk;
  }
  const Ranked ranked = rank(found, times, static_cast<uint64_t>(floor), static_cast<size_t>(limit), w);
  api.ReplyWithStringBuffer(ctx, ranked.ordinals.data(), ranked.ordinals.size());
  api.ReplyWithStringBuffer(ctx, ranked.counts.data(), ranked.counts.size());
  return kOk;
}

}  // namespace
}  // namespace neardup::vm

extern "C" __attribute__((visibility("default"))) int RedisModule_OnLoad(VmCtx* ctx, VmString** argv, int argc) {
  using namespace neardup::vm;
  // Version 2 added ND.PASSAGES (passages.cpp) and ND.LINK (sites.cpp); the service uses them only from a
  // module of version 2 or later. Version 3 added ND.MATCHLINK (sites.cpp), used from version 3 on;
  // version 4 its protocol 2 (format 3 sketches), used for format-3 collections from version 4 on.
  // Version 5 added ND.PASSAGES's protocol 2 and ND.POSTINGS (passage format 3), used from version 5 on.
  // Version 6 added ND.MATCHLINK's protocol 3 (the batch's sketches and candidates as check.lua has
  // them), the only one check.lua sends: it links in the check from version 6 on; and ND.BANDS's
  // protocol 4 (a page of a site counted in the band step), sent from version 6 on. Version 7 added
  // ND.LINK's protocol 2 (site layout 2) and ND.BANDS's protocol 5 (protocol 4 with fewer arguments),
  // sent from version 7 on.
  if (init(ctx, "neardup", 7) != kOk) return kErr;
  if (api.CreateCommand(ctx, "nd.bands", bands_command, "write deny-oom", 0, 0, 0) != kOk) return kErr;
  if (register_passage_commands(ctx) != kOk) return kErr;
  if (register_site_commands(ctx) != kOk) return kErr;
  if (register_huge_pages(ctx, argv, argc) != kOk) return kErr;
  return register_bucket_commands(ctx);
}
