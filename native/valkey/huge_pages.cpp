// Keeps the server's heap on transparent huge pages after each fork child (append-only file rewrites).
//
// Every document touches ~17 groups at random places in a heap of gigabytes, so past a few hundred
// thousand documents most of those reads miss the TLB, and with 4 KiB pages each miss walks page tables
// that no longer fit in the caches: the server's CPU per document grows with the heap. On 2 MiB pages
// (mimalloc asks for them with MADV_HUGEPAGE) the whole heap fits in the TLB. But a fork shares the
// heap with the child copy-on-write, and the kernel splits every huge page the parent writes to while
// the child lives into 4 KiB pages; khugepaged merges them back at its default pace of 16 MiB per 10
// seconds, half an hour for 3 GB. So when a child dies this module collapses the heap itself, with
// MADV_COLLAPSE (Linux 6.1): a pass over the process's private writable anonymous mappings, a few 2 MiB
// regions per event-loop tick, at most 2 ms of it (each is a copy of 2 MiB), skipping regions less than
// half resident (collapsing fills the rest with zero pages: RSS would grow). A pass stops when a new
// child is born (collapsing pages it shares would copy them) and starts over when the child dies.
//
// Off unless the module is loaded with the argument "collapse-huge-pages" (the embedded server passes
// it when it runs with mimalloc, whose purging is turned off so that it does not split them again).
// Where the kernel refuses (older than 6.1, THP disabled for the process or the system) it logs once
// and stops for good.
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "group.hpp"
#include "module_api.hpp"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace neardup::vm {
namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;
constexpr size_t kPages = kHuge / 4096;
constexpr int kRegionsPerTick = 8;
constexpr auto kTickBudget = std::chrono::milliseconds(2);  // a tick stops early where collapsing is slow
constexpr long long kTickMs = 1;

struct Pass {
  bool enabled = false;      // loaded with collapse-huge-pages and the kernel has not refused
  bool child_alive = false;  // a fork child shares the heap: no collapsing now
  bool running = false;      // a timer is armed
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // 2 MiB-aligned [start, end) still to visit
  size_t range = 0;
  uintptr_t at = 0;
  size_t collapsed = 0, skipped = 0;
  bool ever_collapsed = false;  // one region collapsed since loading: the kernel supports it
  std::chrono::steady_clock::time_point started;
};
Pass pass;

// The private writable anonymous mappings of this process, rounded inward to 2 MiB boundaries.
std::vector<std::pair<uintptr_t, uintptr_t>> anonymous_ranges() {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return out;
  char line[512];
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long start = 0, end = 0, inode = 0;
    char perms[8] = {0};
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &start, &end, perms, &inode, &path_at) < 4) continue;
    const char* path = line + path_at;
    const bool anonymous = inode == 0 && (*path == '\n' || *path == '\0' || std::strncmp(path, "[heap]", 6) == 0);
    if (!anonymous || std::strcmp(perms, "rw-p") != 0) continue;
    const uintptr_t lo = (start + kHuge - 1) & ~(kHuge - 1), hi = end & ~(kHuge - 1);
    if (lo < hi) out.emplace_back(lo, hi);
  }
  std::fclose(maps);
  return out;
}

// Whether at least half of the 2 MiB region at p is resident.
bool mostly_resident(uintptr_t p) {
  unsigned char vec[kPages];
  if (mincore(reinterpret_cast<void*>(p), kHuge, vec) != 0) return false;
  size_t resident = 0;
  for (const unsigned char v : vec) resident += v & 1;
  return resident * 2 >= kPages;
}

void tick(VmCtx* ctx, void*);

void arm(VmCtx* ctx) {
  pass.running = true;
  api.CreateTimer(ctx, kTickMs, tick, nullptr);
}

void tick(VmCtx* ctx, void*) {
  pass.running = false;
  if (!pass.enabled || pass.child_alive) return;
  const auto until = std::chrono::steady_clock::now() + kTickBudget;
  for (int done = 0; done < kRegionsPerTick && pass.range < pass.ranges.size() &&
                     std::chrono::steady_clock::now() < until;) {
    const auto [lo, hi] = pass.ranges[pass.range];
    if (pass.at < lo) pass.at = lo;
    if (pass.at >= hi) {
      pass.range += 1;
      continue;
    }
    const uintptr_t p = pass.at;
    pass.at += kHuge;
    if (!mostly_resident(p)) {
      pass.skipped += 1;
      continue;
    }
    ++done;
    if (madvise(reinterpret_cast<void*>(p), kHuge, MADV_COLLAPSE) == 0) {
      pass.collapsed += 1;
      pass.ever_collapsed = true;
    } else if (errno == EINVAL && pass.ever_collapsed) {  // this mapping cannot (VM_NOHUGEPAGE...): the next
      pass.range += 1;
    } else if (errno == EINVAL || errno == EPERM) {  // never worked here (kernel, THP off): stop for good
      api.Log(ctx, "notice", "neardup: MADV_COLLAPSE refused (%s): huge pages are not collapsed after forks",
              std::strerror(errno));
      pass.enabled = false;
      return;
    }  // EAGAIN (no huge page free now), ENOMEM (unmapped meanwhile): leave the region to khugepaged
  }
  if (pass.range < pass.ranges.size()) {
    arm(ctx);
    return;
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - pass.started);
  api.Log(ctx, "notice",
          "neardup: huge pages collapsed after a fork child: %zu regions of 2 MiB (%zu less than half "
          "resident skipped) in %lld ms",
          pass.collapsed, pass.skipped, static_cast<long long>(ms.count()));
}

void on_fork_child(VmCtx* ctx, VmEvent, uint64_t subevent, void*) {
  if (subevent == kForkChildBorn) {
    pass.child_alive = true;
    return;
  }
  if (subevent != kForkChildDied) return;
  pass.child_alive = false;
  if (!pass.enabled) return;
  pass.ranges = anonymous_ranges();
  pass.range = 0;
  pass.at = 0;
  pass.collapsed = pass.skipped = 0;
  pass.started = std::chrono::steady_clock::now();
  if (!pass.running) arm(ctx);
}

}  // namespace

int register_huge_pages(VmCtx* ctx, VmString** argv, int argc) {
  for (int i = 0; i < argc; ++i) {
    size_t len = 0;
    const char* arg = api.StringPtrLen(argv[i], &len);
    if (std::string(arg, len) != "collapse-huge-pages") {
      api.Log(ctx, "warning", "neardup: unknown module argument '%.*s'", static_cast<int>(len), arg);
      return kErr;
    }
    pass.enabled = true;
  }
  if (!pass.enabled) return kOk;
  return api.SubscribeToServerEvent(ctx, VmEvent{kEventForkChild, 1}, on_fork_child);
}

}  // namespace neardup::vm
