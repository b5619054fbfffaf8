// AVX-512 kernels: 16 slots per instruction (AVX-512F and BW: every AVX-512 CPU since Skylake-SP).
// Instructions are switched on per function (target attribute), never for the whole build:
// dispatch.cpp calls these only on CPUs (and OSes) with AVX-512F.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

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

// ---- AVX-512DQ: a 64-bit multiply per lane (vpmullq) ----------------------------------------------
//
// On CPUs where vpmullq is as fast as a 32-bit multiply (AMD Zen 4 and later: one per cycle), the hash
// family is computed as it is defined, (A * x + B) mod 2^64 in 64-bit lanes, and the minimum is taken
// over the whole 64-bit value: its high half is the minimum of the high halves (a smaller high half
// means a smaller value), so the slots are the same integers as on every other path. Per 8 slots that
// is one multiply, one add and one min, against 1.5 multiplies and five other instructions for the
// 32-bit form above. dispatch.cpp chooses it only on AMD: on Intel, vpmullq is three micro-ops.
#define NEARDUP_TARGET_DQ __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,popcnt")))

namespace neardup {
namespace {

// Slots [0, 8V) of the block at a/b, over the shingles [start, end): the minima into sig (8V slots).
template <int V>
NEARDUP_TARGET_DQ inline void minhash_group(const uint32_t* x, size_t start, size_t end, const uint64_t* a,
                                            const uint64_t* b, uint32_t* sig) {
  __m512i av[V], bv[V], acc[V];
  for (int v = 0; v < V; ++v) {
    av[v] = _mm512_loadu_si512(a + 8 * v);
    bv[v] = _mm512_loadu_si512(b + 8 * v);
    acc[v] = _mm512_set1_epi64(-1);
  }
  for (size_t j = start; j < end; ++j) {
    const __m512i xv = _mm512_set1_epi64(static_cast<long long>(x[j]));
    for (int v = 0; v < V; ++v) acc[v] = _mm512_min_epu64(acc[v], _mm512_add_epi64(_mm512_mullo_epi64(av[v], xv), bv[v]));
  }
  for (int v = 0; v < V; ++v) {
    const __m256i high = _mm512_cvtepi64_epi32(_mm512_srli_epi64(acc[v], 32));
    __m256i* slot = reinterpret_cast<__m256i*>(sig + 8 * v);
    _mm256_storeu_si256(slot, _mm256_min_epu32(_mm256_loadu_si256(slot), high));
  }
}

}  // namespace

NEARDUP_TARGET_DQ void minhash_avx512dq(const uint32_t* x, size_t n, const HashFamily& f, uint32_t* signature) {
  const size_t k = static_cast<size_t>(f.num_perm);  // a multiple of 8
  constexpr size_t kChunk = 4096;
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    size_t i = 0;
    for (; i + 32 <= k; i += 32) minhash_group<4>(x, start, end, f.a.data() + i, f.b.data() + i, signature + i);
    for (; i < k; i += 8) minhash_group<1>(x, start, end, f.a.data() + i, f.b.data() + i, signature + i);
  }
}

namespace {

NEARDUP_TARGET_DQ inline __m512i fmix64x8(__m512i v) {
  v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
  v = _mm512_mullo_epi64(v, _mm512_set1_epi64(static_cast<long long>(0xff51afd7ed558ccdull)));
  v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
  v = _mm512_mullo_epi64(v, _mm512_set1_epi64(static_cast<long long>(0xc4ceb9fe1a85ec53ull)));
  return _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
}

}  // namespace

