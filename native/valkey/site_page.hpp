// check.lua's add_site_page (_common.lua) in C++, for ND.BANDS (bands.cpp): a new document of a site
// gets its entry (the site id, 4 bytes big-endian, no partners) and is counted; a new site name is
// interned first: the id on top of the free stack (the state's `sfree` ids in <base>sf, field n -> the
// n-th id freed), else the next id of the state's `sseq`, at most kMaxSiteId. The same writes as the Lua
// functions (HGET <base>sn <name>; for a new name, with a free id HDEL <base>sf <sfree> and HSET <state>
// sfree <sfree - 1>, else HSET <state> sseq <id>; HSET <base>sn <name> <id>, HSET <base>si <id> <name>;
// HINCRBY <base>sp <id> 1; HSET <base>e:<ord / edge group> <ord % edge group> <entry>), so either path
// reads what the other wrote and both store the same bytes. (A page count is never below 1 while its
// site is known: pages_add forgets a site at 0, which +1 never reaches.) check.lua refuses a batch that
// would run out of ids before its first write (site_ids_refusal); the same refusal here, read before any
// write, is a guard that a wrapped id is never written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "group.hpp"
#include "module_api.hpp"

namespace neardup::vm {

// Site ids are 4 bytes in entries and shared counts (keys.MAX_SITE_ID).
inline constexpr long long kMaxSiteId = 4294967295LL;

class SitePage {
 public:
  // The document of ordinal `ord` and site `name`, in the collection of state hash `state` whose site
  // keys start with `base` (keys.py: the record prefix's base).
  SitePage(VmCtx* ctx, VmString* state, const std::string& base, uint64_t edge_group, uint64_t ord,
           VmString* name)
      : ctx_(ctx), state_name_(state), name_(name), keys_(ctx, base, edge_group, ord),
        names_(ctx, keys_.names, kRead | kWrite), pages_(ctx, keys_.pages, kRead | kWrite),
        entry_(ctx, keys_.entry, kRead | kWrite) {}
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
    VmString* have = names_.get(name_);
    known_ = have != nullptr;
    if (known_) {
      ok = number(have, id_);
      api.FreeString(ctx_, have);
    } else {
      state_.emplace(ctx_, state_name_, kRead | kWrite);
      ids_.emplace(ctx_, keys_.ids, kRead | kWrite);
      free_.emplace(ctx_, keys_.free, kRead | kWrite);
      if (state_->wrong_type() || ids_->wrong_type() || free_->wrong_type()) return kWrongType;
      long long seq = 0;
      if (VmString* v = state_->get("sseq")) {
        ok = number(v, seq);
        api.FreeString(ctx_, v);
      }
      if (VmString* v = state_->get("sfree")) {
        ok = ok && number(v, free_count_);
        api.FreeString(ctx_, v);
      }
      if (ok && free_count_ > 0) {
        top_ = std::to_string(free_count_);
        VmString* v = free_->get(top_.c_str());
        ok = v != nullptr && number(v, id_) && id_ >= 1 && id_ <= kMaxSiteId;
        if (v) api.FreeString(ctx_, v);
      } else if (ok) {
        id_ = seq + 1;
        if (id_ > kMaxSiteId) return "ERR site ids of this collection exhausted (last 4294967295)";
      }
    }
    const std::string text = std::to_string(id_);
    id_string_ = api.CreateString(ctx_, text.data(), text.size());
    if (ok && known_) {
      if (VmString* v = pages_.get(id_string_)) {
        ok = number(v, count_);
        api.FreeString(ctx_, v);
      }
    }
    return ok ? nullptr : "ERR ND.BANDS: a site id, sseq, sfree, free id or page count is not valid";
  }

  void apply() {
    if (!known_ && free_count_ > 0) {
      free_->set(top_.c_str(), kHashDelete);
      const std::string left = std::to_string(free_count_ - 1);
      VmString* left_string = api.CreateString(ctx_, left.data(), left.size());
      state_->set("sfree", left_string);
      api.FreeString(ctx_, left_string);
    } else if (!known_) {
      state_->set("sseq", id_string_);
    }
    if (!known_) {
      names_.set(name_, id_string_);
      ids_->set(id_string_, name_);
    }
    const std::string count = std::to_string(count_ + 1);
    VmString* count_string = api.CreateString(ctx_, count.data(), count.size());
    pages_.set(id_string_, count_string);
    api.FreeString(ctx_, count_string);
    const auto id = static_cast<uint64_t>(id_);
    const char entry[4] = {static_cast<char>(id >> 24 & 0xff), static_cast<char>(id >> 16 & 0xff),
                           static_cast<char>(id >> 8 & 0xff), static_cast<char>(id & 0xff)};
    VmString* entry_string = api.CreateString(ctx_, entry, 4);
    entry_.set(keys_.field, entry_string);
    api.FreeString(ctx_, entry_string);
  }

 private:
  static constexpr const char* kWrongType = "WRONGTYPE ND.BANDS: a site key holds a non-hash value";
  static bool number(VmString* value, long long& out) { return api.StringToLongLong(value, &out) == kOk; }

  // The site keys' names and the entry's field, made from the base, the edge group and the ordinal;
  // freed after the keys opened with them are closed (members are destroyed in reverse order).
  struct Names {
    Names(VmCtx* c, const std::string& base, uint64_t group, uint64_t ord)
        : ctx(c), names(make(base + "sn")), ids(make(base + "si")), pages(make(base + "sp")),
          free(make(base + "sf")), entry(make(base + "e:" + std::to_string(ord / group))),
          field(make(std::to_string(ord % group))) {}
    ~Names() {
      for (VmString* s : {names, ids, pages, free, entry, field}) api.FreeString(ctx, s);
    }
    Names(const Names&) = delete;
    Names& operator=(const Names&) = delete;
    VmString* make(const std::string& text) const { return api.CreateString(ctx, text.data(), text.size()); }

    VmCtx* ctx;
    VmString *names, *ids, *pages, *free, *entry, *field;
  };

  VmCtx* ctx_;
  VmString* state_name_;
  VmString* name_;
  Names keys_;
  Group names_, pages_, entry_;
  std::optional<Group> state_, ids_, free_;  // opened for a new site only
  bool known_ = false;
  long long id_ = 0, count_ = 0, free_count_ = 0;
  std::string top_;  // the free stack's top field, when a free id is taken
  VmString* id_string_ = nullptr;
};

}  // namespace neardup::vm
