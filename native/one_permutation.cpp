// The estimate sketch: what a document keeps for verification in estimate mode.
//
// One-permutation hashing (Li, Owen and Zhang 2012) into `bins` bins from one 64-bit hash per shingle,
// each bin kept as a 2-bit code (b-bit minwise hashing, Li and Koenig 2010): 0 for an empty bin, else
// 1 + its minimum mod 3. Stored as two bit planes, so comparing two sketches is XOR, OR and popcount.
// Empty bins are not densified: most near-duplicate pairs at a threshold are short documents (half of
// them with fewer than ~360 shingles in their union on the benchmark corpus), whose bins are mostly
// empty; densification copies a few minima into many bins and doubled the error there, while the bins
// filled on one side only are exact disagreements (bench/bench_estimators.py). A short document keeps
// every shingle instead (its sparse mode, below).
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

OphFamily make_oph_family(size_t bins, uint64_t seed) {
  OphFamily f;
  f.bins = bins;
  f.salt = splitmix_first(seed ^ kOphSalt);
  return f;
}

// The portable kernel, the reference of the others: one pass over the shingles marks the filled bins in
// a bitmap and keeps each bin's minimum, then one pass over the filled bins writes their codes.
void oph_serial(const uint32_t* x, size_t n, const OphFamily& f, uint32_t* value, uint8_t* out, uint64_t* keys) {
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
    if (keys) keys[j] = (static_cast<uint64_t>(b) << 32) | low;
  }
  // Code 0 marks an empty bin; a filled one keeps its minimum's value mod 3, plus 1.
  uint64_t* planes = reinterpret_cast<uint64_t*>(out);  // out is 8-byte aligned by the callers
  for (size_t w = 0; w < words; ++w) {
    uint64_t plane0 = 0, plane1 = 0;
    for (uint64_t m = filled[w]; m; m &= m - 1) {
      const unsigned t = static_cast<unsigned>(__builtin_ctzll(m));
      uint32_t& slot = value[w * 64 + t];
      const uint32_t code = slot % 3u + 1u;
      if (!keys) slot = 0xFFFFFFFFu;
      plane0 |= static_cast<uint64_t>(code & 1u) << t;
      plane1 |= static_cast<uint64_t>(code >> 1) << t;
    }
    planes[w] = plane0;
    planes[words + w] = plane1;
  }
}

void oph_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
              std::vector<uint32_t>& value, uint8_t* out, uint64_t* keys) {
  // `value` is kept all 0xFFFFFFFF between calls (each kernel resets what it wrote), so a short
  // document costs in proportion to its shingles, not to the bins.
  if (value.size() != f.bins) value.assign(f.bins, 0xFFFFFFFFu);
  kernels.oph(x, n, f, value.data(), out, keys);
}

// ---- the sparse mode: every shingle of a short document ------------------------------------------
//
// A document with n distinct shingles, few enough that w = bins / n - 1 >= 3, is stored sparse: the
// filled-bin bitmap, then every shingle (in bin order, within a bin by its 32-bit value, so the bin's
// minimum comes first) as its value mod 3 * 2^(w - 2) in w bits and a bit saying whether the next one
// is in the same bin. From that the bins' minima (the dense mode's codes: their value mod 3) can be
// read, and two sparse documents can be compared shingle by shingle: one-permutation hashing loses the
// shingles that share a bin, which on documents of a few hundred shingles is most of its error.

size_t adaptive_bytes(size_t bins) { return 1 + bins / 4; }

