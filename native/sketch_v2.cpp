// Sketch format 2: what a document keeps for verification.
//
// - Estimate mode: one-permutation hashing (Li, Owen and Zhang 2012) into `bins` bins from one 64-bit
//   hash per shingle, each bin kept as a `bits`-bit code (b-bit minwise hashing, Li and Koenig 2010):
//   0 for an empty bin, else 1 + its minimum mod (2^bits - 1). Stored as bit planes, so comparing
//   two sketches is XOR, OR and popcount. Empty bins are not densified: most near-duplicate pairs
//   at a threshold are short documents (half of them with fewer than ~360 shingles in their union on
//   the benchmark corpus), whose bins are mostly empty; densification copies a few minima into many
//   bins and doubled the error there, while the bins filled on one side only are exact
//   disagreements (bench/bench_estimators.py).
// - Exact mode: the sorted set of distinct 32-bit shingle hashes, compared by a merge that stops as
//   soon as the floor can no longer be reached.
//
// Everything here is integer work done the same way on every CPU: the bytes do not depend on the ISA.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "neardup.hpp"

namespace neardup {
namespace {

constexpr uint64_t kOphSalt = 0x6f70682d76322d31ull;    // "oph-v2-1": the bins' hash, from the seed

uint64_t splitmix_first(uint64_t seed) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

OphFamily make_oph_family(size_t bins, int bits, uint64_t seed) {
  OphFamily f;
  f.bins = bins;
  f.bits = bits;
  f.salt = splitmix_first(seed ^ kOphSalt);
  return f;
}

// The portable kernel, the reference of the others: one pass over the shingles marks the filled bins in
// a bitmap and keeps each bin's minimum, then one pass over the filled bins writes their codes.
void oph_serial(const uint32_t* x, size_t n, const OphFamily& f, uint32_t* value, uint8_t* out) {
  const size_t k = f.bins;
  const size_t words = k / 64;
  std::memset(out, 0, oph_bytes(f));
  if (n == 0) return;
  uint64_t filled[64] = {};  // bins <= 4096
  for (size_t j = 0; j < n; ++j) {
    const uint64_t v = oph_hash(x[j], f.salt);
    const size_t b = oph_bin(v, k);
    const uint32_t low = static_cast<uint32_t>(v);
    filled[b / 64] |= uint64_t{1} << (b % 64);
    value[b] = low < value[b] ? low : value[b];
  }
  // Code 0 marks an empty bin; a filled one keeps its minimum's value mod (2^bits - 1), plus 1.
  const uint32_t codes = (1u << f.bits) - 1u;
  uint64_t* planes = reinterpret_cast<uint64_t*>(out);  // out is 8-byte aligned by the callers
  for (size_t w = 0; w < words; ++w) {
    uint64_t plane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint64_t m = filled[w]; m; m &= m - 1) {
      const unsigned t = static_cast<unsigned>(__builtin_ctzll(m));
      uint32_t& slot = value[w * 64 + t];
      // the format's 2 bits: a constant divisor is a multiply, not a division
      const uint32_t code = (f.bits == 2 ? slot % 3u : slot % codes) + 1u;
      slot = 0xFFFFFFFFu;
      for (int p = 0; p < f.bits; ++p) plane[p] |= static_cast<uint64_t>((code >> p) & 1u) << t;
    }
    for (int p = 0; p < f.bits; ++p) planes[static_cast<size_t>(p) * words + w] = plane[p];
  }
}

void oph_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
              std::vector<uint32_t>& value, uint8_t* out) {
  // `value` is kept all 0xFFFFFFFF between calls (each kernel resets what it wrote), so a short
  // document costs in proportion to its shingles, not to the bins.
  if (value.size() != f.bins) value.assign(f.bins, 0xFFFFFFFFu);
  kernels.oph(x, n, f, value.data(), out);
}

void bbit_similarity(const uint8_t* query, const uint8_t* candidates, size_t bins, int bits,
                     const int64_t* rows, size_t n, float* out) {
  // One-permutation hashing without densification (Li, Owen and Zhang 2012): over the bins where
  // either document has a shingle, the fraction whose minima agree is an unbiased estimate of J
  // (a bin filled on one side only is a disagreement). Where both are filled, two different minima
  // still show the same code with probability 1 / (2^bits - 1): matches there are corrected for it.
  const size_t words = bins / 64;
  const size_t stride = static_cast<size_t>(bits) * bins / 8;
  const double chance = 1.0 / static_cast<double>((1u << bits) - 1u);
  uint64_t q[64 * 8];  // up to 8 planes of 4096 bins
  std::memcpy(q, query, stride);
  for (size_t j = 0; j < n; ++j) {
    const uint8_t* c8 = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * stride;
    uint64_t equal = 0, both = 0, either = 0;
    for (size_t w = 0; w < words; ++w) {
      uint64_t diff = 0, qf = 0, cf = 0;
      for (int p = 0; p < bits; ++p) {
        uint64_t cw;
        std::memcpy(&cw, c8 + (static_cast<size_t>(p) * words + w) * 8, 8);
        const uint64_t qw = q[static_cast<size_t>(p) * words + w];
        diff |= qw ^ cw;
        qf |= qw;
        cf |= cw;
      }
      const uint64_t filled_both = qf & cf;
      equal += static_cast<uint64_t>(__builtin_popcountll(~diff & filled_both));
      both += static_cast<uint64_t>(__builtin_popcountll(filled_both));
      either += static_cast<uint64_t>(__builtin_popcountll(qf | cf));
    }
    if (either == 0) {
      out[j] = 0.0f;
      continue;
    }
    const double agree = (static_cast<double>(equal) - chance * static_cast<double>(both)) / (1.0 - chance);
    const double j_hat = agree / static_cast<double>(either);
    out[j] = static_cast<float>(j_hat < 0.0 ? 0.0 : (j_hat > 1.0 ? 1.0 : j_hat));
  }
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
