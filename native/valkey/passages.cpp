// ND.PASSAGES: check.lua's passage step (app/storage/scripts/_passages_lua.lua does the same in Lua) in
// C++: store a document's passage blob, append its ordinal to the posting of each distinct fingerprint
// key the blob holds, and split the passage index (packed_index.hpp). The blob is read here, so the
// script neither parses it nor sends its keys again. Same data, byte for byte, as the Lua step;
// propagated verbatim (deterministic given the data).
//
//   ND.PASSAGES 1 <prefix> <L> <S> <N> <target> <blob key> <slot> <ord> <blob> <cap> <width> <stride> <part>
//     1           protocol version
//     prefix      passage index group key prefix; a group's key is prefix + decimal group number
//     L S N       the index's level, split pointer and record count (the state's pL pS pN); L at least 8
//     target      records per group before a split
//     blob key    the hash that keeps the blob
//     slot        the blob's slot number (ord % stride); the blob is kept as sent, in parts of `part`
//                 bytes (the last one shorter or as long), part j in the field slot + j * stride: each
//                 part stays under the server's listpack value limit
//     ord         the document's ordinal, <width> bytes big-endian
//     blob        the passage blob (app/domain/fingerprints.py): u8 3 | varint words | varint m | m 4-byte
//                 keys (little-endian) | positions this command ignores
//     cap         most ordinals a posting keeps: a posting that holds cap already takes no append
//     width       bytes of one ordinal: 5 (keys.ORDINAL_WIDTH)
//   The index splits up to level kPackedTop (packed_index.hpp).
//   -> [L, S, N]: the index's new shape
//
// ND.POSTINGS: passages.lua's read of the passage index (passages.lua reads it in Lua where the server
// has no module): the postings of a text's keys, in one reply instead of a read and a binary search in
// Lua per key. Read-only.
//
//   ND.POSTINGS 1 <prefix> <L> <S> <width> <keys>
//     1           protocol version
//     prefix L S  the index's key prefix, level and split pointer (the state's pL pS); L at least 8
//     width       bytes of one ordinal: 5 (keys.ORDINAL_WIDTH)
//     keys        the text's fingerprint keys, 4 raw bytes each
//   -> one string: every key's u16 count (big-endian), in order, then every key's `count` ordinals, in
//      the same order (the service reads both as arrays)
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

// <ord> (argv[9], kOrdinalWidth bytes) and <blob> (argv[10], at least 9 bytes): nullptr, or the error to
// reply.
const char* ordinal_and_blob(VmString** argv, const char*& ord, const char*& blob, size_t& blob_len) {
  size_t ord_len = 0;
  ord = api.StringPtrLen(argv[9], &ord_len);
  blob = api.StringPtrLen(argv[10], &blob_len);
  if (ord_len != kOrdinalWidth) return "ERR ND.PASSAGES: the ordinal is <width> bytes";
  if (blob_len < 9) return "ERR ND.PASSAGES: the passage blob is too short";
  return nullptr;
}

// Whether argv[at] names the protocol this build speaks ("1").
bool protocol_one(VmString** argv, int at) {
  size_t len = 0;
  const char* version = api.StringPtrLen(argv[at], &len);
  return len == 1 && version[0] == '1';
}