// shingle_keys_serial's keys, 8 windows at a time: each window's sum is taken whole (n multiplies per 8
// windows, no carried dependency) instead of rolled. Long shingles (n > 16) roll, as the serial path.
NEARDUP_TARGET_DQ void shingle_keys_avx512dq(uint64_t* tokens, size_t held, size_t fresh, size_t n,
                                            const uint64_t* powers, uint32_t* out) {
  if (n > 16) return shingle_keys_serial(tokens, held, fresh, n, powers, out);
  const size_t total = held + fresh;
  size_t j = held;
  for (; j + 8 <= total; j += 8) _mm512_storeu_si512(tokens + j, fmix64x8(_mm512_loadu_si512(tokens + j)));
  for (; j < total; ++j) tokens[j] = fmix64(tokens[j]);
  if (total < n) return;
  const size_t windows = total - n + 1;
  __m512i p[16];
  for (size_t t = 0; t < n; ++t) p[t] = _mm512_set1_epi64(static_cast<long long>(powers[t]));
  size_t i = 0;
  for (; i + 8 <= windows; i += 8) {
    __m512i sum = _mm512_mullo_epi64(_mm512_loadu_si512(tokens + i), p[0]);
    for (size_t t = 1; t < n; ++t) sum = _mm512_add_epi64(sum, _mm512_mullo_epi64(_mm512_loadu_si512(tokens + i + t), p[t]));
    const __m256i keys = _mm512_cvtepi64_epi32(_mm512_srli_epi64(fmix64x8(sum), 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), keys);
  }
  for (; i < windows; ++i) {
    uint64_t sum = 0;
    for (size_t t = 0; t < n; ++t) sum += tokens[i + t] * powers[t];
    out[i] = static_cast<uint32_t>(fmix64(sum) >> 32);
  }
}

// word_tokens_serial's hashes, 8 words at a time: both 8-byte halves of each word gathered, masked to
// its length, lower-cased and stepped as token_hash does it. Words longer than 16 bytes, or within 16
// bytes of the text's end (token_hash reads a padded copy there), take the serial path.
NEARDUP_TARGET_DQ void word_tokens_avx512dq(const uint8_t* text, size_t size, bool lower, const uint64_t* starts,
                                           const uint64_t* lengths, size_t count, uint64_t* out) {
  using namespace token_constants;
  const __m512i k0 = _mm512_set1_epi64(static_cast<long long>(kTokenK0));
  const __m512i k1 = _mm512_set1_epi64(static_cast<long long>(kTokenK1));
  const __m512i mul = _mm512_set1_epi64(static_cast<long long>(kTokenM));
  const __m512i eight = _mm512_set1_epi64(8), sixteen = _mm512_set1_epi64(16), one = _mm512_set1_epi64(1);
  const __m512i limit = _mm512_set1_epi64(static_cast<long long>(size));
  const __m512i ones = _mm512_set1_epi8(1);
  auto low_bytes = [&](__m512i bytes) NEARDUP_TARGET_DQ {  // (1 << 8 * bytes) - 1; all ones for 8
    return _mm512_sub_epi64(_mm512_sllv_epi64(one, _mm512_slli_epi64(bytes, 3)), one);
  };
  auto lower8 = [&](__m512i v) NEARDUP_TARGET_DQ {  // ascii_lower8 in each lane
    const __m512i ge_a = _mm512_add_epi64(v, _mm512_set1_epi8(0x80 - 'A'));
    const __m512i gt_z = _mm512_add_epi64(v, _mm512_set1_epi8(0x80 - 'Z' - 1));
    const __m512i upper = _mm512_and_si512(_mm512_andnot_si512(gt_z, ge_a), _mm512_set1_epi8(static_cast<char>(0x80)));
    return _mm512_or_si512(v, _mm512_srli_epi64(upper, 2));
  };
  auto step = [&](__m512i h, __m512i v) NEARDUP_TARGET_DQ {
    h = _mm512_mullo_epi64(_mm512_xor_si512(h, v), mul);
    return _mm512_xor_si512(h, _mm512_srli_epi64(h, 32));
  };
  (void)ones;
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m512i start = _mm512_loadu_si512(starts + i);
    const __m512i length = _mm512_loadu_si512(lengths + i);
    const __m512i past = _mm512_add_epi64(start, sixteen);
    const __mmask8 fits = _mm512_cmple_epu64_mask(length, sixteen) & _mm512_cmple_epu64_mask(past, limit);
    const __m512i zero = _mm512_setzero_si512();
    __m512i v1 = _mm512_mask_i64gather_epi64(zero, fits, start, text, 1);
    __m512i v2 = _mm512_mask_i64gather_epi64(zero, fits, _mm512_add_epi64(start, eight), text, 1);
    const __m512i first = _mm512_min_epu64(length, eight);
    const __m512i second = _mm512_sub_epi64(length, first);
    v1 = _mm512_and_si512(v1, low_bytes(first));
    v2 = _mm512_and_si512(v2, low_bytes(second));
    if (lower) {
      v1 = lower8(v1);
      v2 = lower8(v2);
    }
    const __m512i h = _mm512_xor_si512(k0, _mm512_mullo_epi64(length, k1));
    const __m512i after_one = step(h, v1);
    const __m512i after_two = step(after_one, v2);
    const __mmask8 two = _mm512_test_epi64_mask(second, second);
    _mm512_storeu_si512(out + i, _mm512_mask_blend_epi64(two, after_one, after_two));
    for (unsigned rest = static_cast<unsigned>(~fits) & 0xFFu; rest; rest &= rest - 1) {
      const size_t t = i + static_cast<size_t>(__builtin_ctz(rest));
      word_tokens_serial(text, size, lower, starts + t, lengths + t, 1, out + t);
    }
  }
  if (i < count) word_tokens_serial(text, size, lower, starts + i, lengths + i, count - i, out + i);
}

