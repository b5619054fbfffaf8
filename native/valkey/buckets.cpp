// The cluster's band-bucket loops in C++ (app/storage/scripts/cluster_ops.lua and cluster_bands.lua do
// the same in Lua, _cluster_family.lua): on a cluster the band table is split into families, each one
// slot, each growing its own groups by linear hashing; a check's appends, removals and reads arrive as
// packed records, one call per node. Same data, byte for byte, as the Lua loops.
//
//   ND.BUCKETS 1 <prefix> <cap> <families> <level> <target> <appends> <removals> <width>
//     1         protocol version
//     prefix    band family prefix: family f's shape is the hash prefix + f + "}" (fields L, S, N: its
//               level, split pointer and fields; absent: <level>, 0, 0) and its groups prefix + f + "}" + g
//     cap       most ordinals a bucket keeps (keys.BUCKET_CAP)
//     families  F, a power of two: a band key's group hash h (its first 4 bytes, little-endian) is in
//               family h mod F, and in its family's group floor(h / F) mod 2^L (mod 2^(L+1) below S)
//     level     the level a family's groups start at
//     target    fields per group before a family splits one (per call, one split per `target` appends
//               to the family, and up to 4 more)
//     appends   packed records (family number, 4 bytes big-endian; key, <width> bytes; ordinal, 5 bytes
//               big-endian): add the ordinal to the bucket unless it is there already or the bucket is full
//     removals  records of the same shape: take the ordinal out; delete the field when it empties
//     width     the bytes of a record's key, 4..8: a band key's 8, a passage fingerprint key's 4 (the
//               passage index's families on a cluster take the same records and code)
//   -> the number of band fields created
//
//   ND.BUCKETSGET 1 <prefix> <families> <level> <records> <width>
//     records   packed (family number, 4 bytes big-endian; key, <width> bytes)
//   -> the bucket values in order ('' where absent)
//
// The keys are packed in the arguments, so the server cannot route these commands by their keys: on a
// cluster each command checks with the server's routing every key it would touch (SlotRouting,
// group.hpp: the shapes, the groups, and the groups the splits would read and make) before it reads or
// writes anything, and answers an error naming "a non local key" where another node serves the slot
// (or the slot is migrating away and the key is gone from here), as the Lua loops' own commands are
// refused. The client then learns the slot map again and sends the records where their slots live.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"
#include "table.hpp"

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

// A family's shape as a call reads it, and how many fields the call created (minus those it removed).
struct Family {
  std::string name;  // its shape key; its groups are name + group number
  long long level = 0, split = 0, fields = 0;  // the shape the records' groups are found in
  long long from_level = 0, from_split = 0, splits = 0;  // the shape before this call's splits
  long long added = 0, appends = 0;
  bool changed = false;  // a field was created or deleted, or a group split: the shape is written
};

long long shape_field(VmCtx* ctx, Group& shape, const char* field, long long absent) {
  VmString* value = shape.get(field);
  if (!value) return absent;
  long long out = absent;
  if (api.StringToLongLong(value, &out) != kOk || out < 0) out = absent;
  api.FreeString(ctx, value);
  return out;
}

