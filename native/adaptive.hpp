// The estimate sketch's decoding and the estimate of one pair (see neardup.hpp, "The estimate
// sketch"): shared by the verification kernels (one_permutation.cpp's serial reference, and the
// SIMD paths of kernels_avx2.cpp and kernels_avx512.cpp, which count dense pairs with their own
// instructions and hand every other pair to AdaptiveEstimate). The encoder (adaptive_bins,
// one_permutation.cpp) uses the helpers here too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace neardup {

// The estimate sketch's mode byte: 0 (dense) or a sparse document's code width, from kAdaptiveMinWidth to
// kAdaptiveMaxWidth; two sparse sketches whose widths are both at least kAdaptiveSetWidth are compared
// shingle by shingle.
inline constexpr size_t kAdaptiveMinWidth = 3, kAdaptiveMaxWidth = 16, kAdaptiveSetWidth = 6;

inline uint32_t sparse_modulus(int width) { return 3u << (width - 2); }

// Set bits of a word. The core and the module are built for any x86-64 (no POPCNT instruction
// assumed), where __builtin_popcountll is a call into libgcc: a few times slower than these steps,
// inlined.
inline uint64_t bit_count(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ull;
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return (x * 0x0101010101010101ull) >> 56;
}

// x mod 3 * 2^shift, without a division by a number known only at run time (tens of cycles): the low
// `shift` bits stay, the rest is taken mod 3 (a multiply, for the constant 3).
inline uint32_t mod_three_shifted(uint32_t x, unsigned shift) {
  return (((x >> shift) % 3u) << shift) | (x & ((1u << shift) - 1u));
}

// Reads `width` bits (<= 17) at bit `pos` of a little-endian bit stream of `size` bytes.
inline uint32_t read_bits(const uint8_t* stream, size_t size, size_t pos, int width) {
  uint32_t word = 0;
  const size_t byte = pos / 8;
  const size_t last = std::min(size, byte + 4);
  for (size_t k = byte; k < last; ++k) word |= static_cast<uint32_t>(stream[k]) << (8 * (k - byte));
  return (word >> (pos % 8)) & ((1u << width) - 1u);
}

// An estimate sketch decoded: its filled-bin bitmap, each filled bin's minimum's residue (mod
// `modulus`; 3 in dense mode), and in sparse mode every shingle's bin and residue, in bin order.
struct AdaptiveDecoded {
  uint64_t filled[64];
  uint32_t residue[4096];
  uint16_t elem_bin[4096];
  uint32_t elem_res[4096];
  size_t elements = 0;
  uint32_t modulus = 3;
  int width = 0;
};

inline void decode_adaptive(const uint8_t* sketch, size_t bins, AdaptiveDecoded& d) {
  const size_t words = bins / 64;
  const int width = sketch[0];
  const uint8_t* body = sketch + 1;
  d.elements = 0;
  d.width = 0;
  d.modulus = 3;
  if (width == 0) {
    for (size_t w = 0; w < words; ++w) {
      uint64_t p0, p1;
      std::memcpy(&p0, body + 8 * w, 8);
      std::memcpy(&p1, body + 8 * (words + w), 8);
      d.filled[w] = p0 | p1;
      for (uint64_t m = d.filled[w]; m; m &= m - 1) {
        const unsigned t = static_cast<unsigned>(__builtin_ctzll(m));
        d.residue[w * 64 + t] = static_cast<uint32_t>(((p0 >> t) & 1u) | (((p1 >> t) & 1u) << 1)) - 1u;
      }
    }
    return;
  }
  if (width < static_cast<int>(kAdaptiveMinWidth) || width > static_cast<int>(kAdaptiveMaxWidth)) {
    std::memset(d.filled, 0, 8 * words);  // not an estimate sketch: nothing filled
    return;
  }
  d.width = width;
  d.modulus = sparse_modulus(width);
  const uint8_t* stream = body + 8 * words;
  const size_t size = bins / 8;
  size_t pos = 0;
  for (size_t w = 0; w < words; ++w) {
    std::memcpy(&d.filled[w], body + 8 * w, 8);
    for (uint64_t m = d.filled[w]; m; m &= m - 1) {
      const size_t b = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
      d.residue[b] = 0;  // stays so only where a damaged stream ends before the bin's codes
      bool more = true;
      for (bool first = true; more && d.elements < bins && pos + static_cast<size_t>(width) < 8 * size; first = false) {
        const uint32_t code = read_bits(stream, size, pos, width + 1);
        pos += static_cast<size_t>(width) + 1;
        const uint32_t r = code & ((1u << width) - 1u);
        more = (code >> width) & 1u;
        if (first) d.residue[b] = r;
        d.elem_bin[d.elements] = static_cast<uint16_t>(b);
        d.elem_res[d.elements] = r;
        ++d.elements;
      }
    }
  }
}

