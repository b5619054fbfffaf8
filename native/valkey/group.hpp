// A hash key of the band table (one group), opened for one operation: shared by ND.BANDS (bands.cpp)
// and the cluster's bucket commands (buckets.cpp); ND.LINK (sites.cpp) opens site keys with it.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>

#include "module_api.hpp"

namespace neardup::vm {

// Bytes of an ordinal, big-endian, wherever the keys hold one (band buckets, site entries; keys.py's
// ORDINAL_WIDTH): 2^40 - 1 insertions per collection.
inline constexpr size_t kOrdinal = 5;

// The unsigned big-endian number of `width` bytes at p (ordinals in buckets, site ids in entries).
inline uint64_t big_endian(const char* p, size_t width) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  uint64_t out = 0;
  for (size_t i = 0; i < width; ++i) out = out << 8 | b[i];
  return out;
}

// The unsigned little-endian number of the 4 bytes at p (band keys' group hash, blob counts).
inline uint32_t little_endian32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 | static_cast<uint32_t>(b[2]) << 16 |
         static_cast<uint32_t>(b[3]) << 24;
}

// Whether this node serves the slot of the key `name` to this client, as the server routes a command
// on that key: on a cluster, a module command that declares no keys (its keys are packed in its
// arguments) is never routed by the server, so it asks before it touches a key. A read of the key
// through RM_Call runs the server's own cluster check: refused where another node serves the slot
// (MOVED), where the slot is migrating away and the key is gone from here already (ASK), or while the
// cluster is down; `why` then holds the server's message. Always true on a standalone server and for
// what this node must apply (its primary's stream, its append-only file). `cluster`: the context's
// GetContextFlags has kCtxFlagsCluster (asked once per command by the caller).
inline bool served_here(VmCtx* ctx, bool cluster, VmString* name, std::string& why) {
  if (!cluster || (api.MustObeyClient && api.MustObeyClient(ctx))) return true;
  VmCallReply* reply = api.Call(ctx, "EXISTS", "Es", name);
  if (!reply) {
    why = "the server's cluster check failed";
    return false;
  }
  const bool served = api.CallReplyType(reply) != kReplyError;
  if (!served) {
    size_t len = 0;
    const char* message = api.CallReplyStringPtr(reply, &len);
    why.assign(message ? message : "", message ? len : 0);
  }
  api.FreeCallReply(reply);
  return served;
}

// The commands of one server's layout (ND.BANDS, ND.PASSAGES, ND.POSTINGS) name keys that they do
// not declare, and check no slot: on a cluster node they are refused, with nothing read or written (the
// cluster's store uses ND.BUCKETS and ND.BUCKETSGET, and ND.LINK, which check every key they touch).
// What a node must apply (its primary's stream, its append-only file) is applied. Returns true when
// the command was refused (its error reply sent).
inline bool standalone_only(VmCtx* ctx, const char* command) {
  if ((api.GetContextFlags(ctx) & kCtxFlagsCluster) == 0 || (api.MustObeyClient && api.MustObeyClient(ctx)))
    return false;
  const std::string message = std::string("ERR ") + command +
                              " runs on a standalone server only: it checks no key's slot (a cluster's "
                              "store uses ND.BUCKETS and ND.BUCKETSGET)";
  api.ReplyWithError(ctx, message.c_str());
  return true;
}

// served_here for the many keys of one command. A command that may touch more than kAskEach keys
// reads once which slots this node serves (CLUSTER SLOTS, its own view, which the server keeps
// ready-made), and a key that is here already in such a slot is served here without a question: the
// server's check serves an existing key of a slot it owns, migrating or not, and nothing can change
// while the command runs. Any other key (another node's slot, or a key not here yet: its slot may be
// migrating away, ASK) is asked about as served_here does, and so is the first key, which refuses
// the command while the cluster is down. A command with fewer keys asks about each.
class SlotRouting {
 public:
  // Keys up to which asking about each costs less than reading the slot table once.
  static constexpr size_t kAskEach = 48;
  static constexpr size_t kNodeIdLength = 40;

  // `keys`: the most keys the command may touch.
  SlotRouting(VmCtx* ctx, size_t keys)
      : ctx_(ctx),
        routed_((api.GetContextFlags(ctx) & kCtxFlagsCluster) != 0 &&
                !(api.MustObeyClient && api.MustObeyClient(ctx))),
        ask_each_(keys <= kAskEach || !api.ClusterKeySlot) {}

  // `here`: the key exists on this node.
  bool served(VmString* name, bool here, std::string& why) {
    if (!routed_) return true;
    if (ask_each_ || !mine_) {
      if (!served_here(ctx_, true, name, why)) return false;
      if (!ask_each_) mine_ = read_my_slots();
      return true;
    }
    if (here && mine_->test(api.ClusterKeySlot(name) & 16383)) return true;
    return served_here(ctx_, true, name, why);
  }