void adaptive_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
                   std::vector<uint32_t>& value, uint8_t* out) {
  const size_t k = f.bins;
  const size_t words = k / 64;
  thread_local ByteBuffer tls_keys, tls_extra;
  thread_local uint32_t tls_head[4096 + 1];  // per bin, its first other value in `extra` (0: none)
  // Plain pointers taken once: a thread-local's address would otherwise be looked up (a call, in a
  // shared library) at every use, even through a reference.
  uint8_t* key_bytes = tls_keys.reserve(8 * (n + 1));
  uint8_t* extra_bytes = tls_extra.reserve(8 * (n + 2));
  uint32_t* head = tls_head;
  // Dense mode first: the 2-bit bins, from the kernel (the same bytes on every ISA), which also hands
  // back every shingle's bin and value and leaves each bin's minimum in `value` (reset below) when
  // the document may be sparse: at most bins / 4 distinct shingles, so a document of more than a
  // quarter more shingles than that (repeats and all) is asked for none (the keys and the reset of
  // the minima cost a dense one time), and in the rare case it is sparse, they are found again below.
  alignas(64) uint8_t dense[1024];  // 2 planes of up to 4096 bins
  uint64_t* keys = reinterpret_cast<uint64_t*>(key_bytes);
  if (value.size() != k) value.assign(k, 0xFFFFFFFFu);
  const bool asked = 16 * n <= 5 * k;
  kernels.oph(x, n, f, value.data(), dense, asked ? keys : nullptr);
  uint32_t* minimum = value.data();
  size_t filled_bins = 0;
  uint64_t filled[64];
  for (size_t w = 0; w < words; ++w) {
    uint64_t p0, p1;
    std::memcpy(&p0, dense + 8 * w, 8);
    std::memcpy(&p1, dense + 8 * (words + w), 8);
    filled[w] = p0 | p1;
    filled_bins += static_cast<size_t>(bit_count(filled[w]));
  }
  auto reset = [&] {
    for (size_t w = 0; w < words; ++w)
      for (uint64_t m = filled[w]; m; m &= m - 1) {
        const size_t b = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
        minimum[b] = 0xFFFFFFFFu;
        head[b] = 0;
      }
  };
  const size_t body = k / 4;
  out[0] = 0;
  // Distinct shingles >= filled bins: a document with too many filled bins is dense without a look at
  // its shingles.
  if (filled_bins == 0 || k / filled_bins < kAdaptiveMinWidth + 1) {
    if (asked) std::fill(minimum, minimum + k, 0xFFFFFFFFu);  // most bins filled: all, a vector at a time
    std::memcpy(out + 1, dense, body);
    return;
  }
  if (!asked) {  // many repeated shingles in few bins: their bins, values and minima found again
    for (size_t j = 0; j < n; ++j) {
      const uint64_t v = oph_hash(x[j], f.salt);
      const size_t b = oph_bin(v, k);
      const uint32_t low = static_cast<uint32_t>(v);
      keys[j] = (static_cast<uint64_t>(b) << 32) | low;
      minimum[b] = low < minimum[b] ? low : minimum[b];
    }
  }
  // The values of a bin other than its minimum (most bins hold one shingle): each bin's in a list
  // kept in order, repeats dropped. Entry i >= 1 holds a value and the entry after it in its bin's
  // list (0: the last); head[bin] is the first (0: none). `head` is all zero between calls: only
  // filled bins' entries are set, and they are reset below.
  uint32_t* extra_value = reinterpret_cast<uint32_t*>(extra_bytes);
  uint32_t* extra_next = extra_value + (n + 2);
  size_t extras = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint64_t key = keys[j];
    const size_t b = static_cast<size_t>(key >> 32);
    const uint32_t v = static_cast<uint32_t>(key);
    if (v == minimum[b]) continue;
    uint32_t* link = &head[b];
    while (*link && extra_value[*link] < v) link = &extra_next[*link];
    if (*link && extra_value[*link] == v) continue;  // a repeat
    ++extras;
    extra_value[extras] = v;
    extra_next[extras] = *link;
    *link = static_cast<uint32_t>(extras);
  }
  const size_t distinct = filled_bins + extras;
  if (k / distinct < kAdaptiveMinWidth + 1) {
    reset();
    std::memcpy(out + 1, dense, body);
    return;
  }
  const int width = static_cast<int>(std::min<size_t>(k / distinct - 1, kAdaptiveMaxWidth));
  const unsigned shift = static_cast<unsigned>(width - 2);  // the modulus is 3 * 2^shift
  const unsigned bits = static_cast<unsigned>(width) + 1;
  out[0] = static_cast<uint8_t>(width);
  std::memcpy(out + 1, filled, 8 * words);
  // Bin by bin, its minimum then its other values in order, as codes of width + 1 bits (the last bit:
  // another value of the same bin follows) through a 64-bit accumulator into the bit stream.
  uint8_t* stream = out + 1 + 8 * words;
  std::memset(stream, 0, body - 8 * words);
  uint64_t acc = 0;
  unsigned held = 0;
  size_t byte = 0;
  for (size_t w = 0; w < words; ++w)
    for (uint64_t m = filled[w]; m; m &= m - 1) {
      const size_t b = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
      uint32_t v = minimum[b];
      uint32_t next = head[b];
      minimum[b] = 0xFFFFFFFFu;
      head[b] = 0;
      for (;;) {
        const uint32_t more = next != 0;
        acc |= static_cast<uint64_t>(mod_three_shifted(v, shift) | (more << width)) << held;
        held += bits;
        if (held >= 32) {
          std::memcpy(stream + byte, &acc, 4);
          byte += 4;
          acc >>= 32;
          held -= 32;
        }
        if (!more) break;
        v = extra_value[next];
        next = extra_next[next];
      }
    }
  while (held > 0) {
    stream[byte++] = static_cast<uint8_t>(acc);
    acc >>= 8;
    held = held > 8 ? held - 8 : 0;
  }
}