// The counts of the estimate over the bins' minima: bins whose codes agree among those filled on
// both sides, bins filled on both sides, bins filled on either side.
struct BinCounts {
  uint64_t equal = 0, both = 0, either = 0;
};

// The counts of two dense sketches' bodies (two bit planes of bins / 64 little-endian words each), a
// word at a time: the portable reference of the SIMD kernels (kernels_avx2.cpp, kernels_avx512.cpp).
inline BinCounts dense_counts(const uint8_t* q, const uint8_t* c, size_t words) {
  BinCounts n;
  for (size_t w = 0; w < words; ++w) {
    uint64_t q0, q1, c0, c1;
    std::memcpy(&q0, q + 8 * w, 8);
    std::memcpy(&q1, q + 8 * (words + w), 8);
    std::memcpy(&c0, c + 8 * w, 8);
    std::memcpy(&c1, c + 8 * (words + w), 8);
    const uint64_t qf = q0 | q1, cf = c0 | c1, filled_both = qf & cf;
    n.equal += bit_count(~((q0 ^ c0) | (q1 ^ c1)) & filled_both);
    n.both += bit_count(filled_both);
    n.either += bit_count(qf | cf);
  }
  return n;
}

// One-permutation hashing without densification (Li, Owen and Zhang 2012): over the bins filled on
// either side, the fraction whose minima agree estimates J; where both are filled, two different
// minima still agree mod `modulus` with probability 1 / modulus, and matches there are corrected for
// it. 0 when no bin is filled.
inline double bins_estimate(const BinCounts& n, uint32_t modulus) {
  const double chance = 1.0 / static_cast<double>(modulus);
  if (n.either == 0) return 0.0;
  return (static_cast<double>(n.equal) - chance * static_cast<double>(n.both)) / (1.0 - chance) /
         static_cast<double>(n.either);
}

inline float clamped(double j_hat) { return static_cast<float>(j_hat < 0.0 ? 0.0 : (j_hat > 1.0 ? 1.0 : j_hat)); }

// A sketch's bins' minima mod 3 as the two bit planes of a dense body (bins / 64 words each, code =
// residue + 1, 0 for an empty bin): a sparse sketch compared with a dense one is compared on these
// (the smaller modulus is 3), so that pair costs what a dense pair costs.
inline void residue_planes(const AdaptiveDecoded& d, size_t bins, uint8_t* out) {
  const size_t words = bins / 64;
  for (size_t w = 0; w < words; ++w) {
    uint64_t p0 = 0, p1 = 0;
    for (uint64_t m = d.filled[w]; m; m &= m - 1) {
      const unsigned t = static_cast<unsigned>(__builtin_ctzll(m));
      const uint32_t code = d.residue[w * 64 + t] % 3u + 1u;
      p0 |= static_cast<uint64_t>(code & 1u) << t;
      p1 |= static_cast<uint64_t>(code >> 1) << t;
    }
    std::memcpy(out + 8 * w, &p0, 8);
    std::memcpy(out + 8 * (words + w), &p1, 8);
  }
}

