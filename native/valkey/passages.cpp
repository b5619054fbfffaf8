// ND.PASSAGES: check.lua's passage step (app/storage/scripts/_passages_lua.lua does the same in Lua) in
// C++: store a document's passage blob, append its ordinal to the posting of each distinct fingerprint
// key the blob holds, and split the passage index (the band table's layout: table.hpp). The blob is
// read here, so the script neither parses it nor sends its keys again. Same data, byte for byte, as the
// Lua step; propagated verbatim (deterministic given the data).
//
//   ND.PASSAGES 1 <prefix> <L> <S> <N> <target> <blob key> <blob field> <ord> <blob> <cap> <width>
//     1           protocol version
//     prefix      passage index group key prefix; a group's key is prefix + decimal group number
//     L S N       the index's level, split pointer and field count (the state's pL pS pN)
//     target      fields per group before a split
//     blob key    the hash that keeps the blob, and its field
//     ord         the document's ordinal, <width> bytes big-endian
//     blob        the passage blob (app/domain/fingerprints.py): u8 version (1: 8-byte keys, 2: 5-byte
//                 keys) | u32 words | u32 m (little-endian) | m keys | positions this command ignores
//     cap         most ordinals a posting keeps: a posting that holds cap already takes no append
//     width       bytes of one ordinal: 4 or 5, the collection's (its state's `ow`)
//   -> [L, S, N]: the index's new shape
//
//   ND.PASSAGES 2 <prefix> <L> <S> <N> <target> <blob key> <slot> <ord> <blob> <cap> <width> <stride> <part>
//     2           protocol version 2: passage format 3 (packed_index.hpp), module version 5
//     L S N       as above, N counting records (postings); L at least 8
//     slot        the blob's slot number (ord % stride); the blob is kept with the low 3 bytes of each
//                 key (fingerprints.stored), in parts of `part` bytes (the last one shorter or as
//                 long), part j in the field slot + j * stride: each part stays under the server's
//                 listpack value limit
//     blob        a format-3 passage blob: u8 3 | varint words | varint m | m 4-byte keys | positions
//   The index splits up to level 23 (2^24 groups: a stored key's 24 bits name its group).
//     others      as above
//   -> [L, S, N]
//
// ND.POSTINGS: passages.lua's read of a format-3 index (module version 5; passages.lua reads it in Lua
// elsewhere): the postings of a text's keys, in one reply instead of a read and a binary search in Lua
// per key. Read-only.
//
//   ND.POSTINGS <prefix> <L> <S> <width> <keys>
//     prefix L S  the index's key prefix, level and split pointer (the state's pL pS); L at least 8
//     width       bytes of one ordinal (the state's `ow`)
//     keys        the text's fingerprint keys, 4 raw bytes each
//   -> one string: per key, in order, u16 count (big-endian) then its `count` ordinals
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"
#include "packed_index.hpp"
#include "table.hpp"

namespace neardup::vm {
namespace {

int reply_shape(VmCtx* ctx, const Table& t) {
  api.ReplyWithArray(ctx, 3);
  api.ReplyWithLongLong(ctx, t.level);
  api.ReplyWithLongLong(ctx, t.split);
  api.ReplyWithLongLong(ctx, t.fields);
  return kOk;
}

// An unsigned LEB128 varint at b[at..end) (at most 5 bytes); false past the end.
bool varint(const char* b, size_t end, size_t& at, uint64_t& out) {
  out = 0;
  for (int shift = 0; shift <= 28; shift += 7) {
    if (at >= end) return false;
    const auto byte = static_cast<unsigned char>(b[at++]);
    out |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return true;
  }
  return false;
}

// Both protocols' <ord> (argv[9], `width` bytes) and <blob> (argv[10], at least 9 bytes): nullptr, or
// the error to reply.
const char* ordinal_and_blob(VmString** argv, size_t width, const char*& ord, const char*& blob, size_t& blob_len) {
  size_t ord_len = 0;
  ord = api.StringPtrLen(argv[9], &ord_len);
  blob = api.StringPtrLen(argv[10], &blob_len);
  if (ord_len != width) return "ERR ND.PASSAGES: the ordinal is <width> bytes";
  if (blob_len < 9) return "ERR ND.PASSAGES: the passage blob is too short";
  return nullptr;
}

// Protocol 2: a format-3 blob stored in parts, its keys posted as packed records.
int packed_passages(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 15) return api.WrongArity(ctx);
  Table t;
  if (!read_table(argv + 2, t) || t.level < 8 || t.level > kPackedTop)
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: L, S, N or target out of range");
  long long slot = 0, cap = 0, width = 0, stride = 0, part = 0;
  if (!integer(argv[11], 1, 1LL << 24, cap) || !integer(argv[12], 4, 5, width) ||
      !integer(argv[13], 1, 1LL << 20, stride) || !integer(argv[8], 0, stride - 1, slot) ||
      !integer(argv[14], 16, 1LL << 20, part))
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: slot, cap, stride or part out of range or width not 4 or 5");
  const size_t w = static_cast<size_t>(width);
  const char *ord = nullptr, *blob = nullptr;
  size_t blob_len = 0;
  if (const char* error = ordinal_and_blob(argv, w, ord, blob, blob_len)) return api.ReplyWithError(ctx, error);
  if (blob[0] != 3) return api.ReplyWithError(ctx, "ERR ND.PASSAGES: unknown passage blob format");
  size_t at = 1;
  uint64_t words = 0, m = 0;
  if (!varint(blob, blob_len, at, words) || !varint(blob, blob_len, at, m) || m > (blob_len - at) / 4)
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: truncated passage blob");

