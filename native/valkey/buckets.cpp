// The cluster's band-bucket loops in C++ (app/storage/scripts/cluster_ops.lua and cluster_bands.lua do
// the same in Lua): on a cluster the band table has fixed groups and a check's appends, removals and
// reads arrive as packed records, one call per node. Same data, byte for byte, as the Lua loops.
//
//   ND.BUCKETS 1 <prefix> <cap> <appends> <removals>
//     1         protocol version
//     prefix    band group key prefix; a group's key is prefix + decimal group number
//     cap       most ordinals a bucket keeps (keys.BUCKET_CAP)
//     appends   packed records (group number, 4 bytes big-endian; band key, 8 bytes; ordinal, 5 bytes
//               big-endian): add the ordinal to the bucket unless it is there already or the bucket is full
//     removals  records of the same shape: take the ordinal out; delete the field when it empties
//   -> the number of band fields created
//
//   ND.BUCKETSGET 1 <prefix> <records>
//     1         protocol version
//     records   packed (group number, 4 bytes big-endian; band key, 8 bytes)
//   -> the bucket values in order ('' where absent)
//
// The group keys are packed in the arguments, so the server cannot route these commands by their keys:
// on a cluster each command checks with the server's routing every group key it would touch
// (SlotRouting, group.hpp) before it reads or writes anything, and answers an error naming "a non
// local key" where another node serves the slot (or the slot is migrating away and the group is gone
// from here), as the Lua loops' own HGET and HSET are refused. The client then learns the slot map
// again and sends the records where their slots live.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"

namespace neardup::vm {
namespace {

uint32_t group_at(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) << 24 | static_cast<uint32_t>(b[1]) << 16 | static_cast<uint32_t>(b[2]) << 8 |
         static_cast<uint32_t>(b[3]);
}

bool version_one(VmString* arg) {
  size_t len = 0;
  const char* v = api.StringPtrLen(arg, &len);
  return len == 1 && v[0] == '1';
}

// Groups opened once per call, each checked (served by this node, a hash) before anything is written.
class Groups {
 public:
  // `records`: how many records the call has (the most groups it may open).
  Groups(VmCtx* ctx, std::string prefix, int mode, size_t records)
      : ctx_(ctx), prefix_(std::move(prefix)), mode_(mode), routing_(ctx, records) {}
  // nullptr if the key is not served here or holds something else than a hash; error() says which.
  Group* open(uint32_t number) {
    auto& group = groups_[number];
    if (!group) {
      group = std::make_unique<Group>(ctx_, prefix_, number, mode_);
      std::string why;
      const bool here = group->key() && api.KeyType(group->key()) != kKeyTypeEmpty;
      if (!routing_.served(group->name(), here, why)) {
        error_ = "ERR a band group key of this call is a non local key: " + why;
        return nullptr;
      }
    }
    if (group->wrong_type()) {
      error_ = "WRONGTYPE a band group key holds a non-hash value";
      return nullptr;
    }
    return group.get();
  }
  const std::string& error() const { return error_; }