// oph_serial's bins with the shingles hashed 8 at a time, and no filled-bin bitmap: a bin is filled
// when its minimum is below 0xFFFFFFFF (the rare shingle whose low half is 0xFFFFFFFF marks its bin
// apart). The codes are then computed 16 bins at a time, and every bin is reset.
NEARDUP_TARGET_DQ void oph_avx512dq(const uint32_t* x, size_t n, const OphFamily& f, uint32_t* value, uint8_t* out,
                                    uint64_t* keys) {
  const size_t k = f.bins;
  const size_t words = k / 64;
  std::memset(out, 0, oph_bytes(f));
  if (n == 0) return;
  uint64_t mark[64];  // bins whose minimum is 0xFFFFFFFF; bins <= 4096
  bool marked = false;
  auto mark_bin = [&](size_t b) {
    if (!marked) std::memset(mark, 0, sizeof mark);
    marked = true;
    mark[b / 64] |= uint64_t{1} << (b % 64);
  };
  const __m512i salt = _mm512_set1_epi64(static_cast<long long>(f.salt));
  const __m512i c1 = _mm512_set1_epi64(static_cast<long long>(0xff51afd7ed558ccdull));
  const __m512i c2 = _mm512_set1_epi64(static_cast<long long>(0xc4ceb9fe1a85ec53ull));
  const __m512i scale = _mm512_set1_epi64(static_cast<long long>(k));
  const __m512i all = _mm512_set1_epi32(-1);
  alignas(64) uint64_t lanes[8];
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m512i v = _mm512_xor_si512(_mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j))), salt);
    v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
    v = _mm512_mullo_epi64(v, c1);
    v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
    v = _mm512_mullo_epi64(v, c2);
    v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 33));
    // lane = bin << 32 | low half: the bin is the high half of (v >> 32) * bins
    const __m512i bin = _mm512_mul_epu32(_mm512_srli_epi64(v, 32), scale);
    const __m512i keyed = _mm512_mask_blend_epi32(0xAAAA, v, bin);
    _mm512_store_si512(lanes, keyed);
    if (keys) _mm512_storeu_si512(keys + j, keyed);
    for (int t = 0; t < 8; ++t) {
      const uint32_t low = static_cast<uint32_t>(lanes[t]);
      uint32_t& slot = value[lanes[t] >> 32];
      slot = low < slot ? low : slot;
    }
    if (__builtin_expect(_mm512_mask_cmpeq_epi32_mask(0x5555, v, all) != 0, 0))
      for (int t = 0; t < 8; ++t)
        if (static_cast<uint32_t>(lanes[t]) == 0xFFFFFFFFu) mark_bin(lanes[t] >> 32);
  }
  for (; j < n; ++j) {
    const uint64_t v = oph_hash(x[j], f.salt);
    const size_t b = oph_bin(v, k);
    const uint32_t low = static_cast<uint32_t>(v);
    value[b] = low < value[b] ? low : value[b];
    if (keys) keys[j] = (static_cast<uint64_t>(b) << 32) | low;
    if (__builtin_expect(low == 0xFFFFFFFFu, 0)) mark_bin(b);
  }
  uint64_t* planes = reinterpret_cast<uint64_t*>(out);  // 8-byte aligned by the callers
  const __m512i magic = _mm512_set1_epi64(0xAAAAAAABll);  // v / 3 = (v * 0xAAAAAAAB) >> 33 for 32-bit v
  const __m512i one = _mm512_set1_epi32(1);
  for (size_t w = 0; w < words; ++w) {
    uint32_t* slots = value + 64 * w;
    uint64_t filled = 0, p0 = 0, p1 = 0;
    for (int q = 0; q < 4; ++q) {
      const __m512i v = _mm512_loadu_si512(slots + 16 * q);
      const __mmask16 full = _mm512_cmpneq_epu32_mask(v, all);
      filled |= static_cast<uint64_t>(full) << (16 * q);
      const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(v, magic), 33);
      const __m512i odd = _mm512_srli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(v, 32), magic), 33);
      const __m512i third = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
      const __m512i rest = _mm512_sub_epi32(v, _mm512_add_epi32(third, _mm512_add_epi32(third, third)));
      // code = rest + 1: bit 0 is set unless rest == 1, bit 1 unless rest == 0
      p0 |= static_cast<uint64_t>(_mm512_cmpneq_epu32_mask(rest, one)) << (16 * q);
      p1 |= static_cast<uint64_t>(_mm512_test_epi32_mask(rest, rest)) << (16 * q);
    }
    if (marked && mark[w]) {  // minimum 0xFFFFFFFF: filled, 0xFFFFFFFF % 3 == 0, code 1
      filled |= mark[w];
      p0 |= mark[w];
      p1 &= ~mark[w];
    }
    planes[w] = p0 & filled;
    planes[words + w] = p1 & filled;
    if (!keys)
      for (int q = 0; q < 4; ++q) _mm512_storeu_si512(slots + 16 * q, all);
  }
}

}  // namespace neardup