// decode_adaptive's result, for a sparse sketch without its walk bin by bin: the codes are back to
// back, (width + 1) bits each, so code k is at bit k * (width + 1) whatever came before it, and it
// belongs to the filled bin numbered by the codes before it whose last bit is 0. The same elements and
// residues, a damaged stream included (the walk stops at the same code); the SIMD paths' decoder.
inline void decode_adaptive_fast(const uint8_t* sketch, size_t bins, AdaptiveDecoded& d) {
  const int width = sketch[0];
  if (width < static_cast<int>(kAdaptiveMinWidth) || width > static_cast<int>(kAdaptiveMaxWidth)) {
    decode_adaptive(sketch, bins, d);  // dense, or no estimate sketch
    return;
  }
  const size_t words = bins / 64, size = bins / 8, end = 8 * size;
  const uint8_t* body = sketch + 1;
  d.width = width;
  d.modulus = sparse_modulus(width);
  uint16_t order[4096];  // the filled bins, in order
  size_t filled = 0;
  for (size_t w = 0; w < words; ++w) {
    std::memcpy(&d.filled[w], body + 8 * w, 8);
    for (uint64_t m = d.filled[w]; m; m &= m - 1) {
      const size_t b = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
      d.residue[b] = 0;  // stays so only where a damaged stream ends before the bin's codes
      order[filled++] = static_cast<uint16_t>(b);
    }
  }
  uint8_t stream[512 + 8] = {};  // bins / 8 bytes, then zeros to read 8 bytes anywhere
  std::memcpy(stream, body + 8 * words, size);
  const size_t bits = static_cast<size_t>(width) + 1;
  // the walk reads code k while k < bins and k * bits + width < end
  const size_t limit = std::min(bins, (end - static_cast<size_t>(width) - 1) / bits + 1);
  const uint64_t mask = (uint64_t{1} << width) - 1u;
  size_t k = 0, bin = 0;
  for (; k < limit && bin < filled; ++k) {
    const size_t pos = k * bits;
    uint64_t window;
    std::memcpy(&window, stream + pos / 8, 8);
    const uint64_t code = window >> (pos % 8);
    d.elem_bin[k] = order[bin];
    d.elem_res[k] = static_cast<uint32_t>(code & mask);
    bin += ((code >> width) & 1u) ^ 1u;
  }
  d.elements = k;
  for (size_t e = 0; e < k; ++e)  // a bin's residue: its first code's
    if (e == 0 || d.elem_bin[e] != d.elem_bin[e - 1]) d.residue[d.elem_bin[e]] = d.elem_res[e];
}

// residue_planes(decode_adaptive(sketch)) of a sparse sketch in one pass over its codes, keeping only
// each bin's first: what a sparse candidate needs against a dense query. Bins the walk never reaches
// (a damaged stream) keep residue 0, code 1, as decode_adaptive leaves them.
inline void sparse_residue_planes(const uint8_t* sketch, size_t bins, uint8_t* out) {
  const size_t words = bins / 64, size = bins / 8, end = 8 * size;
  const int width = sketch[0];
  const uint8_t* body = sketch + 1;
  uint64_t p0[64], p1[64];
  uint16_t order[4096];
  size_t filled = 0;
  for (size_t w = 0; w < words; ++w) {
    std::memcpy(&p0[w], body + 8 * w, 8);
    p1[w] = 0;
    for (uint64_t m = p0[w]; m; m &= m - 1) order[filled++] = static_cast<uint16_t>(w * 64 + __builtin_ctzll(m));
  }
  uint8_t stream[512 + 8] = {};
  std::memcpy(stream, body + 8 * words, size);
  const size_t bits = static_cast<size_t>(width) + 1;
  const size_t limit = std::min(bins, (end - static_cast<size_t>(width) - 1) / bits + 1);
  const uint32_t mask = (1u << width) - 1u;
  uint64_t more = 0;
  for (size_t k = 0, bin = 0; k < limit && bin < filled; ++k) {
    const size_t pos = k * bits;
    uint64_t window;
    std::memcpy(&window, stream + pos / 8, 8);
    const uint64_t code = window >> (pos % 8);
    if (!more) {  // the first code of its bin
      const size_t b = order[bin];
      const uint64_t c = (static_cast<uint32_t>(code) & mask) % 3u + 1u, bit = uint64_t{1} << (b % 64);
      p0[b / 64] = (p0[b / 64] & ~bit) | ((c & 1u) << (b % 64));
      p1[b / 64] |= (c >> 1) << (b % 64);
    }
    more = (code >> width) & 1u;
    bin += more ^ 1u;
  }
  std::memcpy(out, p0, 8 * words);
  std::memcpy(out + 8 * words, p1, 8 * words);
}

using AdaptiveDecoder = void (*)(const uint8_t* sketch, size_t bins, AdaptiveDecoded& d);