 private:
  VmCtx* ctx_;
  std::string prefix_;
  int mode_;
  SlotRouting routing_;
  std::string error_;
  std::unordered_map<uint32_t, std::unique_ptr<Group>> groups_;
};

// The offset of `ordinal` in the bucket value (aligned to `width`), or npos.
size_t find(const char* value, size_t len, const char* ordinal, size_t width) {
  for (size_t q = 0; q + width <= len; q += width)
    if (std::memcmp(value + q, ordinal, width) == 0) return q;
  return std::string::npos;
}

int buckets_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 6) return api.WrongArity(ctx);
  if (!version_one(argv[1])) return api.ReplyWithError(ctx, "ERR ND.BUCKETS: unknown protocol version");
  long long cap = 0;
  if (api.StringToLongLong(argv[3], &cap) != kOk || cap < 1 || cap > (1LL << 24))
    return api.ReplyWithError(ctx, "ERR ND.BUCKETS: cap must be 1..2^24");
  constexpr size_t w = kOrdinal, record = 12 + kOrdinal;
  const size_t full = w * static_cast<size_t>(cap);
  size_t len = 0, appends_len = 0, removals_len = 0;
  const char* prefix = api.StringPtrLen(argv[2], &len);
  const char* appends = api.StringPtrLen(argv[4], &appends_len);
  const char* removals = api.StringPtrLen(argv[5], &removals_len);
  if (appends_len % record != 0 || removals_len % record != 0)
    return api.ReplyWithError(ctx, "ERR ND.BUCKETS: records are 17 bytes each");

  Groups groups(ctx, std::string(prefix, len), kRead | kWrite, (appends_len + removals_len) / record);
  for (const auto& [blob, size] : {std::pair{appends, appends_len}, std::pair{removals, removals_len}})
    for (size_t p = 0; p < size; p += record)
      if (!groups.open(group_at(blob + p))) return api.ReplyWithError(ctx, groups.error().c_str());
  if (appends_len + removals_len > 0) api.ReplicateVerbatim(ctx);

  long long created = 0;
  std::string changed;
  for (size_t p = 0; p < appends_len; p += record) {
    Group& group = *groups.open(group_at(appends + p));
    const char* ordinal = appends + p + 12;
    VmString* field = api.CreateString(ctx, appends + p + 4, 8);
    if (VmString* value = group.get(field)) {
      const char* v = api.StringPtrLen(value, &len);
      if (len < full && find(v, len, ordinal, w) == std::string::npos)
        group.append(field, v, len, ordinal, w, full, changed);
      api.FreeString(ctx, value);
    } else {
      VmString* first = api.CreateString(ctx, ordinal, w);
      group.set(field, first);
      api.FreeString(ctx, first);
      created += 1;
    }
    api.FreeString(ctx, field);
  }
  for (size_t p = 0; p < removals_len; p += record) {
    Group& group = *groups.open(group_at(removals + p));
    VmString* field = api.CreateString(ctx, removals + p + 4, 8);
    if (VmString* value = group.get(field)) {
      const char* v = api.StringPtrLen(value, &len);
      const size_t at = find(v, len, removals + p + 12, w);
      if (at != std::string::npos) {
        if (len == w) {
          group.set(field, kHashDelete);
        } else {
          changed.assign(v, at);
          changed.append(v + at + w, len - at - w);
          VmString* shorter = api.CreateString(ctx, changed.data(), changed.size());
          group.set(field, shorter);
          api.FreeString(ctx, shorter);
        }
      }
      api.FreeString(ctx, value);
    }
    api.FreeString(ctx, field);
  }
  return api.ReplyWithLongLong(ctx, created);
}

int buckets_get_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 4) return api.WrongArity(ctx);
  if (!version_one(argv[1])) return api.ReplyWithError(ctx, "ERR ND.BUCKETSGET: unknown protocol version");
  size_t len = 0, records_len = 0;
  const char* prefix = api.StringPtrLen(argv[2], &len);
  const char* records = api.StringPtrLen(argv[3], &records_len);
  if (records_len % 12 != 0) return api.ReplyWithError(ctx, "ERR ND.BUCKETSGET: records are 12 bytes each");
  Groups groups(ctx, std::string(prefix, len), kRead, records_len / 12);
  std::vector<Group*> of_record;
  of_record.reserve(records_len / 12);
  for (size_t p = 0; p < records_len; p += 12) {
    Group* group = groups.open(group_at(records + p));
    if (!group) return api.ReplyWithError(ctx, groups.error().c_str());
    of_record.push_back(group);
  }
  api.ReplyWithArray(ctx, static_cast<long>(of_record.size()));
  for (size_t i = 0; i < of_record.size(); ++i) {
    VmString* field = api.CreateString(ctx, records + 12 * i + 4, 8);
    if (VmString* value = of_record[i]->get(field)) {
      const char* v = api.StringPtrLen(value, &len);
      api.ReplyWithStringBuffer(ctx, v, len);
      api.FreeString(ctx, value);
    } else {
      api.ReplyWithStringBuffer(ctx, "", 0);
    }
    api.FreeString(ctx, field);
  }
  return kOk;
}

}  // namespace

int register_bucket_commands(VmCtx* ctx) {
  if (api.CreateCommand(ctx, "nd.buckets", buckets_command, "write deny-oom", 0, 0, 0) != kOk) return kErr;
  return api.CreateCommand(ctx, "nd.bucketsget", buckets_get_command, "readonly", 0, 0, 0);
}

}  // namespace neardup::vm
