// The band table's layout (linear hashing over hash keys "prefix + group number", app/storage/keys.py),
// shared by ND.BANDS (bands.cpp) and ND.PASSAGES (passages.cpp): the passage index has the same layout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"

namespace neardup::vm {

inline constexpr int kMaxSplits = 4;  // per call, as in _common.lua's grow()
inline constexpr long long kMaxLevel = 40;

// A key's group hash: its first 4 bytes, little-endian.
inline uint32_t band_hash(const char* field) { return little_endian32(field); }

struct Table {
  std::string prefix;
  long long level, split, fields, target;
  long long top = kMaxLevel;  // the last level: no split past it
  // Bits of a key's group hash below the table's (a cluster's band family: the family number).
  int shift = 0;
  uint64_t n() const { return uint64_t{1} << level; }
  uint64_t group(uint32_t h) const {
    const uint64_t g = h % n();
    return g < static_cast<uint64_t>(split) ? h % (2 * n()) : g;
  }
};

struct Moved {
  VmCtx* ctx;
  uint64_t modulus, stays;
  int shift;
  std::vector<std::pair<VmString*, VmString*>> entries;  // retained copies of field and value
};

inline void collect_moved(VmKey*, VmString* field, VmString* value, void* data) {
  auto* moved = static_cast<Moved*>(data);
  size_t len = 0;
  const char* f = api.StringPtrLen(field, &len);
  if (len < 4 || (band_hash(f) >> moved->shift) % moved->modulus == moved->stays) return;
  size_t vlen = 0;
  const char* v = api.StringPtrLen(value, &vlen);
  moved->entries.emplace_back(api.CreateString(moved->ctx, f, len), api.CreateString(moved->ctx, v, vlen));
}

// The split pointer's step past a split group (a new level once every group is split).
inline void advance(Table& t) {
  t.split += 1;
  if (static_cast<uint64_t>(t.split) == t.n()) {
    t.level += 1;
    t.split = 0;
  }
}

// Linear hashing's split of group S into S and S + n, as _common.lua's grow() does it.
inline void split_once(VmCtx* ctx, Table& t) {
  const uint64_t n = t.n();
  Moved moved{ctx, 2 * n, static_cast<uint64_t>(t.split), t.shift, {}};
  {
    Group src(ctx, t.prefix, static_cast<uint64_t>(t.split), kRead | kWrite);
    if (src.key() && api.KeyType(src.key()) == kKeyTypeHash) {
      VmScanCursor* cursor = api.ScanCursorCreate();
      while (api.ScanKey(src.key(), cursor, collect_moved, &moved)) {
      }
      api.ScanCursorDestroy(cursor);
      for (auto& [field, value] : moved.entries) src.set(field, kHashDelete);
    }
  }
  if (!moved.entries.empty()) {
    Group dst(ctx, t.prefix, static_cast<uint64_t>(t.split) + n, kRead | kWrite);
    for (auto& [field, value] : moved.entries) dst.set(field, value);
  }
  for (auto& [field, value] : moved.entries) {
    api.FreeString(ctx, field);
    api.FreeString(ctx, value);
  }
  advance(t);
}

// Splits until the table is back under its target, at most kMaxSplits; `split` is the layout's split
// (split_once, or the packed index's split_packed in packed_index.hpp).
template <typename Split>
void grow(VmCtx* ctx, Table& t, Split split) {
  for (int splits = 0; splits < kMaxSplits && t.level < t.top; ++splits) {
    if (t.fields <= t.target * static_cast<long long>(t.n() + static_cast<uint64_t>(t.split))) return;
    split(ctx, t);
  }
}
inline void grow(VmCtx* ctx, Table& t) { grow(ctx, t, split_once); }

inline bool integer(VmString* s, long long lo, long long hi, long long& out) {
  return api.StringToLongLong(s, &out) == kOk && out >= lo && out <= hi;
}

// The table's arguments <prefix> <L> <S> <N> <target> at `args`, as ND.BANDS and ND.PASSAGES take them;
// false when one is out of range.
inline bool read_table(VmString** args, Table& t) {
  size_t len = 0;
  const char* prefix = api.StringPtrLen(args[0], &len);
  t.prefix.assign(prefix, len);
  return integer(args[1], 0, kMaxLevel, t.level) && integer(args[2], 0, (1LL << t.level) - 1, t.split) &&
         integer(args[3], 0, 1LL << 62, t.fields) && integer(args[4], 1, 1LL << 20, t.target);
}

// Registers ND.PASSAGES and ND.POSTINGS (passages.cpp).
int register_passage_commands(VmCtx* ctx);

}  // namespace neardup::vm
