// Portable kernels, always built: the reference every SIMD path must match bit for bit.
#include <algorithm>

#include "neardup.hpp"

namespace neardup {

void minhash_serial(const uint32_t* x, size_t n, const HashFamily& f, uint32_t* signature) {
  const size_t k = static_cast<size_t>(f.num_perm);
  constexpr size_t kChunk = 4096;  // shingle hashes per pass: they stay in L1 across the k slots
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    for (size_t i = 0; i < k; ++i) {
      const uint64_t a = (static_cast<uint64_t>(f.a_hi[i]) << 32) | f.a_lo[i];
      const uint64_t b = (static_cast<uint64_t>(f.b_hi[i]) << 32) | f.b_lo[i];
      uint32_t m = signature[i];
      for (size_t j = start; j < end; ++j) m = std::min(m, static_cast<uint32_t>((a * x[j] + b) >> 32));
      signature[i] = m;
    }
  }
}

void similarity_serial(const uint32_t* query, const uint32_t* candidates, size_t k, const int64_t* rows,
                       size_t n, float* out) {
  if (k == 0 || query[0] == kEmptySlot) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  for (size_t j = 0; j < n; ++j) {
    const uint32_t* c = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * k;
    uint32_t equal = 0;
    for (size_t i = 0; i < k; ++i) equal += query[i] == c[i];
    out[j] = static_cast<float>(equal) / static_cast<float>(k);
  }
}

uint64_t ascii_word_mask_serial(const uint8_t* p, uint64_t* high) {
  uint64_t mask = 0, top = 0;
  for (unsigned i = 0; i < 64; ++i) {
    const uint8_t c = p[i];
    const uint8_t folded = c | 0x20;
    const bool word = (c >= '0' && c <= '9') || (folded >= 'a' && folded <= 'z');
    mask |= static_cast<uint64_t>(word) << i;
    top |= static_cast<uint64_t>(c >> 7) << i;
  }
  *high = top;
  return mask;
}

size_t sorted_set(std::vector<uint32_t>& hashes) {
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  return hashes.size();
}

// |A n B| if it can reach `need`, else any value below `need` (the merge stops early).
size_t intersect_serial(const uint32_t* a, size_t na, const uint32_t* b, size_t nb, size_t need) {
  size_t i = 0, j = 0, found = 0;
  // Stop once even every remaining element of the shorter side matching would not reach `need`.
  while (i < na && j < nb) {
    if (found + std::min(na - i, nb - j) < need) return found;
    // Branch-free step: mispredicted branches are most of a plain merge's time.
    const uint32_t x = a[i], y = b[j];
    found += x == y;
    i += x <= y;
    j += y <= x;
  }
  return found;
}

}  // namespace neardup