namespace neardup {
namespace {

// Set bits of each byte of v, from a 16-entry table of the nibbles.
NEARDUP_TARGET inline __attribute__((always_inline)) __m512i byte_counts(__m512i v) {
  const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4));
  const __m512i low = _mm512_set1_epi8(0x0F);
  return _mm512_add_epi8(_mm512_shuffle_epi8(table, _mm512_and_si512(v, low)),
                         _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low)));
}

// The three masks of dense_counts (adaptive.hpp) for 8 words of each plane (the words past `words`
// read as zero: a masked load does not touch them).
struct DenseMasks {
  __m512i equal, both, either;
};
NEARDUP_TARGET inline __attribute__((always_inline)) DenseMasks dense_masks(const uint8_t* q, const uint8_t* c,
                                                                            size_t words, size_t w, __mmask8 m) {
  const __m512i q0 = _mm512_maskz_loadu_epi64(m, q + 8 * w);
  const __m512i q1 = _mm512_maskz_loadu_epi64(m, q + 8 * (words + w));
  const __m512i c0 = _mm512_maskz_loadu_epi64(m, c + 8 * w);
  const __m512i c1 = _mm512_maskz_loadu_epi64(m, c + 8 * (words + w));
  const __m512i qf = _mm512_or_si512(q0, q1), cf = _mm512_or_si512(c0, c1);
  const __m512i filled_both = _mm512_and_si512(qf, cf);
  const __m512i differ = _mm512_or_si512(_mm512_xor_si512(q0, c0), _mm512_xor_si512(q1, c1));
  return {_mm512_andnot_si512(differ, filled_both), filled_both, _mm512_or_si512(qf, cf)};
}

