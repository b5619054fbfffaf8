// MinHash signatures of whole texts, the hash family they use, and LSH band keys.
//
// The hash family (part of the signature format): for a 32-bit shingle hash x,
//   h_i(x) = floor(((A_i * x + B_i) mod 2^64) / 2^32),   A_i odd, B_i: 64-bit, from splitmix64(seed).
// This is Dietzfelbinger's multiply-add-shift scheme, which is strongly universal (2-independent) for
// 32-bit keys with 64-bit A, B (M. Dietzfelbinger, "Universal hashing and k-wise independent random
// variables via integer arithmetic without primes", STACS 1996; M. Thorup, "High speed hashing for
// integers and strings", 2015, sec. 3.3). Plain 2-independence is not enough for min-wise hashing of
// adversarial, structured keys, but our keys are the outputs of a fully-avalanching 64-bit hash of the
// shingle: Mitzenmacher and Vadhan ("Why simple hash functions work: exploiting the entropy in a data
// stream", SODA 2008) show that 2-universal families then behave like truly random functions, which
// is what makes the estimate |{i: a_i == b_i}| / k unbiased with binomial error sqrt(J(1-J)/k).
// It needs only 32x32-bit multiplies, so 8 (AVX2) or 16 (AVX-512) slots are computed per instruction,
// and every path computes the same integers: signatures are bit-identical across instruction sets.
#include <algorithm>

#include "neardup.hpp"

namespace neardup {
namespace {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

}  // namespace

HashFamily make_hash_family(int num_perm, uint64_t seed) {
  HashFamily f;
  f.num_perm = num_perm;
  const size_t k = static_cast<size_t>(num_perm);
  f.a_lo.resize(k);
  f.a_hi.resize(k);
  f.b_lo.resize(k);
  f.b_hi.resize(k);
  f.a.resize(k);
  f.b.resize(k);
  SplitMix64 rng{seed};
  for (size_t i = 0; i < k; ++i) {
    const uint64_t a = rng.next() | 1u;
    const uint64_t b = rng.next();
    f.a_lo[i] = static_cast<uint32_t>(a);
    f.a_hi[i] = static_cast<uint32_t>(a >> 32);
    f.b_lo[i] = static_cast<uint32_t>(b);
    f.b_hi[i] = static_cast<uint32_t>(b >> 32);
    f.a[i] = a;
    f.b[i] = b;
  }
  return f;
}

void text_signature(const TextView& text, const TextOptions& options, const HashFamily& family,
                    const Kernels& kernels, TextScratch& scratch, std::vector<uint32_t>& hashes,
                    uint32_t* signature) {
  const size_t k = static_cast<size_t>(family.num_perm);
  std::fill(signature, signature + k, kEmptySlot);
  hashes.clear();
  shingle_hashes(text, options, kernels, scratch, hashes);
  if (hashes.empty()) return;
  kernels.minhash(hashes.data(), hashes.size(), family, signature);
  // kEmptySlot marks the empty signature only: a real one that reached it is lowered by one.
  for (size_t i = 0; i < k; ++i) signature[i] -= signature[i] == kEmptySlot;
}

void band_keys(const uint32_t* signatures, size_t n, size_t num_perm, size_t bands, size_t rows,
               uint64_t* out, uint64_t salt) {
  for (size_t d = 0; d < n; ++d) {
    const uint32_t* sig = signatures + d * num_perm;
    uint64_t* keys = out + d * bands;
    if (sig[0] == kEmptySlot) {
      std::fill(keys, keys + bands, uint64_t{0});
      continue;
    }
    for (size_t j = 0; j < bands; ++j) {
      uint64_t h = ((j + 1) * 0x9e3779b97f4a7c15ull) ^ salt;
      for (size_t t = 0; t < rows; ++t) {
        h = (h ^ sig[j * rows + t]) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
      }
      h = fmix64(h);
      keys[j] = h ? h : 1;
    }
  }
}

}  // namespace neardup
