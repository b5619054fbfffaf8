// The dispatch table: the best kernels this CPU supports, chosen once at load time, or the ones named
// by NEARDUP_FORCE_ISA (serial, avx2, avx512). Forcing one the CPU lacks is an error, not a crash.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "neardup.hpp"

namespace neardup {
namespace {

const Kernels kSerial{"serial", minhash_serial, similarity_serial, ascii_word_mask_serial, intersect_serial};
#ifdef NEARDUP_X86
const Kernels kAvx2{"avx2", minhash_avx2, similarity_avx2, ascii_word_mask_avx2, intersect_avx2};
const Kernels kAvx512{"avx512", minhash_avx512, similarity_avx512, ascii_word_mask_avx512,
                      intersect_avx512};
#endif

const Kernels& choose() {
  const std::vector<const Kernels*> available = available_kernels();
  const char* forced = std::getenv("NEARDUP_FORCE_ISA");
  if (forced && *forced) {
    for (const Kernels* k : available)
      if (std::string(forced) == k->name) return *k;
    std::string names;
    for (const Kernels* k : available) names += std::string(names.empty() ? "" : ", ") + k->name;
    throw std::runtime_error("NEARDUP_FORCE_ISA=" + std::string(forced) +
                             " is not available on this CPU; choose one of: " + names);
  }
  return *available.back();
}

}  // namespace

std::vector<const Kernels*> available_kernels() {
  std::vector<const Kernels*> out{&kSerial};
#ifdef NEARDUP_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) out.push_back(&kAvx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) out.push_back(&kAvx512);
#endif
  return out;
}

const Kernels* find_kernels(const std::string& name) {
  for (const Kernels* k : available_kernels())
    if (name == k->name) return k;
  return nullptr;
}

const Kernels& active_kernels() {
  static const Kernels& chosen = choose();
  return chosen;
}

}  // namespace neardup