// The estimate of one estimate sketch (`query`, adaptive_bytes(bins) bytes: the mode byte, then the
// bins) with others, one pair at a time, in the scratch of two AdaptiveDecoded (~41 KB each: kept by
// the caller). A dense query against dense candidates (most pairs) needs no decoding: the query is
// decoded once, the first time a pair needs it. `Decode` gives decode_adaptive's AdaptiveDecoded.
template <AdaptiveDecoder Decode>
class BasicAdaptiveEstimate {
 public:
  BasicAdaptiveEstimate(const uint8_t* query, size_t bins, AdaptiveDecoded& q, AdaptiveDecoded& c)
      : query_(query), bins_(bins), q_(q), c_(c) {}

  // The decoded query (decoded on the first call).
  const AdaptiveDecoded& decoded_query() {
    if (!decoded_) {
      Decode(query_, bins_, q_);
      decoded_ = true;
    }
    return q_;
  }

  // Estimated Jaccard of the query and the estimate sketch s, clamped to [0, 1].
  float operator()(const uint8_t* s) {
    const uint8_t* query = query_;
    const size_t bins = bins_, words = bins / 64;
    AdaptiveDecoded& q = q_;
    AdaptiveDecoded& c = c_;
    double j_hat = 0.0;
    if (query[0] == 0 && s[0] == 0) {
      j_hat = bins_estimate(dense_counts(query + 1, s + 1, words), 3);
    } else {
      decoded_query();
      Decode(s, bins, c);
      const uint32_t modulus = std::min(q.modulus, c.modulus);
      const unsigned shift = static_cast<unsigned>(__builtin_ctz(modulus));  // modulus = 3 * 2^shift
      const double chance = 1.0 / static_cast<double>(modulus);
      if (std::min(q.width, c.width) >= static_cast<int>(kAdaptiveSetWidth)) {
        // Both sparse with wide codes: shingle by shingle. In the bins filled on both sides, of the
        // pairs (one shingle of each) `equal` agree: the common shingles, and 1 / modulus of the other
        // pairs by chance. The common shingles are a whole number: the estimate is rounded to one, so
        // a pair with no chance agreement (most of them) gets its exact Jaccard, not one a fraction
        // of a shingle below it (half the pairs exactly at the threshold were missed that way).
        uint64_t equal = 0, pairs = 0;
        size_t a = 0, b = 0;
        while (a < q.elements && b < c.elements) {
          const uint16_t ba = q.elem_bin[a], bb = c.elem_bin[b];
          size_t ae = a, be = b;
          while (ae < q.elements && q.elem_bin[ae] == ba) ++ae;
          while (be < c.elements && c.elem_bin[be] == bb) ++be;
          if (ba == bb) {
            pairs += static_cast<uint64_t>((ae - a) * (be - b));
            for (size_t i = a; i < ae; ++i)
              for (size_t t = b; t < be; ++t)
                equal += mod_three_shifted(q.elem_res[i], shift) == mod_three_shifted(c.elem_res[t], shift);
          }
          if (ba <= bb) a = ae;
          if (bb <= ba) b = be;
        }
        const double common =
            std::floor((static_cast<double>(equal) - chance * static_cast<double>(pairs)) / (1.0 - chance) + 0.5);
        const double all = static_cast<double>(q.elements + c.elements) - common;
        if (all > 0.0) j_hat = common / all;
      } else {
        // The estimate over the bins' minima, at the smaller of the two moduli (both are multiples
        // of 3, so either residue reduces to the other's).
        BinCounts n;
        for (size_t w = 0; w < words; ++w) {
          const uint64_t filled_both = q.filled[w] & c.filled[w];
          n.either += bit_count(q.filled[w] | c.filled[w]);
          n.both += bit_count(filled_both);
          for (uint64_t m = filled_both; m; m &= m - 1) {
            const size_t bin = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
            n.equal += mod_three_shifted(q.residue[bin], shift) == mod_three_shifted(c.residue[bin], shift);
          }
        }
        j_hat = bins_estimate(n, modulus);
      }
    }
    return clamped(j_hat);
  }

 private:
  const uint8_t* query_;
  size_t bins_;
  AdaptiveDecoded& q_;
  AdaptiveDecoded& c_;
  bool decoded_ = false;
};

// The reference: the walk of the format, bin by bin (the serial path).
using AdaptiveEstimate = BasicAdaptiveEstimate<decode_adaptive>;

}  // namespace neardup
