// AVX2 kernels: 8 slots per instruction. Instructions are switched on per function (target
// attribute), never for the whole build, so this file is safe to link into a binary that runs
// anywhere: dispatch.cpp calls it only on CPUs that have AVX2.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "neardup.hpp"

#define NEARDUP_TARGET __attribute__((target("avx2,popcnt")))

namespace neardup {
namespace {

struct Family8 {
  __m256i alo, alo_odd, ahi, b_even, b_odd;  // b_even/b_odd: the whole 64-bit B of even/odd slots
};

// hi32(A*x + B) = hi32(a_lo*x + B) + a_hi*x (mod 2^32), a_lo*x + B from 32x32->64 multiplies.
NEARDUP_TARGET inline __attribute__((always_inline)) __m256i hash8(const Family8& f, uint32_t xj) {
  const __m256i xv = _mm256_set1_epi32(static_cast<int>(xj));
  const __m256i pe = _mm256_add_epi64(_mm256_mul_epu32(f.alo, xv), f.b_even);
  const __m256i po = _mm256_add_epi64(_mm256_mul_epu32(f.alo_odd, xv), f.b_odd);
  const __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
  return _mm256_add_epi32(_mm256_mullo_epi32(f.ahi, xv), hi);
}

}  // namespace

// h = hi32(A*x + B) for 8 slots at a time: exactly the serial integers.
NEARDUP_TARGET void minhash_avx2(const uint32_t* x, size_t n, const HashFamily& f, uint32_t* signature) {
  const size_t k = static_cast<size_t>(f.num_perm);
  constexpr size_t kChunk = 4096;
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    for (size_t i = 0; i < k; i += 8) {
      const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.a_lo.data() + i));
      const __m256i ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.a_hi.data() + i));
      const __m256i blo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.b_lo.data() + i));
      const __m256i bhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.b_hi.data() + i));
      const Family8 fam{alo, _mm256_srli_epi64(alo, 32), ahi,
                        _mm256_blend_epi32(blo, _mm256_slli_epi64(bhi, 32), 0xAA),
                        _mm256_blend_epi32(_mm256_srli_epi64(blo, 32), bhi, 0xAA)};
      __m256i acc0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(signature + i));
      __m256i acc1 = acc0;
      size_t j = start;
      for (; j + 2 <= end; j += 2) {
        acc0 = _mm256_min_epu32(acc0, hash8(fam, x[j]));
        acc1 = _mm256_min_epu32(acc1, hash8(fam, x[j + 1]));
      }
      if (j < end) acc0 = _mm256_min_epu32(acc0, hash8(fam, x[j]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(signature + i), _mm256_min_epu32(acc0, acc1));
    }
  }
}

namespace {

// Software prefetch (into L1) of every cache line of one row: see kernels_avx512.cpp (16 KB ahead for
// the sequential scan, 8 for random rows).
NEARDUP_TARGET inline __attribute__((always_inline)) void prefetch_row(const uint32_t* row, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~static_cast<uintptr_t>(63);
  const uintptr_t last = reinterpret_cast<uintptr_t>(row) + bytes - 1;
  for (uintptr_t line = first; line <= last; line += 64) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

constexpr size_t kAheadBytes = 16384;  // sequential scan: ~16 KB ahead (32 rows of k = 128)
constexpr size_t kAheadRandom = 8;

NEARDUP_TARGET inline __attribute__((always_inline)) uint32_t equal8(const uint32_t* query, const uint32_t* c) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(query));
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c));
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(q, v))));
}

}  // namespace

NEARDUP_TARGET void similarity_avx2(const uint32_t* query, const uint32_t* candidates, size_t k,
                                    const int64_t* rows, size_t n, float* out) {
  if (k == 0 || query[0] == kEmptySlot) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  const size_t ahead = std::max<size_t>(1, kAheadBytes / (4 * k));
  if (rows)
    for (size_t j = 0; j < std::min(n, kAheadRandom); ++j) prefetch_row(candidates + static_cast<size_t>(rows[j]) * k, 4 * k);
  for (size_t j = 0; j < n; ++j) {
    const uint32_t* c = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * k;
    if (rows) {
      if (j + kAheadRandom < n) prefetch_row(candidates + static_cast<size_t>(rows[j + kAheadRandom]) * k, 4 * k);
    } else if (j + ahead < n) {
      prefetch_row(candidates + (j + ahead) * k, 4 * k);
    }
    uint32_t equal = 0;
    size_t i = 0;
    // Two 8-slot masks joined before one popcount.
    for (; i + 16 <= k; i += 16)
      equal += static_cast<uint32_t>(__builtin_popcount(equal8(query + i, c + i) | (equal8(query + i + 8, c + i + 8) << 8)));
    for (; i + 8 <= k; i += 8) equal += static_cast<uint32_t>(__builtin_popcount(equal8(query + i, c + i)));
    for (; i < k; ++i) equal += query[i] == c[i];
    out[j] = static_cast<float>(equal) / static_cast<float>(k);
  }
}

NEARDUP_TARGET uint64_t ascii_word_mask_avx2(const uint8_t* p, uint64_t* high) {
  uint64_t mask = 0, top = 0;
  for (unsigned half = 0; half < 2; ++half) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * half));
    // Bytes >= 0x80 are negative as signed bytes: they fail every range test below, as they should.
    const __m256i folded = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
    const __m256i alpha = _mm256_and_si256(_mm256_cmpgt_epi8(folded, _mm256_set1_epi8('a' - 1)),
                                           _mm256_cmpgt_epi8(_mm256_set1_epi8('z' + 1), folded));
    const __m256i digit = _mm256_and_si256(_mm256_cmpgt_epi8(v, _mm256_set1_epi8('0' - 1)),
                                           _mm256_cmpgt_epi8(_mm256_set1_epi8('9' + 1), v));
    const uint32_t bits = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_or_si256(alpha, digit)));
    mask |= static_cast<uint64_t>(bits) << (32 * half);
    top |= static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(v))) << (32 * half);
  }
  *high = top;
  return mask;
}

}  // namespace neardup

