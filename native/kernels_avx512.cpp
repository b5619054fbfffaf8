// AVX-512 kernels: 16 slots per instruction (AVX-512F and BW: every AVX-512 CPU since Skylake-SP).
// Instructions are switched on per function (target attribute), never for the whole build:
// dispatch.cpp calls these only on CPUs (and OSes) with AVX-512F.
#include <immintrin.h>

#include <algorithm>

#include "neardup.hpp"

#define NEARDUP_TARGET __attribute__((target("avx512f,avx512bw,popcnt")))

namespace neardup {
namespace {

struct Family16 {
  __m512i alo, alo_odd, ahi, b_even, b_odd;  // b_even/b_odd: the whole 64-bit B of even/odd slots
};

// The same integers as the serial path: hi32(A*x + B) = hi32(a_lo*x + B) + a_hi*x (mod 2^32), with
// a_lo*x + B from even/odd 32x32->64 multiplies and 64-bit adds, then one shuffle to line them up.
NEARDUP_TARGET inline __attribute__((always_inline)) __m512i hash16(const Family16& f, uint32_t xj) {
  const __m512i xv = _mm512_set1_epi32(static_cast<int>(xj));
  const __m512i pe = _mm512_add_epi64(_mm512_mul_epu32(f.alo, xv), f.b_even);
  const __m512i po = _mm512_add_epi64(_mm512_mul_epu32(f.alo_odd, xv), f.b_odd);
  const __m512i hi = _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_DDBB);
  return _mm512_add_epi32(_mm512_mullo_epi32(f.ahi, xv), hi);
}

}  // namespace

NEARDUP_TARGET void minhash_avx512(const uint32_t* x, size_t n, const HashFamily& f, uint32_t* signature) {
  const size_t k = static_cast<size_t>(f.num_perm);
  constexpr size_t kChunk = 4096;
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    for (size_t i = 0; i < k; i += 16) {
      // num_perm is a multiple of 8: the last block may hold 8 slots, handled with a mask.
      const __mmask16 m = k - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>(0x00FF);
      const __m512i alo = _mm512_maskz_loadu_epi32(m, f.a_lo.data() + i);
      const __m512i ahi = _mm512_maskz_loadu_epi32(m, f.a_hi.data() + i);
      const __m512i blo = _mm512_maskz_loadu_epi32(m, f.b_lo.data() + i);
      const __m512i bhi = _mm512_maskz_loadu_epi32(m, f.b_hi.data() + i);
      const Family16 fam{alo, _mm512_srli_epi64(alo, 32), ahi,
                         _mm512_mask_blend_epi32(0xAAAA, blo, _mm512_slli_epi64(bhi, 32)),
                         _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(blo, 32), bhi)};
      __m512i acc0 = _mm512_maskz_loadu_epi32(m, signature + i);
      __m512i acc1 = acc0;
      size_t j = start;
      for (; j + 2 <= end; j += 2) {
        acc0 = _mm512_min_epu32(acc0, hash16(fam, x[j]));
        acc1 = _mm512_min_epu32(acc1, hash16(fam, x[j + 1]));
      }
      if (j < end) acc0 = _mm512_min_epu32(acc0, hash16(fam, x[j]));
      _mm512_mask_storeu_epi32(signature + i, m, _mm512_min_epu32(acc0, acc1));
    }
  }
}

