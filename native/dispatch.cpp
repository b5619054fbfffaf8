// The dispatch table: the best kernels this CPU supports, chosen once at load time, or the ones named
// by NEARDUP_FORCE_ISA (serial, avx2, avx512, avx512dq). Forcing one the CPU lacks is an error, not a
// crash.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "neardup.hpp"

namespace neardup {
namespace {

const Kernels kSerial{"serial", minhash_serial, similarity_serial, ascii_word_mask_serial, intersect_serial,
                      oph_serial, shingle_keys_serial, word_tokens_serial, adaptive_similarity_serial};
#ifdef NEARDUP_X86
const Kernels kAvx2{"avx2", minhash_avx2, similarity_avx2, ascii_word_mask_avx2, intersect_avx2, oph_serial,
                    shingle_keys_serial, word_tokens_serial, adaptive_similarity_avx2};
// The verification kernel of the avx512 tables counts with VPOPCNTDQ where the CPU has it.
const Kernels kAvx512{"avx512", minhash_avx512, similarity_avx512, ascii_word_mask_avx512, intersect_avx512,
                      oph_serial, shingle_keys_serial, word_tokens_serial, adaptive_similarity_avx512};
// AVX-512 with the 64-bit multiply of AVX-512DQ for the MinHash slots and the one-permutation bins; the same
// integers (kernels_avx512.cpp). Chosen by default on AMD only, where vpmullq is one micro-op. Its exact
// merge is AVX2's 8 x 8 blocks: on AMD Zen 4 they measured faster than the 16 x 16 blocks (512-bit
// shuffles take two passes there): bench/bench_merge.py, 0.6-0.7 M truth pairs/s against 0.47-0.56 M.
const Kernels kAvx512dq{"avx512dq", minhash_avx512dq, similarity_avx512, ascii_word_mask_avx512,
                        intersect_avx2, oph_avx512dq, shingle_keys_avx512dq,
                        word_tokens_avx512dq, adaptive_similarity_avx512};
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
#ifdef NEARDUP_X86
  // avx512dq is listed after avx512; on Intel, avx512 is the faster of the two.
  if (available.back() == &kAvx512dq && !__builtin_cpu_is("amd")) return *available[available.size() - 2];
#endif
  return *available.back();
}

}  // namespace

std::vector<const Kernels*> available_kernels() {
  std::vector<const Kernels*> out{&kSerial};
#ifdef NEARDUP_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) out.push_back(&kAvx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
    out.push_back(&kAvx512);
    if (__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) out.push_back(&kAvx512dq);
  }
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