// The families and groups of one call, each key checked (served by this node, a hash) before anything
// is written.
class Families {
 public:
  // `records`: how many records the call has (the most groups it may open).
  Families(VmCtx* ctx, std::string prefix, uint32_t count, long long level, int mode, size_t records)
      : ctx_(ctx), prefix_(std::move(prefix)), count_(count), level_(level), mode_(mode),
        routing_(ctx, 2 * records) {
    while ((uint32_t{1} << shift_) < count_) ++shift_;
  }
  int shift() const { return shift_; }
  // The family (its shape read once), or nullptr with error() set.
  Family* family(uint32_t number) {
    if (number >= count_) {
      error_ = "ERR a band record's family number is out of range";
      return nullptr;
    }
    auto found = families_.find(number);
    if (found != families_.end()) return &found->second;
    Family f;
    f.name = prefix_ + std::to_string(number) + "}";
    VmString* name = api.CreateString(ctx_, f.name.data(), f.name.size());
    {
      Group shape(ctx_, name, kRead);
      if (!check(shape, name)) {
        api.FreeString(ctx_, name);
        return nullptr;
      }
      f.level = shape_field(ctx_, shape, "L", level_);
      f.split = shape_field(ctx_, shape, "S", 0);
      f.fields = shape_field(ctx_, shape, "N", 0);
    }
    api.FreeString(ctx_, name);
    return &families_.emplace(number, std::move(f)).first->second;
  }
  // The group of band key `field` in family f: opened once, checked.
  Group* group(const Family& f, const char* field) {
    const uint64_t h = little_endian32(field) >> shift_;
    const uint64_t n = uint64_t{1} << f.level;
    const uint64_t g = h % n < static_cast<uint64_t>(f.split) ? h % (2 * n) : h % n;
    return open(f.name, g);
  }
  // Opens (and checks) group `number` of the family whose shape is `name`.
  Group* open(const std::string& name, uint64_t number) {
    auto& group = groups_[name + std::to_string(number)];
    if (!group) {
      group = std::make_unique<Group>(ctx_, name, number, mode_);
      if (!check(*group, group->name())) return nullptr;
    }
    if (group->wrong_type()) {
      error_ = "WRONGTYPE a band group key holds a non-hash value";
      return nullptr;
    }
    return group.get();
  }
  bool check(Group& key, VmString* name) {
    std::string why;
    const bool here = key.key() && api.KeyType(key.key()) != kKeyTypeEmpty;
    if (!routing_.served(name, here, why)) {
      error_ = "ERR a band group key of this call is a non local key: " + why;
      return false;
    }
    if (key.wrong_type()) {
      error_ = "WRONGTYPE a band group key holds a non-hash value";
      return false;
    }
    return true;
  }
  // Closes every group (splits open their own handles).
  void close_groups() { groups_.clear(); }
  std::unordered_map<uint32_t, Family>& all() { return families_; }
  const std::string& error() const { return error_; }

 private:
  VmCtx* ctx_;
  std::string prefix_;
  uint32_t count_;
  long long level_;
  int mode_;
  int shift_ = 0;
  SlotRouting routing_;
  std::string error_;
  std::unordered_map<uint32_t, Family> families_;
  std::unordered_map<std::string, std::unique_ptr<Group>> groups_;
};

// The most splits a family makes in one call: as many as the call's appends to it need, and up to 4
// more (a family behind its target catches up over a few calls).
long long most_splits(const Family& f, long long target) { return 4 + f.appends / target; }

// The table of family f for table.hpp's split_once and grow (its fields as they will be after the call's
// `extra` more).
Table family_table(const Family& f, long long extra, long long target, int shift) {
  Table t;
  t.prefix = f.name;
  t.level = f.level;
  t.split = f.split;
  t.fields = f.fields + extra;
  t.target = target;
  t.top = 32 - shift;
  t.shift = shift;
  return t;
}

// The offset of `ordinal` in the bucket value (aligned to `width`), or npos.
size_t find(const char* value, size_t len, const char* ordinal, size_t width) {
  for (size_t q = 0; q + width <= len; q += width)
    if (std::memcmp(value + q, ordinal, width) == 0) return q;
  return std::string::npos;
}

// The bytes of a record's key (the command's last argument): 4 (a fingerprint key) to 8 (a band key).
bool key_width(VmCtx* ctx, VmString* arg, size_t& width, const char* command) {
  long long w = 0;
  if (api.StringToLongLong(arg, &w) == kOk && w >= 4 && w <= 8) {
    width = static_cast<size_t>(w);
    return true;
  }
  const std::string message = std::string("ERR ") + command + ": width must be 4..8";
  api.ReplyWithError(ctx, message.c_str());
  return false;
}