namespace {

// Equal slots of one row against a query held in registers: B blocks of 16 slots, fully unrolled;
// the 16-bit compare masks are joined into 64-bit ones before counting.
template <int B>
NEARDUP_TARGET inline __attribute__((always_inline)) uint32_t equal_slots(const __m512i* q, const uint32_t* c) {
  uint32_t equal = 0;
  for (int b = 0; b < B; b += 4) {
    const __mmask16 m0 = _mm512_cmpeq_epi32_mask(q[b], _mm512_loadu_si512(c + 16 * b));
    const __mmask16 m1 = b + 1 < B ? _mm512_cmpeq_epi32_mask(q[b + 1], _mm512_loadu_si512(c + 16 * (b + 1))) : 0;
    const __mmask16 m2 = b + 2 < B ? _mm512_cmpeq_epi32_mask(q[b + 2], _mm512_loadu_si512(c + 16 * (b + 2))) : 0;
    const __mmask16 m3 = b + 3 < B ? _mm512_cmpeq_epi32_mask(q[b + 3], _mm512_loadu_si512(c + 16 * (b + 3))) : 0;
    const __mmask64 joined = _mm512_kunpackd(_mm512_kunpackw(m3, m2), _mm512_kunpackw(m1, m0));
    equal += static_cast<uint32_t>(__builtin_popcountll(_cvtmask64_u64(joined)));
  }
  return equal;
}

// Software prefetch (into L1) of every cache line of one row. The stored signatures are read once
// per call, 15 MB at N = 30k: they stream from L3 or memory, and the hardware prefetchers alone keep
// too few lines in flight (measured: 16 KB ahead, 32 rows at k = 128, lifts the 30k case by ~20-25%; random
// rows get a prefetch 8 rows ahead). A prefetch never faults, and the address is plain arithmetic.
NEARDUP_TARGET inline __attribute__((always_inline)) void prefetch_row(const uint32_t* row, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~static_cast<uintptr_t>(63);
  const uintptr_t last = reinterpret_cast<uintptr_t>(row) + bytes - 1;
  for (uintptr_t line = first; line <= last; line += 64) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

constexpr size_t kAheadBytes = 16384;  // sequential scan: ~16 KB ahead (32 rows of k = 128)
constexpr size_t kAheadRandom = 8;

NEARDUP_TARGET inline __attribute__((always_inline)) void prefetch_ahead(const uint32_t* candidates, size_t k,
                                                                       const int64_t* rows, size_t j, size_t n,
                                                                       size_t ahead) {
  if (rows) {
    if (j + kAheadRandom < n) prefetch_row(candidates + static_cast<size_t>(rows[j + kAheadRandom]) * k, 4 * k);
  } else if (j + ahead < n) {
    prefetch_row(candidates + (j + ahead) * k, 4 * k);
  }
}

template <int B>
NEARDUP_TARGET void similarity_blocks(const uint32_t* query, const uint32_t* candidates, const int64_t* rows,
                                      size_t n, float* out) {
  constexpr size_t k = 16 * B;
  __m512i q[B];
  for (int b = 0; b < B; ++b) q[b] = _mm512_loadu_si512(query + 16 * b);
  constexpr size_t ahead = std::max<size_t>(1, kAheadBytes / (4 * k));
  if (rows)
    for (size_t j = 0; j < std::min(n, kAheadRandom); ++j) prefetch_row(candidates + static_cast<size_t>(rows[j]) * k, 4 * k);
  for (size_t j = 0; j < n; ++j) {
    const uint32_t* c = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * k;
    prefetch_ahead(candidates, k, rows, j, n, ahead);
    out[j] = static_cast<float>(equal_slots<B>(q, c)) / static_cast<float>(k);
  }
}

// The same count when the rows start `shift` slots (1..15) past a 64-byte line, as numpy's arrays do
// (malloc's 16-byte header): every 512-bit load of the plain path would then split across two lines.
// Instead read each row through its aligned window [row - shift, row - shift + k): whole aligned lines,
// the query rotated to match. The window's first `shift` slots belong to the row before, so they are
// masked out and the row's own last `shift` slots are taken (masked) from the line after the window.
// Masked-out elements are never read (no fault before the buffer or after it); the addresses are
// computed as integers for the same reason.
template <int B>
NEARDUP_TARGET void similarity_blocks_aligned(const uint32_t* query, const uint32_t* candidates, const int64_t* rows,
                                              size_t n, float* out, size_t shift) {
  constexpr size_t k = 16 * B;
  alignas(64) uint32_t rotated[k];
  for (size_t p = 0; p < k; ++p) rotated[p] = query[(p + k - shift) % k];
  __m512i q[B];
  for (int b = 0; b < B; ++b) q[b] = _mm512_load_si512(rotated + 16 * b);
  const __mmask16 head = static_cast<__mmask16>(0xFFFFu << shift);  // the row's slots in its first line
  const __mmask16 tail = static_cast<__mmask16>(~head);               // ... in the line after the window
  constexpr size_t ahead = std::max<size_t>(1, kAheadBytes / (4 * k));
  if (rows)
    for (size_t j = 0; j < std::min(n, kAheadRandom); ++j) prefetch_row(candidates + static_cast<size_t>(rows[j]) * k, 4 * k);
  const uintptr_t base = reinterpret_cast<uintptr_t>(candidates) - 4 * shift;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(base + 4 * k * (rows ? static_cast<size_t>(rows[j]) : j));
    prefetch_ahead(candidates, k, rows, j, n, ahead);
    __mmask16 m[B];
    m[0] = _mm512_mask_cmpeq_epi32_mask(head, q[0], _mm512_maskz_load_epi32(head, w)) |
           _mm512_mask_cmpeq_epi32_mask(tail, q[0], _mm512_maskz_load_epi32(tail, w + k));
    for (int b = 1; b < B; ++b) m[b] = _mm512_cmpeq_epi32_mask(q[b], _mm512_load_si512(w + 16 * b));
    uint32_t equal = 0;
    for (int b = 0; b < B; b += 4) {
      const __mmask64 joined = _mm512_kunpackd(_mm512_kunpackw(m[b + 3], m[b + 2]), _mm512_kunpackw(m[b + 1], m[b]));
      equal += static_cast<uint32_t>(__builtin_popcountll(_cvtmask64_u64(joined)));
    }
    out[j] = static_cast<float>(equal) / static_cast<float>(k);
  }
}

template <int B>
NEARDUP_TARGET void similarity_k(const uint32_t* query, const uint32_t* candidates, const int64_t* rows, size_t n,
                                 float* out) {
  // Sequential scans only: for random rows from memory it measured no better (1M rows: ~15% slower).
  const uintptr_t address = reinterpret_cast<uintptr_t>(candidates);
  if (!rows && address % 4 == 0 && address % 64 != 0)
    return similarity_blocks_aligned<B>(query, candidates, rows, n, out, (address % 64) / 4);
  similarity_blocks<B>(query, candidates, rows, n, out);
}

}  // namespace