// The reference of the verification kernels: AdaptiveEstimate, one pair at a time.
void adaptive_similarity_serial(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows,
                                size_t n, float* out) {
  const size_t stride = adaptive_bytes(bins);
  thread_local AdaptiveDecoded tls_q, tls_c;
  AdaptiveEstimate estimate(query, bins, tls_q, tls_c);
  for (size_t j = 0; j < n; ++j) out[j] = estimate(candidates + (rows ? static_cast<size_t>(rows[j]) : j) * stride);
}

void verify_adaptive(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows, size_t n,
                     float* out, DenseCountsFn count) {
  const size_t stride = adaptive_bytes(bins), words = bins / 64;
  thread_local AdaptiveDecoded tls_q, tls_c;
  BasicAdaptiveEstimate<decode_adaptive_fast> estimate(query, bins, tls_q, tls_c);
  // Every pair but two valid sparse sketches is compared on the bins' minima mod 3 (the smaller
  // modulus: a dense sketch's, or an unreadable one's, which has no bin filled): on the two sides'
  // residue planes, the query's decoded once, so the pair costs what a dense pair costs (plus the
  // walk of a sparse candidate's stream). AdaptiveEstimate's integers, so its float.
  alignas(64) uint8_t query_planes[1024], candidate_planes[1024];
  const uint8_t* q = query + 1;
  if (query[0] != 0) {
    residue_planes(estimate.decoded_query(), bins, query_planes);
    q = query_planes;
  }
  auto sparse = [](uint8_t mode) { return mode >= kAdaptiveMinWidth && mode <= kAdaptiveMaxWidth; };
  const bool sparse_query = sparse(query[0]);
  constexpr size_t kAhead = 8;  // random rows: their lines asked for this many candidates ahead
  auto row_of = [&](size_t j) { return candidates + static_cast<size_t>(rows[j]) * stride; };
  if (rows)
    for (size_t j = 0; j < std::min(n, kAhead); ++j)
      for (size_t line = 0; line < stride; line += 64) __builtin_prefetch(row_of(j) + line);
  for (size_t j = 0; j < n; ++j) {
    const uint8_t* c = rows ? row_of(j) : candidates + j * stride;
    if (rows && j + kAhead < n)
      for (size_t line = 0; line < stride; line += 64) __builtin_prefetch(row_of(j + kAhead) + line);
    if (c[0] == 0) {
      out[j] = clamped(bins_estimate(count(q, c + 1, words), 3));
    } else if (sparse(c[0]) && !sparse_query) {
      sparse_residue_planes(c, bins, candidate_planes);
      out[j] = clamped(bins_estimate(count(q, candidate_planes, words), 3));
    } else {
      out[j] = estimate(c);  // two sparse sketches (or an unreadable candidate)
    }
  }
}

}  // namespace neardup
