// The passage index (app/storage/keys.py): linear hashing over string keys "prefix + group number" (the
// band table's arithmetic, table.hpp), each group one string of fixed-width records sorted by (key,
// ordinal). A record is a fingerprint key's bits 8..31 (3 bytes, big-endian: its bits 0..7 are the
// group number's, as the index starts with 2^8 groups) then one ordinal (kOrdinalWidth bytes,
// big-endian); a key's posting is its run of records. _common.lua's packed steps write the same bytes.
// The index stops splitting at level kPackedTop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "group.hpp"
#include "module_api.hpp"
#include "table.hpp"

namespace neardup::vm {

inline constexpr size_t kRecordKey = 3;
// Bytes of an ordinal (keys.ORDINAL_WIDTH), and the first byte of a passage blob (fingerprints.py).
inline constexpr size_t kOrdinalWidth = 5;
inline constexpr char kPassageFormat = 3;
// The index's last level (2^23 groups). It was set by the blob once stored with 24-bit keys, whose
// groups removal had to name from those bits; blobs now keep the whole 32-bit key and a record keeps
// bits 8..31 (the group gives 0..7), so the layout would let the index split on to level 32. Kept at
// 23 (~1 billion records at the target of 128 a group) until a larger index is measured; _common.lua's
// PASSAGE_TOP and keys.PASSAGE_INDEX_TOP hold the same number.
inline constexpr long long kPackedTop = 23;

// One group's string key (or any string key), opened for one operation.
class StringKey : public OpenedKey {
 public:
  using OpenedKey::OpenedKey;

  bool wrong_type() const { return holds_other_than(kKeyTypeString); }
  // The value ("" for a missing key); valid until the next write.
  std::string_view value() const {
    if (!key_ || api.KeyType(key_) != kKeyTypeString) return {};
    size_t len = 0;
    const char* p = api.StringDMA(key_, &len, kRead);
    return {p, len};
  }
  // Inserts `n` bytes at offset `at` of the value (a missing key is created). In place where the
  // string's allocation has room past its end (the allocator's rounding of its size): growing the
  // string there moves nothing. Where it has none, the server grows it to twice its length (sds's
  // greedy growth, which a group must not keep: its memory is the index's), so the value is then
  // written again as an exact-sized copy, as set() does.
  void insert(size_t at, const char* bytes, size_t n) {
    size_t len = 0;
    const char* before = api.KeyType(key_) == kKeyTypeString ? api.StringDMA(key_, &len, kRead | kWrite) : nullptr;
    const bool grew = api.StringTruncate(key_, len + n) == kOk;
    size_t now = 0;
    char* p = api.KeyType(key_) == kKeyTypeString ? api.StringDMA(key_, &now, kRead | kWrite) : nullptr;
    if (!grew || !p || now != len + n || (before && p != before)) {
      // Moved (or not grown): its first `len` bytes are the old value either way. (Neither readable: a
      // key this command checked and opened for writing; the group is left as it was.)
      if (before && !(p && now >= len)) return;
      std::string v = before ? std::string(p, len) : std::string();
      v.insert(std::min(at, v.size()), bytes, n);
      set(v);
      return;
    }
    std::memmove(p + at + n, p + at, len - at);
    std::memcpy(p + at, bytes, n);
  }
  // Replaces the value with an exact-sized copy of `v` (a group never keeps spare room); "" deletes.
  void set(std::string_view v) {
    if (v.empty()) {
      if (api.KeyType(key_) != kKeyTypeEmpty) api.DeleteKey(key_);
      return;
    }
    VmString* s = api.CreateString(ctx_, v.data(), v.size());
    api.StringSet(key_, s);
    api.FreeString(ctx_, s);
  }
};

inline uint32_t record_key(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) << 16 | static_cast<uint32_t>(b[1]) << 8 | b[2];
}

// The records [first, last) of key bits `k` (a key's bits 8..31) among the `rw`-byte records of v.
inline std::pair<size_t, size_t> posting_of(std::string_view v, size_t rw, uint32_t k) {
  size_t lo = 0, hi = v.size() / rw;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (record_key(v.data() + mid * rw) < k) lo = mid + 1; else hi = mid;
  }
  size_t last = lo;
  while (last < v.size() / rw && record_key(v.data() + last * rw) == k) ++last;
  return {lo, last};
}

// Appends ordinal `ord` (kOrdinalWidth bytes, larger than any already posted) to key h's posting in the
// group's string, unless the posting holds `cap` ordinals already; whether it did.
inline bool post(StringKey& group, uint32_t h, const char* ord, size_t cap) {
  const size_t rw = kRecordKey + kOrdinalWidth;
  const uint32_t k = h >> 8;
  const auto [first, last] = posting_of(group.value(), rw, k);
  if (last - first >= cap) return false;
  char record[kRecordKey + kOrdinalWidth] = {static_cast<char>(k >> 16), static_cast<char>(k >> 8),
                                             static_cast<char>(k)};
  std::memcpy(record + kRecordKey, ord, kOrdinalWidth);
  group.insert(last * rw, record, rw);
  return true;
}

// Linear hashing's split of group S into S and S + n, records in order on both sides (_common.lua's
// split_packed). A record's key is its bits 8..31 and the group's low 8 bits.
inline void split_packed(VmCtx* ctx, Table& t) {
  const size_t rw = kRecordKey + kOrdinalWidth;
  const uint64_t n = t.n(), s = static_cast<uint64_t>(t.split);
  std::string stay, move;
  {
    StringKey src(ctx, t.prefix, s, kRead | kWrite);
    const std::string_view v = src.value();
    for (size_t at = 0; at + rw <= v.size(); at += rw) {
      const uint64_t h = static_cast<uint64_t>(record_key(v.data() + at)) << 8 | (s & 0xFF);
      (h % (2 * n) == s ? stay : move).append(v.data() + at, rw);
    }
    if (!move.empty()) src.set(stay);
  }
  if (!move.empty()) StringKey(ctx, t.prefix, s + n, kRead | kWrite).set(move);
  advance(t);
}

}  // namespace neardup::vm