NEARDUP_TARGET void similarity_avx512(const uint32_t* query, const uint32_t* candidates, size_t k,
                                      const int64_t* rows, size_t n, float* out) {
  if (k == 0 || query[0] == kEmptySlot) {
    std::fill(out, out + n, 0.0f);
    return;
  }
  switch (k) {  // the common signature lengths: query in registers, rows fully unrolled
    case 64: return similarity_k<4>(query, candidates, rows, n, out);
    case 128: return similarity_k<8>(query, candidates, rows, n, out);
    case 256: return similarity_k<16>(query, candidates, rows, n, out);
    default: break;
  }
  const size_t ahead = std::max<size_t>(1, kAheadBytes / (4 * k));
  for (size_t j = 0; j < n; ++j) {
    const uint32_t* c = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * k;
    prefetch_ahead(candidates, k, rows, j, n, ahead);
    uint32_t equal = 0;
    for (size_t i = 0; i < k; i += 16) {
      const __mmask16 m = k - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (k - i)) - 1);
      const __m512i q = _mm512_maskz_loadu_epi32(m, query + i);
      const __m512i v = _mm512_maskz_loadu_epi32(m, c + i);
      equal += static_cast<uint32_t>(__builtin_popcount(_mm512_mask_cmpeq_epi32_mask(m, q, v)));
    }
    out[j] = static_cast<float>(equal) / static_cast<float>(k);
  }
}

NEARDUP_TARGET uint64_t ascii_word_mask_avx512(const uint8_t* p, uint64_t* high) {
  const __m512i v = _mm512_loadu_si512(p);
  *high = _mm512_movepi8_mask(v);
  const __m512i folded = _mm512_or_si512(v, _mm512_set1_epi8(0x20));
  const __m512i a = _mm512_sub_epi8(folded, _mm512_set1_epi8('a'));
  const __m512i d = _mm512_sub_epi8(v, _mm512_set1_epi8('0'));
  return _mm512_cmplt_epu8_mask(a, _mm512_set1_epi8(26)) | _mm512_cmplt_epu8_mask(d, _mm512_set1_epi8(10));
}

}  // namespace neardup

namespace neardup {

// As intersect_avx2 with blocks of 16 (valignd rotates a block of b by one lane per step).
NEARDUP_TARGET size_t intersect_avx512(const uint32_t* a, size_t na, const uint32_t* b, size_t nb, size_t need) {
  size_t i = 0, j = 0, found = 0;
  while (i + 16 <= na && j + 16 <= nb) {
    if (found + std::min(na - i, nb - j) < need) return found;
    const __m512i va = _mm512_loadu_si512(a + i);
    __m512i vb = _mm512_loadu_si512(b + j);
    __mmask16 eq = _mm512_cmpeq_epi32_mask(va, vb);
    for (int r = 1; r < 16; ++r) {
      vb = _mm512_alignr_epi32(vb, vb, 1);
      eq = static_cast<__mmask16>(eq | _mm512_cmpeq_epi32_mask(va, vb));
    }
    found += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(eq)));
    const uint32_t amax = a[i + 15], bmax = b[j + 15];
    i += amax <= bmax ? 16 : 0;
    j += bmax <= amax ? 16 : 0;
  }
  return found + intersect_serial(a + i, na - i, b + j, nb - j, need > found ? need - found : 0);
}

}  // namespace neardup
