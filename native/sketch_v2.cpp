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

#include "bbit.hpp"
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
      if (!keys) slot = 0xFFFFFFFFu;
      for (int p = 0; p < f.bits; ++p) plane[p] |= static_cast<uint64_t>((code >> p) & 1u) << t;
    }
    for (int p = 0; p < f.bits; ++p) planes[static_cast<size_t>(p) * words + w] = plane[p];
  }
}

void oph_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
              std::vector<uint32_t>& value, uint8_t* out, uint64_t* keys) {
  // `value` is kept all 0xFFFFFFFF between calls (each kernel resets what it wrote), so a short
  // document costs in proportion to its shingles, not to the bins.
  if (value.size() != f.bins) value.assign(f.bins, 0xFFFFFFFFu);
  kernels.oph(x, n, f, value.data(), out, keys);
}

void bbit_similarity(const uint8_t* query, const uint8_t* candidates, size_t bins, int bits,
                     const int64_t* rows, size_t n, float* out) {
  const size_t stride = static_cast<size_t>(bits) * bins / 8;
  for (size_t j = 0; j < n; ++j)
    out[j] = bbit_estimate(query, candidates + (rows ? static_cast<size_t>(rows[j]) : j) * stride, bins, bits);
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

// ---- sketch format 3: format 2's bins, or every shingle of a short document ------------------------
//
// A document with n distinct shingles, few enough that w = bins / n - 1 >= 3, is stored sparse: the
// filled-bin bitmap, then every shingle (in bin order, within a bin by its 32-bit value, so the bin's
// minimum comes first) as its value mod 3 * 2^(w - 2) in w bits and a bit saying whether the next one
// is in the same bin. From that the bins' minima (format 2's codes: their value mod 3) can be read, and
// two sparse documents can be compared shingle by shingle: one-permutation hashing loses the shingles
// that share a bin, which on documents of a few hundred shingles is most of its error.

namespace neardup {

namespace {

inline uint32_t sparse_modulus(int width) { return 3u << (width - 2); }

// Set bits of a word. This file is built for any x86-64 (no POPCNT instruction assumed), where
// __builtin_popcountll is a call into libgcc: a few times slower than these steps, inlined.
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

// A format-3 sketch decoded: its filled-bin bitmap, each filled bin's minimum's residue (mod
// `modulus`; 3 in dense mode), and in sparse mode every shingle's bin and residue, in bin order.
struct Decoded {
  uint64_t filled[64];
  uint32_t residue[4096];
  uint16_t elem_bin[4096];
  uint32_t elem_res[4096];
  size_t elements = 0;
  uint32_t modulus = 3;
  int width = 0;
};

void decode_adaptive(const uint8_t* sketch, size_t bins, Decoded& d) {
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
    std::memset(d.filled, 0, 8 * words);  // not a format-3 sketch: nothing filled
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

}  // namespace

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
  // Dense mode first: format 2's bins, from the kernel (the same bytes on every ISA), which also hands
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

void adaptive_similarity(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows,
                         size_t n, float* out) {
  const size_t words = bins / 64;
  const size_t stride = adaptive_bytes(bins);
  thread_local Decoded tls_q, tls_c;
  Decoded& q = tls_q;
  Decoded& c = tls_c;
  // A dense query against dense candidates (most pairs) needs no decoding: done once, when needed.
  bool decoded = query[0] != 0;
  if (decoded) decode_adaptive(query, bins, q);
  for (size_t j = 0; j < n; ++j) {
    const uint8_t* s = candidates + (rows ? static_cast<size_t>(rows[j]) : j) * stride;
    double j_hat = 0.0;
    if (query[0] == 0 && s[0] == 0) {
      // Both dense: format 2's estimate on its planes, a word at a time.
      uint64_t equal = 0, both = 0, either = 0;
      const uint8_t* qd = query + 1;
      const uint8_t* cd = s + 1;
      for (size_t w = 0; w < words; ++w) {
        uint64_t q0, q1, c0, c1;
        std::memcpy(&q0, qd + 8 * w, 8);
        std::memcpy(&q1, qd + 8 * (words + w), 8);
        std::memcpy(&c0, cd + 8 * w, 8);
        std::memcpy(&c1, cd + 8 * (words + w), 8);
        const uint64_t qf = q0 | q1, cf = c0 | c1, filled_both = qf & cf;
        equal += bit_count(~((q0 ^ c0) | (q1 ^ c1)) & filled_both);
        both += bit_count(filled_both);
        either += bit_count(qf | cf);
      }
      const double chance = 1.0 / 3.0;  // as format 2's bbit_similarity computes it, to the bit
      if (either)
        j_hat = (static_cast<double>(equal) - chance * static_cast<double>(both)) / (1.0 - chance) / static_cast<double>(either);
    } else {
      if (!decoded) {
        decode_adaptive(query, bins, q);
        decoded = true;
      }
      decode_adaptive(s, bins, c);
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
        // Format 2's estimate over the bins' minima, at the smaller of the two moduli (both are
        // multiples of 3, so either residue reduces to the other's).
        uint64_t equal = 0, both = 0, either = 0;
        for (size_t w = 0; w < words; ++w) {
          const uint64_t filled_both = q.filled[w] & c.filled[w];
          either += bit_count(q.filled[w] | c.filled[w]);
          both += bit_count(filled_both);
          for (uint64_t m = filled_both; m; m &= m - 1) {
            const size_t bin = w * 64 + static_cast<size_t>(__builtin_ctzll(m));
            equal += mod_three_shifted(q.residue[bin], shift) == mod_three_shifted(c.residue[bin], shift);
          }
        }
        if (either)
          j_hat = (static_cast<double>(equal) - chance * static_cast<double>(both)) / (1.0 - chance) / static_cast<double>(either);
      }
    }
    out[j] = static_cast<float>(j_hat < 0.0 ? 0.0 : (j_hat > 1.0 ? 1.0 : j_hat));
  }
}

}  // namespace neardup