int passages_command(VmCtx* ctx, VmString** argv, int argc) {
  if (standalone_only(ctx, "ND.PASSAGES")) return kOk;
  if (argc < 2) return api.WrongArity(ctx);
  if (!protocol_one(argv, 1)) return api.ReplyWithError(ctx, "ERR ND.PASSAGES: unknown protocol version");
  if (argc != 15) return api.WrongArity(ctx);
  Table t;
  if (!read_table(argv + 2, t) || t.level < 8 || t.level > kPackedTop)
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: L, S, N or target out of range");
  long long slot = 0, cap = 0, width = 0, stride = 0, part = 0;  // width: checked, kOrdinalWidth
  if (!integer(argv[11], 1, 1LL << 24, cap) || !integer(argv[13], 1, 1LL << 20, stride) ||
      !integer(argv[8], 0, stride - 1, slot) || !integer(argv[14], 16, 1LL << 20, part))
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: slot, cap, stride or part out of range");
  if (!integer(argv[12], kOrdinalWidth, kOrdinalWidth, width))
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: width must be 5");
  const char *ord = nullptr, *blob = nullptr;
  size_t blob_len = 0;
  if (const char* error = ordinal_and_blob(argv, ord, blob, blob_len)) return api.ReplyWithError(ctx, error);
  if (blob[0] != kPassageFormat)
    return api.ReplyWithError(ctx, "ERR ND.PASSAGES: unknown passage blob format");
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
    // The blob as sent, whole keys and all (removal finds the key's group from them).
    for (size_t from = 0, j = 0; from < blob_len; from += static_cast<size_t>(part), ++j) {
      const std::string field = std::to_string(slot + static_cast<long long>(j) * stride);
      VmString* f = api.CreateString(ctx, field.data(), field.size());
      const size_t size = std::min<size_t>(static_cast<size_t>(part), blob_len - from);
      VmString* v = api.CreateString(ctx, blob + from, size);
      blobs.set(f, v);
      api.FreeString(ctx, f);
      api.FreeString(ctx, v);
    }
    for (const uint32_t h : keys)
      if (post(*groups[t.group(h)], h, ord, static_cast<size_t>(cap))) t.fields += 1;
  }
  grow(ctx, t, [](VmCtx* c, Table& table) { split_packed(c, table); });
  return reply_shape(ctx, t);
}

int postings_command(VmCtx* ctx, VmString** argv, int argc) {
  if (standalone_only(ctx, "ND.POSTINGS")) return kOk;
  if (argc < 2) return api.WrongArity(ctx);
  if (!protocol_one(argv, 1)) return api.ReplyWithError(ctx, "ERR ND.POSTINGS: unknown protocol version");
  if (argc != 7) return api.WrongArity(ctx);
  Table t;
  size_t len = 0;
  const char* prefix = api.StringPtrLen(argv[2], &len);
  t.prefix.assign(prefix, len);
  long long width = 0;
  if (!integer(argv[3], 8, kMaxLevel, t.level) || !integer(argv[4], 0, (1LL << t.level) - 1, t.split))
    return api.ReplyWithError(ctx, "ERR ND.POSTINGS: L or S out of range");
  if (!integer(argv[5], kOrdinalWidth, kOrdinalWidth, width))
    return api.ReplyWithError(ctx, "ERR ND.POSTINGS: width must be 5");
  const size_t w = kOrdinalWidth, rw = kRecordKey + kOrdinalWidth;
  const char* keys = api.StringPtrLen(argv[6], &len);
  if (len % 4) return api.ReplyWithError(ctx, "ERR ND.POSTINGS: keys are 4 bytes each");
  std::string counts, out;
  counts.reserve(len / 2);
  out.reserve(len + 64);
  for (size_t at = 0; at < len; at += 4) {
    const uint32_t h = little_endian32(keys + at);
    StringKey group(ctx, t.prefix, t.group(h), kRead);
    if (group.wrong_type())
      return api.ReplyWithError(ctx, "WRONGTYPE ND.POSTINGS: an index group key holds a non-string value");
    const std::string_view v = group.value();
    const auto [first, last] = posting_of(v, rw, h >> 8);
    const size_t count = std::min<size_t>(last - first, 0xFFFF);
    counts.push_back(static_cast<char>(count >> 8));
    counts.push_back(static_cast<char>(count & 0xFF));
    for (size_t r = first; r < first + count; ++r) out.append(v.data() + r * rw + kRecordKey, w);
  }
  counts += out;
  api.ReplyWithStringBuffer(ctx, counts.data(), counts.size());
  return kOk;
}

}  // namespace

int register_passage_commands(VmCtx* ctx) {
  if (api.CreateCommand(ctx, "nd.postings", postings_command, "readonly", 0, 0, 0) != kOk) return kErr;
  return api.CreateCommand(ctx, "nd.passages", passages_command, "write deny-oom", 0, 0, 0);
}

}  // namespace neardup::vm
