// A hash key of the band table (one group), opened for one operation: shared by ND.BANDS (bands.cpp)
// and the cluster's bucket commands (buckets.cpp); ND.LINK (sites.cpp) opens site keys with it.
#pragma once

#include <cstdint>
#include <string>

#include "module_api.hpp"

namespace neardup::vm {

// One group's hash, opened for the duration of one operation.
class Group {
 public:
  Group(VmCtx* ctx, const std::string& prefix, uint64_t number, int mode) : ctx_(ctx) {
    const std::string name = prefix + std::to_string(number);
    name_ = api.CreateString(ctx, name.data(), name.size());
    key_ = api.OpenKey(ctx, name_, mode);
  }
  ~Group() {
    if (key_) api.CloseKey(key_);
    api.FreeString(ctx_, name_);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  bool wrong_type() const {
    if (!key_) return false;
    const int type = api.KeyType(key_);
    return type != kKeyTypeEmpty && type != kKeyTypeHash;
  }
  // The field's value (owned by the caller), or nullptr.
  VmString* get(VmString* field) const {
    if (!key_ || api.KeyType(key_) != kKeyTypeHash) return nullptr;
    VmString* value = nullptr;
    api.HashGet(key_, kHashNone, field, &value, nullptr);
    return value;
  }
  void set(VmString* field, VmString* value) { api.HashSet(key_, kHashNone, field, value, nullptr); }
  // Sets the field only where it is absent; whether it did.
  bool set_new(VmString* field, VmString* value) {
    return api.HashSet(key_, kHashNx | kHashCountAll, field, value, nullptr) == 1;
  }
  VmKey* key() const { return key_; }

 private:
  VmCtx* ctx_;
  VmString* name_;
  VmKey* key_;
};

// Registers ND.BUCKETS and ND.BUCKETSGET (buckets.cpp).
int register_bucket_commands(VmCtx* ctx);

// Registers ND.LINK (sites.cpp).
int register_site_commands(VmCtx* ctx);

}  // namespace neardup::vm