  // The distinct keys in the blob's order, each to its group's records (read once, written once).
  std::vector<uint32_t> keys;
  keys.reserve(m);
  {
    std::unordered_set<uint32_t> seen;
    seen.reserve(2 * m);
    for (uint64_t e = 0; e < m; ++e) {
      const uint32_t h = little_endian32(blob + at + 4 * e);
      if (seen.insert(h).second) keys.push_back(h);
    }
  }
  t.top = kPackedTop;
  // The blob as stored (fingerprints.stored): the low 3 bytes of each key.
  std::string stored(blob, at);
  for (uint64_t e = 0; e < m; ++e) stored.append(blob + at + 4 * e, 3);
  stored.append(blob + at + 4 * m, blob_len - at - 4 * m);
  {
    // Each group the blob's keys fall in: opened once (checked before any write), posted to in place
    // (StringKey::insert); closed before the splits open groups again.
    std::unordered_map<uint64_t, std::unique_ptr<StringKey>> groups;
    Group blobs(ctx, argv[7], kRead | kWrite);
    if (blobs.wrong_type())
      return api.ReplyWithError(ctx, "WRONGTYPE ND.PASSAGES: the blob key holds a non-hash value");
    for (const uint32_t h : keys) {
      const uint64_t number = t.group(h);
      if (groups.count(number)) continue;
      auto key = std::make_unique<StringKey>(ctx, t.prefix, number, kRead | kWrite);
      if (key->wrong_type())
        return api.ReplyWithError(ctx, "WRONGTYPE ND.PASSAGES: an index group key holds a non-string value");
      groups.emplace(number, std::move(key));
    }
    api.ReplicateVerbatim(ctx);
    for (size_t from = 0, j = 0; from < stored.size(); from += static_cast<size_t>(part), ++j) {
      const std::string field = std::to_string(slot + static_cast<long long>(j) * stride);
      VmString* f = api.CreateString(ctx, field.data(), field.size());
      const size_t size = std::min<size_t>(static_cast<size_t>(part), stored.size() - from);
      VmString* v = api.CreateString(ctx, stored.data() + from, size);
      blobs.set(f, v);
      api.FreeString(ctx, f);
      api.FreeString(ctx, v);
    }
    for (const uint32_t h : keys)
      if (post(*groups[t.group(h)], h, ord, w, static_cast<size_t>(cap))) t.fields += 1;
  }
  grow(ctx, t, [w](VmCtx* c, Table& table) { split_packed(c, table, w); });
  return reply_shape(ctx, t);
}

int postings_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 6) return api.WrongArity(ctx);
  Table t;
  size_t len = 0;
  const char* prefix = api.StringPtrLen(argv[1], &len);
  t.prefix.assign(prefix, len);
  long long width = 0;
  if (!integer(argv[2], 8, kMaxLevel, t.level) || !integer(argv[3], 0, (1LL << t.level) - 1, t.split) ||
      !integer(argv[4], 4, 5, width))
    return api.ReplyWithError(ctx, "ERR ND.POSTINGS: L or S out of range or width not 4 or 5");
  const size_t w = static_cast<size_t>(width), rw = kRecordKey + w;
  const char* keys = api.StringPtrLen(argv[5], &len);
  if (len % 4) return api.ReplyWithError(ctx, "ERR ND.POSTINGS: keys are 4 bytes each");
  std::string out;
  out.reserve(len / 2 + 64);
  for (size_t at = 0; at < len; at += 4) {
    const uint32_t h = little_endian32(keys + at);
    StringKey group(ctx, t.prefix, t.group(h), kRead);
    if (group.wrong_type())
      return api.ReplyWithError(ctx, "WRONGTYPE ND.POSTINGS: an index group key holds a non-string value");
    const std::string_view v = group.value();
    const auto [first, last] = posting_of(v, rw, h >> 8);
    const size_t count = std::min<size_t>(last - first, 0xFFFF);
    out.push_back(static_cast<char>(count >> 8));
    out.push_back(static_cast<char>(count & 0xFF));
    for (size_t r = first; r < first + count; ++r) out.append(v.data() + r * rw + kRecordKey, w);
  }
  api.ReplyWithStringBuffer(ctx, out.data(), out.size());
  return kOk;
}