bool arguments(VmCtx* ctx, VmString** argv, long long& families, long long& level, const char* command) {
  std::string why;
  if (api.StringToLongLong(argv[0], &families) != kOk || families < 1 || families > (1LL << 24) ||
      (families & (families - 1)) != 0)
    why = "families must be a power of two, 1..2^24";
  else if (api.StringToLongLong(argv[1], &level) != kOk || level < 0 ||
           level > 32 - static_cast<long long>(__builtin_ctzll(static_cast<unsigned long long>(families))))
    why = "level out of range";
  if (why.empty()) return true;
  const std::string message = std::string("ERR ") + command + ": " + why;
  api.ReplyWithError(ctx, message.c_str());
  return false;
}

int buckets_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 10) return api.WrongArity(ctx);
  if (!version_one(argv[1])) return api.ReplyWithError(ctx, "ERR ND.BUCKETS: unknown protocol version");
  long long cap = 0, families = 0, level = 0, target = 0;
  if (api.StringToLongLong(argv[3], &cap) != kOk || cap < 1 || cap > (1LL << 24))
    return api.ReplyWithError(ctx, "ERR ND.BUCKETS: cap must be 1..2^24");
  if (!arguments(ctx, argv + 4, families, level, "ND.BUCKETS")) return kOk;
  if (api.StringToLongLong(argv[6], &target) != kOk || target < 1 || target > (1LL << 20))
    return api.ReplyWithError(ctx, "ERR ND.BUCKETS: target must be 1..2^20");
  size_t kw = 0;
  if (!key_width(ctx, argv[9], kw, "ND.BUCKETS")) return kOk;
  constexpr size_t w = kOrdinal;
  const size_t record = 4 + kw + kOrdinal, full = w * static_cast<size_t>(cap);
  size_t len = 0, appends_len = 0, removals_len = 0;
  const char* prefix = api.StringPtrLen(argv[2], &len);
  const char* appends = api.StringPtrLen(argv[7], &appends_len);
  const char* removals = api.StringPtrLen(argv[8], &removals_len);
  if (appends_len % record != 0 || removals_len % record != 0)
    return api.ReplyWithError(ctx, "ERR ND.BUCKETS: records are 9 + width bytes each");

  Families groups(ctx, std::string(prefix, len), static_cast<uint32_t>(families), level, kRead | kWrite,
                  (appends_len + removals_len) / record);
  // Every key first: the shapes, the keys of the splits the appends may need (one per `target` of a
  // family's appends, and up to 4 more: made before the appends, so no group passes the target much
  // even in a call of thousands of records), and the records' groups in the shape after the splits.
  for (const auto& [blob, size, adds] :
       {std::tuple{appends, appends_len, 1}, std::tuple{removals, removals_len, 0}})
    for (size_t p = 0; p < size; p += record) {
      Family* f = groups.family(group_at(blob + p));
      if (!f) return api.ReplyWithError(ctx, groups.error().c_str());
      f->appends += adds;
    }
  bool splits = false;
  for (auto& [number, f] : groups.all()) {
    Table t = family_table(f, f.appends, target, groups.shift());
    f.from_level = f.level;
    f.from_split = f.split;
    for (; f.splits < most_splits(f, target) && t.level < t.top; ++f.splits) {
      if (t.fields <= t.target * static_cast<long long>(t.n() + static_cast<uint64_t>(t.split))) break;
      if (!groups.open(f.name, static_cast<uint64_t>(t.split)) ||
          !groups.open(f.name, static_cast<uint64_t>(t.split) + t.n()))
        return api.ReplyWithError(ctx, groups.error().c_str());
      advance(t);
    }
    f.level = t.level;
    f.split = t.split;
    splits = splits || f.splits > 0;
  }
  for (const auto& [blob, size] : {std::pair{appends, appends_len}, std::pair{removals, removals_len}})
    for (size_t p = 0; p < size; p += record)
      if (!groups.group(*groups.family(group_at(blob + p)), blob + p + 4))
        return api.ReplyWithError(ctx, groups.error().c_str());
  if (appends_len + removals_len > 0) api.ReplicateVerbatim(ctx);
  if (splits) {
    groups.close_groups();  // split_once opens its own handles; the groups are opened again below
    for (auto& [number, f] : groups.all()) {
      Table t = family_table(f, 0, target, groups.shift());
      t.level = f.from_level;
      t.split = f.from_split;
      for (long long i = 0; i < f.splits; ++i) split_once(ctx, t);
      f.changed = f.changed || f.splits > 0;
    }
  }

  long long created = 0;
  std::string changed;
  for (size_t p = 0; p < appends_len; p += record) {
    Family& f = *groups.family(group_at(appends + p));
    Group& group = *groups.group(f, appends + p + 4);
    const char* ordinal = appends + p + 4 + kw;
    VmString* field = api.CreateString(ctx, appends + p + 4, kw);
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
      f.added += 1;
      f.changed = true;
    }
    api.FreeString(ctx, field);
  }
  for (size_t p = 0; p < removals_len; p += record) {
    Family& f = *groups.family(group_at(removals + p));
    Group& group = *groups.group(f, removals + p + 4);
    VmString* field = api.CreateString(ctx, removals + p + 4, kw);
    if (VmString* value = group.get(field)) {
      const char* v = api.StringPtrLen(value, &len);
      const size_t at = find(v, len, removals + p + 4 + kw, w);
      if (at != std::string::npos) {
        if (len == w) {
          group.set(field, kHashDelete);
          if (f.fields + f.added > 0) f.added -= 1;
          f.changed = true;
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
  // Each family whose fields changed or split stores its shape.
  for (auto& [number, f] : groups.all()) {
    if (!f.changed) continue;
    const long long fields = f.fields + f.added;
    VmString* name = api.CreateString(ctx, f.name.data(), f.name.size());
    {
      Group shape(ctx, name, kRead | kWrite);
      for (const auto& [field, value] : {std::pair{"L", f.level}, std::pair{"S", f.split}, std::pair{"N", fields}}) {
        const std::string digits = std::to_string(value);
        VmString* text = api.CreateString(ctx, digits.data(), digits.size());
        shape.set(field, text);
        api.FreeString(ctx, text);
      }
    }
    api.FreeString(ctx, name);
  }
  return api.ReplyWithLongLong(ctx, created);
}

int buckets_get_command(VmCtx* ctx, VmString** argv, int argc) {
  if (argc != 7) return api.WrongArity(ctx);
  if (!version_one(argv[1])) return api.ReplyWithError(ctx, "ERR ND.BUCKETSGET: unknown protocol version");
  long long families = 0, level = 0;
  if (!arguments(ctx, argv + 3, families, level, "ND.BUCKETSGET")) return kOk;
  size_t kw = 0;
  if (!key_width(ctx, argv[6], kw, "ND.BUCKETSGET")) return kOk;
  const size_t record = 4 + kw;
  size_t len = 0, records_len = 0;
  const char* prefix = api.StringPtrLen(argv[2], &len);
  const char* records = api.StringPtrLen(argv[5], &records_len);
  if (records_len % record != 0)
    return api.ReplyWithError(ctx, "ERR ND.BUCKETSGET: records are 4 + width bytes each");
  Families groups(ctx, std::string(prefix, len), static_cast<uint32_t>(families), level, kRead,
                  records_len / record);
  std::vector<Group*> of_record;
  of_record.reserve(records_len / record);
  for (size_t p = 0; p < records_len; p += record) {
    Family* f = groups.family(group_at(records + p));
    Group* group = f ? groups.group(*f, records + p + 4) : nullptr;
    if (!group) return api.ReplyWithError(ctx, groups.error().c_str());
    of_record.push_back(group);
  }
  api.ReplyWithArray(ctx, static_cast<long>(of_record.size()));
  for (size_t i = 0; i < of_record.size(); ++i) {
    VmString* field = api.CreateString(ctx, records + record * i + 4, kw);
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
