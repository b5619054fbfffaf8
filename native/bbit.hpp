// The b-bit one-permutation estimate of one pair of bit-plane bins, for ND.MATCHLINK's format-2 branch
// (valkey/sites.cpp), its only user: the core's verification is adaptive.hpp's (the dense mode of the
// estimate sketch is this estimate at 2 bits). Header-only: the server module links nothing of the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace neardup {

// One-permutation hashing without densification (Li, Owen and Zhang 2012): over the bins where either
// document has a shingle, the fraction whose minima agree is an unbiased estimate of J (a bin filled
// on one side only is a disagreement). Where both are filled, two different minima still show the same
// code with probability 1 / (2^bits - 1): matches there are corrected for it. `q` and `c` are `bits`
// planes of bins/64 little-endian words each; the estimate is clamped to [0, 1], 0 for two empty ones.
inline float bbit_estimate(const uint8_t* q, const uint8_t* c, size_t bins, int bits) {
  const size_t words = bins / 64;
  const double chance = 1.0 / static_cast<double>((1u << bits) - 1u);
  uint64_t equal = 0, both = 0, either = 0;
  for (size_t w = 0; w < words; ++w) {
    uint64_t diff = 0, qf = 0, cf = 0;
    for (int p = 0; p < bits; ++p) {
      uint64_t qw, cw;
      std::memcpy(&qw, q + (static_cast<size_t>(p) * words + w) * 8, 8);
      std::memcpy(&cw, c + (static_cast<size_t>(p) * words + w) * 8, 8);
      diff |= qw ^ cw;
      qf |= qw;
      cf |= cw;
    }
    const uint64_t filled_both = qf & cf;
    equal += static_cast<uint64_t>(__builtin_popcountll(~diff & filled_both));
    both += static_cast<uint64_t>(__builtin_popcountll(filled_both));
    either += static_cast<uint64_t>(__builtin_popcountll(qf | cf));
  }
  if (either == 0) return 0.0f;
  const double agree = (static_cast<double>(equal) - chance * static_cast<double>(both)) / (1.0 - chance);
  const double j_hat = agree / static_cast<double>(either);
  return static_cast<float>(j_hat < 0.0 ? 0.0 : (j_hat > 1.0 ? 1.0 : j_hat));
}

}  // namespace neardup
