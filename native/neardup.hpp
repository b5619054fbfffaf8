// The sketch core's declarations: text to shingle hashes, MinHash kernels (one per instruction set),
// band keys, similarity, and the dispatch table. Only bindings.cpp knows Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adaptive.hpp"

namespace neardup {

// MurmurHash3's 64-bit finalizer (full avalanche). Part of the signature format: token hashes,
// shingle keys and band keys all end with it.
inline uint64_t fmix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

struct Kernels;

// The token hash's constants (text.cpp): T = steps of h = (h ^ 8 bytes) * M, h ^= h >> 32, from
// h = K0 ^ (length * K1), then fmix64.
namespace token_constants {
constexpr uint64_t kTokenK0 = 0x243f6a8885a308d3ull;
constexpr uint64_t kTokenK1 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kTokenM = 0xbf58476d1ce4e5b9ull;
}  // namespace token_constants

// ---- text to features ----------------------------------------------------------------------------

struct TextOptions {
  bool char_shingles = false;  // false: word n-grams; true: character n-grams
  int size = 5;                // n of the n-grams
  bool normalize = true;       // Unicode NFKC
  bool lowercase = true;       // str.lower(), with its Final_Sigma rule
  bool collapse_whitespace = true;  // char shingles only: runs of white space become one space, trimmed
};

// A text as CPython stores it: code units of 1, 2 or 4 bytes, each one a code point (lone surrogates
// included: they are just code points that are not letters).
struct TextView {
  const void* data = nullptr;
  size_t length = 0;
  int kind = 1;        // bytes per code unit: 1, 2 or 4
  bool ascii = false;  // every code point < 0x80: the fast path
};

// Appends one 32-bit hash per shingle of `text` to `out` (repeats included: MinHash ignores them).
// `scratch` is reused between calls to avoid allocations. Nothing is appended for a featureless text.
// A growable byte buffer that is not zero-filled on growth (it is always written before it is read).
struct ByteBuffer {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0, capacity = 0;
  uint8_t* reserve(size_t n) {
    if (n > capacity) {
      data.reset(new uint8_t[n]);
      capacity = n;
    }
    return data.get();
  }
};

// Buffers reused from one text to the next (and, per thread, from one call to the next).
struct TextScratch {
  std::vector<uint32_t> a, b, seg, tmp;
  std::vector<uint8_t> bytes;
  ByteBuffer utf8;
  // Drop buffers that a huge text grew past `limit` bytes, so one 10 MB text does not pin memory.
  void trim(size_t limit);
};
void shingle_hashes(const TextView& text, const TextOptions& options, const Kernels& kernels,
                    TextScratch& scratch, std::vector<uint32_t>& out);

// The normalized, lower-cased code points of a text, as the tokenizer sees them (tests, debugging).
std::u32string normalized_text(const TextView& text, const TextOptions& options);

// ---- MinHash -------------------------------------------------------------------------------------

// The hash family: h_i(x) = high 32 bits of (A_i * x + B_i) mod 2^64, for a 32-bit shingle hash x and
// 64-bit A_i (odd), B_i. Stored split in 32-bit halves, the layout every kernel reads.
struct HashFamily {
  int num_perm = 0;
  std::vector<uint32_t> a_lo, a_hi, b_lo, b_hi;
  std::vector<uint64_t> a, b;  // the same A_i and B_i whole (for kernels with a 64-bit multiply)
};
HashFamily make_hash_family(int num_perm, uint64_t seed);

inline constexpr uint32_t kEmptySlot = 0xFFFFFFFFu;

// signature[i] = min(signature[i], min_j h_i(x[j])). num_perm is a multiple of 8 for the SIMD paths;
// the serial path takes any.
using MinhashKernel = void (*)(const uint32_t* x, size_t n, const HashFamily& family, uint32_t* signature);
// out[j] = equal slots of query and candidates[row_j] / k, row_j = rows ? rows[j] : j.
using SimilarityKernel = void (*)(const uint32_t* query, const uint32_t* candidates, size_t k,
                                  const int64_t* rows, size_t n, float* out);

void minhash_serial(const uint32_t*, size_t, const HashFamily&, uint32_t*);
void similarity_serial(const uint32_t*, const uint32_t*, size_t, const int64_t*, size_t, float*);
#ifdef NEARDUP_X86
void minhash_avx2(const uint32_t*, size_t, const HashFamily&, uint32_t*);
void similarity_avx2(const uint32_t*, const uint32_t*, size_t, const int64_t*, size_t, float*);
void minhash_avx512(const uint32_t*, size_t, const HashFamily&, uint32_t*);
void minhash_avx512dq(const uint32_t*, size_t, const HashFamily&, uint32_t*);
void similarity_avx512(const uint32_t*, const uint32_t*, size_t, const int64_t*, size_t, float*);
#endif

// ---- dispatch ------------------------------------------------------------------------------------

// For the 64 bytes at p: bit i of the result is set when byte i is an ASCII letter or digit, and bit
// i of *high when byte i is >= 0x80 (part of a multi-byte UTF-8 sequence).
using AsciiWordMaskKernel = uint64_t (*)(const uint8_t* p, uint64_t* high);
uint64_t ascii_word_mask_serial(const uint8_t* p, uint64_t* high);
#ifdef NEARDUP_X86
uint64_t ascii_word_mask_avx2(const uint8_t* p, uint64_t* high);
uint64_t ascii_word_mask_avx512(const uint8_t* p, uint64_t* high);
#endif

// Size of the intersection of two sorted sets of distinct values when it is >= need; otherwise some
// value below need (the merge stops early). Every path returns the same number whenever it is >= need.
size_t intersect_serial(const uint32_t* a, size_t na, const uint32_t* b, size_t nb, size_t need);
using IntersectKernel = size_t (*)(const uint32_t* a, size_t na, const uint32_t* b, size_t nb, size_t need);
#ifdef NEARDUP_X86
size_t intersect_avx2(const uint32_t*, size_t, const uint32_t*, size_t, size_t);
size_t intersect_avx512(const uint32_t*, size_t, const uint32_t*, size_t, size_t);
#endif

// Shingle keys of a block of tokens: finishes the hashes tokens[held, held + fresh) in place
// (fmix64), then writes out[i] = high 32 bits of fmix64(sum_j tokens[i + j] * powers[j]) (mod 2^64)
// for every window i + n <= held + fresh. powers[j] = P^(n - 1 - j); n <= 64.
using ShingleKeysKernel = void (*)(uint64_t* tokens, size_t held, size_t fresh, size_t n, const uint64_t* powers,
                                   uint32_t* out);
void shingle_keys_serial(uint64_t*, size_t, size_t, size_t, const uint64_t*, uint32_t*);
#ifdef NEARDUP_X86
void shingle_keys_avx512dq(uint64_t*, size_t, size_t, size_t, const uint64_t*, uint32_t*);
#endif

// Token hashes (before their final fmix64) of the words text[starts[i], starts[i] + lengths[i]) of a
// UTF-8 text of `size` bytes, ASCII letters lower-cased first when `lower`.
using WordTokensKernel = void (*)(const uint8_t* text, size_t size, bool lower, const uint64_t* starts,
                                  const uint64_t* lengths, size_t count, uint64_t* out);
void word_tokens_serial(const uint8_t*, size_t, bool, const uint64_t*, const uint64_t*, size_t, uint64_t*);
#ifdef NEARDUP_X86
void word_tokens_avx512dq(const uint8_t*, size_t, bool, const uint64_t*, const uint64_t*, size_t, uint64_t*);
#endif

struct OphFamily;
// The dense estimate sketch's bins of shingle hashes (see oph_bins); `value` is the caller's scratch of
// f.bins slots, all 0xFFFFFFFF before the call and, when `keys` is null, after it. When `keys` is not
// null, keys[j] = bin << 32 | value of shingle j (what the sparse mode sorts a short document's
// shingles by), and `value` keeps each filled bin's minimum for the caller, who resets those slots to
// 0xFFFFFFFF.
using OphKernel = void (*)(const uint32_t* x, size_t n, const OphFamily& f, uint32_t* value, uint8_t* out,
                           uint64_t* keys);
void oph_serial(const uint32_t*, size_t, const OphFamily&, uint32_t*, uint8_t*, uint64_t*);
#ifdef NEARDUP_X86
void oph_avx512dq(const uint32_t*, size_t, const OphFamily&, uint32_t*, uint8_t*, uint64_t*);
#endif

// Verification of estimate sketches: out[j] = the estimate of `query` with candidates[row_j] (each
// adaptive_bytes(bins) bytes), row_j = rows ? rows[j] : j; AdaptiveEstimate's float on every path.
// The SIMD paths count every pair but two valid sparse sketches on two pairs of bit planes with vector
// popcounts (a sparse side's residue_planes); the serial path is the reference, one pair at a time.
using AdaptiveSimilarityKernel = void (*)(const uint8_t* query, const uint8_t* candidates, size_t bins,
                                          const int64_t* rows, size_t n, float* out);
void adaptive_similarity_serial(const uint8_t*, const uint8_t*, size_t, const int64_t*, size_t, float*);
// The SIMD paths' loop over the candidates (one_permutation.cpp): `count` (dense_counts's integers)
// on the two sides' planes for every pair compared on the bins' minima mod 3; AdaptiveEstimate (with
// decode_adaptive_fast) for two sparse sketches.
using DenseCountsFn = BinCounts (*)(const uint8_t* q, const uint8_t* c, size_t words);
void verify_adaptive(const uint8_t* query, const uint8_t* candidates, size_t bins, const int64_t* rows, size_t n,
                     float* out, DenseCountsFn count);
#ifdef NEARDUP_X86
BinCounts dense_counts_avx2(const uint8_t* q, const uint8_t* c, size_t words);
BinCounts dense_counts_avx512(const uint8_t* q, const uint8_t* c, size_t words);
BinCounts dense_counts_avx512_vpopcnt(const uint8_t* q, const uint8_t* c, size_t words);
void adaptive_similarity_avx2(const uint8_t*, const uint8_t*, size_t, const int64_t*, size_t, float*);
void adaptive_similarity_avx512(const uint8_t*, const uint8_t*, size_t, const int64_t*, size_t, float*);
#endif

struct Kernels {
  const char* name;
  MinhashKernel minhash;
  SimilarityKernel similarity;
  AsciiWordMaskKernel ascii_word_mask;
  IntersectKernel intersect;
  OphKernel oph;
  ShingleKeysKernel shingle_keys;
  WordTokensKernel word_tokens;
  AdaptiveSimilarityKernel adaptive_similarity;
};
// Chosen once at load: the best the CPU supports, or NEARDUP_FORCE_ISA=serial|avx2|avx512.
const Kernels& active_kernels();
// Every table this CPU can run, serial first; `find_kernels` returns nullptr for an unknown name.
std::vector<const Kernels*> available_kernels();
const Kernels* find_kernels(const std::string& name);

// ---- whole documents -----------------------------------------------------------------------------

// Signature of one text into `signature` (family.num_perm slots). A featureless text gets kEmptySlot
// everywhere; any other never holds kEmptySlot (it is lowered to kEmptySlot - 1).
void text_signature(const TextView& text, const TextOptions& options, const HashFamily& family,
                    const Kernels& kernels, TextScratch& scratch, std::vector<uint32_t>& hashes,
                    uint32_t* signature);

// One 64-bit key per band from `rows` slots; never 0 for a real signature, 0 for an empty one.
// `salt` is mixed into every key (0 for the library's keys; the service salts each verification
// mode's keys apart).
void band_keys(const uint32_t* signatures, size_t n, size_t num_perm, size_t bands, size_t rows,
               uint64_t* out, uint64_t salt = 0);

const char* unicode_version();

// ---- the verification sketches (one_permutation.cpp) ---------------------------------------------

// One-permutation hashing into `bins` bins (a multiple of 64, at most 4096), each kept as a 2-bit code.
struct OphFamily {
  size_t bins = 1024;
  uint64_t salt = 0;
};
OphFamily make_oph_family(size_t bins, uint64_t seed);
// A shingle's one-permutation hash, and its bin: the high 32 bits scaled to [0, bins). The low 32 bits
// are the value kept as the bin's minimum.
inline uint64_t oph_hash(uint32_t x, uint64_t salt) { return fmix64(static_cast<uint64_t>(x) ^ salt); }
inline size_t oph_bin(uint64_t v, size_t bins) {
  return static_cast<size_t>(((v >> 32) * static_cast<uint64_t>(bins)) >> 32);
}
inline size_t oph_bytes(const OphFamily& f) { return f.bins / 4; }
// The 2-bit codes of the one-permutation bins of the shingle hashes x[0..n) (repeats allowed): 0 for
// an empty bin, else 1 + its minimum mod 3; as 2 bit planes of bins/64 little-endian words each, into
// out (oph_bytes, 8-byte aligned); all zero when n == 0. `value` is scratch kept by the caller between
// calls (it stays all 0xFFFFFFFF). Every kernel gives the same bytes.
void oph_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
              std::vector<uint32_t>& value, uint8_t* out, uint64_t* keys = nullptr);
// The estimate sketch: a mode byte, then bins / 4 bytes. Mode 0 (dense): oph_bins's two bit planes.
// Mode w in [kAdaptiveMinWidth, kAdaptiveMaxWidth] (sparse: n distinct (bin, value) pairs with
// w = min(bins / n - 1, kAdaptiveMaxWidth) >= kAdaptiveMinWidth): the filled-bin bitmap (bins / 64
// little-endian words), then as a little-endian bit stream every shingle in bin order (within a bin by
// its 32-bit value): the value mod 3 * 2^(w - 2) in w bits, then 1 if the next shingle is in the same
// bin, else 0; the rest zero. Every ISA gives the same bytes. Two sparse sketches whose widths are both
// at least kAdaptiveSetWidth are compared shingle by shingle, any other pair on the bins' minima.
// (The widths, kAdaptive*Width, and the estimate of one pair are in adaptive.hpp.)
size_t adaptive_bytes(size_t bins);
void adaptive_bins(const uint32_t* x, size_t n, const OphFamily& f, const Kernels& kernels,
                   std::vector<uint32_t>& value, uint8_t* out);
// The exact sketch: sort and deduplicate in place; returns the size.
size_t sorted_set(std::vector<uint32_t>& hashes);

}  // namespace neardup