namespace neardup {

// Sorted-set intersection, 8 x 8 at a time: each block of a is compared with all 8 rotations of the
// current block of b, and the block with the smaller last element moves on (both when equal). The
// sets hold distinct values, so every equal pair is seen in exactly one block comparison: the count
// is the serial merge's. Stops once even a match of every element left could not reach `need`.
NEARDUP_TARGET size_t intersect_avx2(const uint32_t* a, size_t na, const uint32_t* b, size_t nb, size_t need) {
  size_t i = 0, j = 0, found = 0;
  const __m256i rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
  while (i + 8 <= na && j + 8 <= nb) {
    if (found + std::min(na - i, nb - j) < need) return found;
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + j));
    __m256i eq = _mm256_cmpeq_epi32(va, vb);
    for (int r = 1; r < 8; ++r) {
      vb = _mm256_permutevar8x32_epi32(vb, rot);
      eq = _mm256_or_si256(eq, _mm256_cmpeq_epi32(va, vb));
    }
    found += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(eq)))));
    const uint32_t amax = a[i + 7], bmax = b[j + 7];
    i += amax <= bmax ? 8 : 0;
    j += bmax <= amax ? 8 : 0;
  }
  return found + intersect_serial(a + i, na - i, b + j, nb - j, need > found ? need - found : 0);
}

}  // namespace neardup

namespace neardup {
namespace {

// Set bits of each byte of v, from a 16-entry table of the nibbles.
NEARDUP_TARGET inline __attribute__((always_inline)) __m256i byte_counts(__m256i v) {
  const __m256i table = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3,
                                         1, 2, 2, 3, 2, 3, 3, 4);
  const __m256i low = _mm256_set1_epi8(0x0F);
  return _mm256_add_epi8(_mm256_shuffle_epi8(table, _mm256_and_si256(v, low)),
                         _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low)));
}

}  // namespace

// dense_counts (adaptive.hpp), 4 words of each plane at a time. The per-byte counts add up in bytes
// (at most 8 per step and 16 steps for 4096 bins: 128), then sum into 64-bit lanes, the three counts
// 16 bits apart in one lane (each at most 4096), so one horizontal sum gives all three.
NEARDUP_TARGET BinCounts dense_counts_avx2(const uint8_t* q, const uint8_t* c, size_t words) {
  __m256i equal = _mm256_setzero_si256(), both = equal, either = equal;
  size_t w = 0;
  for (; w + 4 <= words; w += 4) {
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * w));
    const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8 * (words + w)));
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 8 * w));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 8 * (words + w)));
    const __m256i qf = _mm256_or_si256(q0, q1), cf = _mm256_or_si256(c0, c1);
    const __m256i filled_both = _mm256_and_si256(qf, cf);
    const __m256i differ = _mm256_or_si256(_mm256_xor_si256(q0, c0), _mm256_xor_si256(q1, c1));
    equal = _mm256_add_epi8(equal, byte_counts(_mm256_andnot_si256(differ, filled_both)));
    both = _mm256_add_epi8(both, byte_counts(filled_both));
    either = _mm256_add_epi8(either, byte_counts(_mm256_or_si256(qf, cf)));
  }
  const __m256i zero = _mm256_setzero_si256();
  const __m256i packed = _mm256_add_epi64(
      _mm256_sad_epu8(equal, zero),
      _mm256_add_epi64(_mm256_slli_epi64(_mm256_sad_epu8(both, zero), 16),
                       _mm256_slli_epi64(_mm256_sad_epu8(either, zero), 32)));
  const __m128i half = _mm_add_epi64(_mm256_castsi256_si128(packed), _mm256_extracti128_si256(packed, 1));
  const uint64_t sum = static_cast<uint64_t>(_mm_cvtsi128_si64(half)) + static_cast<uint64_t>(_mm_extract_epi64(half, 1));
  BinCounts n;
  n.equal = sum & 0xFFFF;
  n.both = (sum >> 16) & 0xFFFF;
  n.either = sum >> 32;
  for (; w < words; ++w) {  // the last words % 4, with the POPCNT instruction
    uint64_t q0, q1, c0, c1;
    std::memcpy(&q0, q + 8 * w, 8);
    std::memcpy(&q1, q + 8 * (words + w), 8);
    std::memcpy(&c0, c + 8 * w, 8);
    std::memcpy(&c1, c + 8 * (words + w), 8);
    const uint64_t qf = q0 | q1, cf = c0 | c1, filled_both = qf & cf;
    n.equal += static_cast<uint64_t>(__builtin_popcountll(~((q0 ^ c0) | (q1 ^ c1)) & filled_both));
    n.both += static_cast<uint64_t>(__builtin_popcountll(filled_both));
    n.either += static_cast<uint64_t>(__builtin_popcountll(qf | cf));
  }
  return n;
}

void adaptive_similarity_avx2(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows,
                              size_t n, float* out) {
  verify_adaptive(query, candidates, bins, rows, n, out, dense_counts_avx2);
}

}  // namespace neardup
