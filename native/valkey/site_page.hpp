// check.lua's add_site_page (_common.lua) in C++, for ND.BANDS's protocol 4 (bands.cpp): a new document
// of a site gets its entry (the site id, 4 bytes big-endian, no partners) and is counted; a new site
// name is interned first (the next id from the state's `sseq`). The same writes as the Lua function
// (HGET <names> <name>; for a new name HINCRBY <state> sseq 1, HSET <names> <name> <id>, HSET <ids> <id>
// <name>; HINCRBY <pages> <id> 1; HSET <entry key> <entry field> <entry>), so either path reads what
// the other wrote and both store the same bytes. (A page count is never below 1 while its site is
// known: pages_add forgets a site at 0, which +1 never reaches.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "group.hpp"
#include "module_api.hpp"

namespace neardup::vm {

class SitePage {
 public:
  // args: <state> <names> <ids> <pages> <entry key> <entry field> <name>
  SitePage(VmCtx* ctx, VmString** args)
      : ctx_(ctx), args_(args), names_(ctx, args[1], kRead | kWrite), pages_(ctx, args[3], kRead | kWrite),
        entry_(ctx, args[4], kRead | kWrite) {}
  ~SitePage() {
    if (id_string_) api.FreeString(ctx_, id_string_);
  }
  SitePage(const SitePage&) = delete;
  SitePage& operator=(const SitePage&) = delete;

  // Every read, before any write: an error message, or nullptr. The state and the id -> name hash
  // are opened only for a new site (most pages are of a known one).
  const char* prepare() {
    if (names_.wrong_type() || pages_.wrong_type() || entry_.wrong_type()) return kWrongType;
    bool ok = true;
    VmString* have = names_.get(args_[6]);
    known_ = have != nullptr;
    if (known_) {
      ok = number(have, id_);
      api.FreeString(ctx_, have);
    } else {
      state_.emplace(ctx_, args_[0], kRead | kWrite);
      ids_.emplace(ctx_, args_[2], kRead | kWrite);
      if (state_->wrong_type() || ids_->wrong_type()) return kWrongType;
      long long seq = 0;
      VmString* sseq = api.CreateString(ctx_, "sseq", 4);
      if (VmString* v = state_->get(sseq)) {
        ok = number(v, seq);
        api.FreeString(ctx_, v);
      }
      api.FreeString(ctx_, sseq);
      id_ = seq + 1;
    }
    const std::string text = std::to_string(id_);
    id_string_ = api.CreateString(ctx_, text.data(), text.size());
    if (ok && known_) {
      if (VmString* v = pages_.get(id_string_)) {
        ok = number(v, count_);
        api.FreeString(ctx_, v);
      }
    }
    return ok ? nullptr : "ERR ND.BANDS: a site id, sseq or page count is not an integer";
  }

  void apply() {
    if (!known_) {
      VmString* sseq = api.CreateString(ctx_, "sseq", 4);
      state_->set(sseq, id_string_);
      api.FreeString(ctx_, sseq);
      names_.set(args_[6], id_string_);
      ids_->set(id_string_, args_[6]);
    }
    const std::string count = std::to_string(count_ + 1);
    VmString* count_string = api.CreateString(ctx_, count.data(), count.size());
    pages_.set(id_string_, count_string);
    api.FreeString(ctx_, count_string);
    const auto id = static_cast<uint64_t>(id_);
    const char entry[4] = {static_cast<char>(id >> 24 & 0xff), static_cast<char>(id >> 16 & 0xff),
                           static_cast<char>(id >> 8 & 0xff), static_cast<char>(id & 0xff)};
    VmString* entry_string = api.CreateString(ctx_, entry, 4);
    entry_.set(args_[5], entry_string);
    api.FreeString(ctx_, entry_string);
  }

 private:
  static constexpr const char* kWrongType = "WRONGTYPE ND.BANDS: a site key holds a non-hash value";
  static bool number(VmString* value, long long& out) { return api.StringToLongLong(value, &out) == kOk; }

  VmCtx* ctx_;
  VmString** args_;
  Group names_, pages_, entry_;
  std::optional<Group> state_, ids_;  // opened for a new site only
  bool known_ = false;
  long long id_ = 0, count_ = 0;
  VmString* id_string_ = nullptr;
};

}  // namespace neardup::vm