// The three counts, 16 bits apart in each 64-bit lane (each at most 4096), summed across the lanes.
NEARDUP_TARGET inline __attribute__((always_inline)) BinCounts unpack_counts(__m512i equal, __m512i both,
                                                                             __m512i either) {
  const __m512i packed =
      _mm512_add_epi64(equal, _mm512_add_epi64(_mm512_slli_epi64(both, 16), _mm512_slli_epi64(either, 32)));
  const uint64_t sum = static_cast<uint64_t>(_mm512_reduce_add_epi64(packed));
  BinCounts n;
  n.equal = sum & 0xFFFF;
  n.both = (sum >> 16) & 0xFFFF;
  n.either = sum >> 32;
  return n;
}

inline __mmask8 tail_mask(size_t left) { return static_cast<__mmask8>(left >= 8 ? 0xFF : (1u << left) - 1u); }

}  // namespace

// dense_counts, 8 words of each plane at a time: per-byte counts from a table (AVX-512BW), added up in
// bytes (at most 8 per step and 8 steps for 4096 bins: 64), then summed into 64-bit lanes.
NEARDUP_TARGET BinCounts dense_counts_avx512(const uint8_t* q, const uint8_t* c, size_t words) {
  __m512i equal = _mm512_setzero_si512(), both = equal, either = equal;
  for (size_t w = 0; w < words; w += 8) {
    const DenseMasks m = dense_masks(q, c, words, w, tail_mask(words - w));
    equal = _mm512_add_epi8(equal, byte_counts(m.equal));
    both = _mm512_add_epi8(both, byte_counts(m.both));
    either = _mm512_add_epi8(either, byte_counts(m.either));
  }
  const __m512i zero = _mm512_setzero_si512();
  return unpack_counts(_mm512_sad_epu8(equal, zero), _mm512_sad_epu8(both, zero), _mm512_sad_epu8(either, zero));
}

#define NEARDUP_TARGET_VPOPCNT __attribute__((target("avx512f,avx512bw,avx512vpopcntdq,popcnt")))

// The same with the 64-bit popcount of AVX-512 VPOPCNTDQ (Ice Lake and later, Zen 4 and later).
NEARDUP_TARGET_VPOPCNT BinCounts dense_counts_avx512_vpopcnt(const uint8_t* q, const uint8_t* c, size_t words) {
  __m512i equal = _mm512_setzero_si512(), both = equal, either = equal;
  for (size_t w = 0; w < words; w += 8) {
    const DenseMasks m = dense_masks(q, c, words, w, tail_mask(words - w));
    equal = _mm512_add_epi64(equal, _mm512_popcnt_epi64(m.equal));
    both = _mm512_add_epi64(both, _mm512_popcnt_epi64(m.both));
    either = _mm512_add_epi64(either, _mm512_popcnt_epi64(m.either));
  }
  return unpack_counts(equal, both, either);
}

void adaptive_similarity_avx512(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows,
                                size_t n, float* out) {
  static const DenseCountsFn count =
      __builtin_cpu_supports("avx512vpopcntdq") ? dense_counts_avx512_vpopcnt : dense_counts_avx512;
  verify_adaptive(query, candidates, bins, rows, n, out, count);
}

}  // namespace neardup