int passages_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc < 2) return api.WrongArity(ctx);
  size_t len = 0;
  const char* version = api.StringPtrLen(argv[1], &len);
  if (len == 1 && version[0] == '2') return packed_passages(ctx, argv, argc);
  if (len != 1 || version[0] != '1') return api.ReplyWithError(ctx, "ERR ND.PASSAGES: unknown protocol version");
  if (argc != 13) return api.WrongArity(ctx);
  Table t;
  if (!read_table(argv + 2, t)) return api.ReplyWithError(ctx, "ERR ND.PASSAGES: L, S, N or target out of range");
  long long cap = 0, width = 0;
  if (!integer(argv[11], 1, 1LL << 24, cap) || !integer(argv[12], 4, 5, width))
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: cap out of range or width not 4 or 5");
  const size_t w = static_cast<size_t>(width);
  const char *o4 = nullptr, *blob = nullptr;
  size_t blob_len = 0;
  if (const char* error = ordinal_and_blob(argv, w, o4, blob, blob_len)) return api.ReplyWithError(ctx, error);
  const unsigned blob_version = static_cast<unsigned char>(blob[0]);
  if (blob_version != 1 && blob_version != 2)
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: unknown passage blob format");
  const size_t key_bytes = blob_version == 1 ? 8 : 5;
  const uint64_t m = little_endian32(blob + 5);
  if (m > (blob_len - 9) / key_bytes) return api.ReplyWithError(ctx, "ERR ND.PASSAGES: truncated passage blob");

  // The distinct keys in the blob's order (the Lua step appends in the same order, so new fields land
  // in the same places of the same listpacks).
  std::vector<const char*> keys;
  keys.reserve(m);
  {
    std::unordered_set<uint64_t> seen;
    seen.reserve(2 * m);
    for (uint64_t e = 0; e < m; ++e) {
      const char* key = blob + 9 + e * key_bytes;
      uint64_t packed = 0;
      std::memcpy(&packed, key, key_bytes);
      if (seen.insert(packed).second) keys.push_back(key);
    }
  }

  // Every key this call writes is opened and type-checked before the first write.
  {
    Group blobs(ctx, argv[7], kRead | kWrite);
    if (blobs.wrong_type())
      return api.ReplyWithError(ctx, "WRONGTYPE ND.PASSAGES: the blob key holds a non-hash value");
    std::unordered_map<uint64_t, std::unique_ptr<Group>> groups;
    std::vector<Group*> of_key;
    of_key.reserve(keys.size());
    for (const char* key : keys) {
      const uint64_t number = t.group(band_hash(key));
      auto& group = groups[number];
      if (!group) {
        group = std::make_unique<Group>(ctx, t.prefix, number, kRead | kWrite);
        if (group->wrong_type())
          return api.ReplyWithError(ctx, "WRONGTYPE ND.PASSAGES: an index group key holds a non-hash value");
      }
      of_key.push_back(group.get());
    }
    api.ReplicateVerbatim(ctx);
    blobs.set(argv[8], argv[10]);

    const size_t full = static_cast<size_t>(cap) * w;
    std::string appended;
    VmString* first = api.CreateString(ctx, o4, w);
    for (size_t i = 0; i < keys.size(); ++i) {
      Group& group = *of_key[i];
      VmString* field = api.CreateString(ctx, keys[i], key_bytes);
      // Most keys of a document are new: one insert-if-absent does it (HSETNX, as the Lua step).
      if (group.set_new(field, first)) {
        t.fields += 1;
        api.FreeString(ctx, field);
        continue;
      }
      VmString* value = group.get(field);
      if (value) {
        const char* v = api.StringPtrLen(value, &len);
        group.append(field, v, len, o4, w, full, appended);
        api.FreeString(ctx, value);
      } else {
        group.set(field, first);
        t.fields += 1;
      }
      api.FreeString(ctx, field);
    }
    api.FreeString(ctx, first);
  }
  grow(ctx, t);
  return reply_shape(ctx, t);
}

}  // namespace

int register_passage_commands(VmCtx* ctx) {
  if (api.CreateCommand(ctx, "nd.postings", postings_command, "readonly", 0, 0, 0) != kOk) return kErr;
  return api.CreateCommand(ctx, "nd.passages", passages_command, "write deny-oom", 0, 0, 0);
}

}  // namespace neardup::vm