 private:
  // The slots CLUSTER SLOTS gives to this node (each entry: first slot, last slot, then the primary
  // as [ip, port, id, ...]). Empty where it cannot be read: every key is then asked about.
  std::unique_ptr<std::bitset<16384>> read_my_slots() const {
    auto slots = std::make_unique<std::bitset<16384>>();
    const char* myself = api.GetMyClusterID();
    VmCallReply* reply = api.Call(ctx_, "CLUSTER", "Ec", "SLOTS");
    if (!reply || !myself) return slots;
    const std::string me(myself, kNodeIdLength);  // the server's node name: not NUL-terminated
    const size_t ranges = api.CallReplyType(reply) == kReplyArray ? api.CallReplyLength(reply) : 0;
    for (size_t r = 0; r < ranges; ++r) {
      VmCallReply* range = api.CallReplyArrayElement(reply, r);
      if (!range || api.CallReplyType(range) != kReplyArray || api.CallReplyLength(range) < 3) continue;
      VmCallReply* primary = api.CallReplyArrayElement(range, 2);
      if (!primary || api.CallReplyType(primary) != kReplyArray || api.CallReplyLength(primary) < 3) continue;
      size_t len = 0;
      const char* id = api.CallReplyStringPtr(api.CallReplyArrayElement(primary, 2), &len);
      if (!id || me.compare(0, std::string::npos, id, len) != 0) continue;
      const long long first = api.CallReplyInteger(api.CallReplyArrayElement(range, 0));
      const long long last = api.CallReplyInteger(api.CallReplyArrayElement(range, 1));
      for (long long slot = first; slot <= last && slot < 16384; ++slot)
        if (slot >= 0) slots->set(static_cast<size_t>(slot));
    }
    api.FreeCallReply(reply);
    return slots;
  }

  VmCtx* ctx_;
  bool routed_;
  bool ask_each_;
  std::unique_ptr<std::bitset<16384>> mine_;
};

// A key opened for the duration of one operation: by "prefix + number" (a table's group: the name is
// freed with it), by the caller's name, or already opened by the caller (who closes it). Group (a hash)
// and StringKey (packed_index.hpp, a string) add what they read and write.
class OpenedKey {
 public:
  OpenedKey(VmCtx* ctx, const std::string& prefix, uint64_t number, int mode) : ctx_(ctx) {
    const std::string name = prefix + std::to_string(number);
    name_ = api.CreateString(ctx, name.data(), name.size());
    key_ = api.OpenKey(ctx, name_, mode);
  }
  // A key by its full name (the caller's string: not freed here).
  OpenedKey(VmCtx* ctx, VmString* name, int mode) : ctx_(ctx), key_(api.OpenKey(ctx, name, mode)) {}
  // A key the caller opened and closes (sites.cpp's KeyCache).
  OpenedKey(VmCtx* ctx, VmKey* key) : ctx_(ctx), key_(key), owned_(false) {}
  ~OpenedKey() {
    if (key_ && owned_) api.CloseKey(key_);
    if (name_) api.FreeString(ctx_, name_);
  }
  OpenedKey(const OpenedKey&) = delete;
  OpenedKey& operator=(const OpenedKey&) = delete;

  VmKey* key() const { return key_; }
  // The key's name where this object made it from a prefix and a number (else nullptr).
  VmString* name() const { return name_; }

 protected:
  // Whether the key holds a value of another type than `type` (an empty key holds none).
  bool holds_other_than(int type) const {
    if (!key_) return false;
    const int held = api.KeyType(key_);
    return held != kKeyTypeEmpty && held != type;
  }

  VmCtx* ctx_;
  VmString* name_ = nullptr;
  VmKey* key_;
  bool owned_ = true;
};

// One group's hash (or any hash key), opened for the duration of one operation.
class Group : public OpenedKey {
 public:
  using OpenedKey::OpenedKey;

  bool wrong_type() const { return holds_other_than(kKeyTypeHash); }
  // The field's value (owned by the caller), or nullptr.
  VmString* get(VmString* field) const {
    if (!key_ || api.KeyType(key_) != kKeyTypeHash) return nullptr;
    VmString* value = nullptr;
    api.HashGet(key_, kHashNone, field, &value, nullptr);
    return value;
  }
  void set(VmString* field, VmString* value) { api.HashSet(key_, kHashNone, field, value, nullptr); }
  // The same with the field as a C string (kHashCFields): no module string made and freed for it.
  VmString* get(const char* field) const {
    if (!key_ || api.KeyType(key_) != kKeyTypeHash) return nullptr;
    VmString* value = nullptr;
    api.HashGet(key_, kHashCFields, field, &value, nullptr);
    return value;
  }
  void set(const char* field, VmString* value) { api.HashSet(key_, kHashCFields, field, value, nullptr); }
  // Sets the field only where it is absent; whether it did.
  bool set_new(VmString* field, VmString* value) {
    return api.HashSet(key_, kHashNx | kHashCountAll, field, value, nullptr) == 1;
  }
  // A bucket's append: the field's value `v` (`len` bytes, read with get) with `ord` appended, unless
  // it already holds `full` bytes (a full bucket takes no more); `scratch` is reused between calls.
  void append(VmString* field, const char* v, size_t len, const char* ord, size_t width, size_t full,
              std::string& scratch) {
    if (len >= full) return;
    scratch.assign(v, len);
    scratch.append(ord, width);
    VmString* longer = api.CreateString(ctx_, scratch.data(), scratch.size());
    set(field, longer);
    api.FreeString(ctx_, longer);
  }
};

// Registers ND.BUCKETS and ND.BUCKETSGET (buckets.cpp).
int register_bucket_commands(VmCtx* ctx);

// Registers ND.LINK (sites.cpp).
int register_site_commands(VmCtx* ctx);

// With the load argument "collapse-huge-pages", collapses the heap into huge pages after each fork
// child (huge_pages.cpp); other arguments are refused.
int register_huge_pages(VmCtx* ctx, VmString** argv, int argc);

}  // namespace neardup::vm
