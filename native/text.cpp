// Text to features: NFKC normalization, str.lower(), words (or characters), n-gram shingles, one
// 32-bit hash per shingle. Everything here is plain integer code: the same on every machine.
//
// The definition (tests/reference.py is its executable twin):
//   NFKC, then str.lower() (with its Final_Sigma rule), then words = maximal runs of alphanumerics
//   (str.isalnum) where combining marks continue a word and each alphanumeric of a script written
//   without spaces (Han, Kana, Thai...) is a word of its own; then word n-grams, or character n-grams
//   of the text with white space runs collapsed to one space. Fewer than n tokens: one shingle of all.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "neardup.hpp"
#include "unicode_tables.inc"

namespace neardup {
namespace {

using unicode::Props;

inline const Props& props(uint32_t cp) {
  if (cp >= 0x110000) cp = 0xFFFF;  // cannot come from Python; a noncharacter's properties
  return unicode::kProps[unicode::kStage2[(static_cast<uint32_t>(unicode::kStage1[cp >> unicode::kBlockShift])
                                           << unicode::kBlockShift) |
                                          (cp & ((1u << unicode::kBlockShift) - 1))]];
}
inline uint8_t flags_of(uint32_t cp) { return props(cp).flags; }

// ---- hashing of tokens and shingles (part of the signature format) -------------------------------
//
// token hash  T(w) = fold of w's UTF-8 bytes, 8 at a time, little-endian, zero-padded:
//               h = K0 ^ (len * K1); per block v: h = (h ^ v) * M; h ^= h >> 32; then fmix64(h)
// shingle     S = sum_i T(w_i) * P^(n-1-i) mod 2^64 over its n tokens (a rolling polynomial, so the
//               next shingle costs two multiplies), x = high 32 bits of fmix64(S).
// Both finalizers are the full fmix64 avalanche on purpose: consecutive shingles' S are linearly
// related (S' = S*P + t_new - t_old*P^n) and the MinHash family is linear too, so a weak finalizer
// leaves correlations that bias the estimate (measured: bias -0.033 at J 0.2-0.4 with a one-multiply
// finalizer, none with fmix64; bench/bench_sketch.py accuracy section).

using token_constants::kTokenK0;
using token_constants::kTokenK1;
using token_constants::kTokenM;
constexpr uint64_t kShingleP = 0x9fb21c651e98df25ull;

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// ASCII upper case to lower case in 8 bytes at once (every byte < 0x80).
inline uint64_t ascii_lower8(uint64_t v) {
  constexpr uint64_t ones = 0x0101010101010101ull;
  const uint64_t ge_a = v + ones * (0x80 - 'A');      // high bit set where byte >= 'A'
  const uint64_t gt_z = v + ones * (0x80 - 'Z' - 1);  // high bit set where byte > 'Z'
  const uint64_t upper = ge_a & ~gt_z & (ones * 0x80);
  return v | (upper >> 2);
}

inline uint64_t token_step(uint64_t h, uint64_t v) {
  h = (h ^ v) * kTokenM;
  return h ^ (h >> 32);
}

// Mask of the low `bytes` bytes of a word (0 to 8), without a branch: two half shifts, so that 8 bytes
// shift the 1 out (giving all ones after the -1) instead of shifting by 64, which is undefined.
inline uint64_t low_bytes_mask(size_t bytes) {
  return ((uint64_t{1} << (4 * bytes)) << (4 * bytes)) - 1;
}

// Up to 8 bytes at p (fewer when len < 8), zero-padded; reads past p+len only inside the buffer.
inline uint64_t load_upto8(const uint8_t* p, size_t len, const uint8_t* end) {
  if (end - p >= 8) return load_le64(p) & low_bytes_mask(len < 8 ? len : 8);
  uint8_t tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tail, p, len < 8 ? len : 8);
  return load_le64(tail);
}

// T over bytes [p, p+len) of a buffer ending at `end`, before its final fmix64 (which the shingle
// step applies, 8 tokens at a time where it can); ASCII bytes are lower-cased first when asked.
// Words of up to 16 bytes (nearly all) take no data-dependent branch: both steps are computed and
// the right one kept, which is the same value as the loop below.
template <bool kLower>
inline uint64_t token_hash(const uint8_t* p, size_t len, const uint8_t* end) {
  uint64_t h = kTokenK0 ^ (len * kTokenK1);
  if (len <= 16) {
    uint64_t v1, v2;
    if (end - p >= 16) {
      v1 = load_le64(p);
      v2 = load_le64(p + 8);
    } else {
      uint8_t tail[16] = {0};
      std::memcpy(tail, p, static_cast<size_t>(std::min<ptrdiff_t>(end - p, 16)));
      v1 = load_le64(tail);
      v2 = load_le64(tail + 8);
    }
    const size_t second = len > 8 ? len - 8 : 0;
    v1 &= low_bytes_mask(len - second);
    v2 &= low_bytes_mask(second);
    if (kLower) {
      v1 = ascii_lower8(v1);
      v2 = ascii_lower8(v2);
    }
    const uint64_t one = token_step(h, v1);
    const uint64_t two = token_step(one, v2);
    h = second ? two : one;
  } else {
    while (len >= 8) {
      uint64_t v = load_le64(p);
      if (kLower) v = ascii_lower8(v);
      h = token_step(h, v);
      p += 8;
      len -= 8;
    }
    if (len) {
      uint64_t v = load_upto8(p, len, end);
      if (kLower) v = ascii_lower8(v);
      h = token_step(h, v);
    }
  }
  return h;
}

inline uint32_t shingle_key(uint64_t s) { return static_cast<uint32_t>(fmix64(s) >> 32); }

// Turns the stream of token hashes into shingle keys: a block of up to 256 tokens at a time, after the
// last n - 1 tokens of the block before, goes to the ISA's shingle_keys kernel (native/neardup.hpp),
// which finishes the token hashes and computes the key of every window of n tokens ending in the block:
// the polynomial sum_j t[i + j] * P^(n - 1 - j) mod 2^64, the same number as rolling it token by token.
// Per word this leaves only the word's own hash on the scalar path.
class ShingleRoller {
 public:
  ShingleRoller(size_t n, std::vector<uint32_t>& out, const Kernels& kernels)
      : n_(n), out_(&out), keys_(kernels.shingle_keys), words_(kernels.word_tokens) {
    uint64_t p = 1;
    for (size_t j = n; j-- > 0;) {
      powers_[j] = p;
      p *= kShingleP;
    }
  }
  ShingleRoller(const ShingleRoller&) = delete;
  ShingleRoller& operator=(const ShingleRoller&) = delete;
  // A token by its hash T (before its final fmix64).
  inline void push(uint64_t raw) {
    tokens_[held_ + fresh_++] = raw;
    if (__builtin_expect(fresh_ == kBlock, 0)) drain();
  }
  // A word by where it is in `text` (size `size`, lower-cased as it is hashed when `lower`): the ISA's
  // word_tokens kernel hashes the block's words together. One roller takes words or hashes, not both.
  inline void push_word(const uint8_t* text, size_t size, bool lower, size_t start, size_t length) {
    text_ = text;
    size_ = size;
    lower_ = lower;
    starts_[fresh_] = start;
    lengths_[fresh_] = length;
    if (__builtin_expect(++fresh_ == kBlock, 0)) drain();
  }
  // Fewer tokens than n: one shingle of all of them. Every key is in `out` after this.
  void finish() {
    drain();
    if (count_ > 0 && count_ < n_) {
      uint64_t s = 0;
      for (size_t j = 0; j < held_; ++j) s = s * kShingleP + tokens_[j];
      out_->push_back(shingle_key(s));
    }
  }

 private:
  static constexpr size_t kBlock = 256;
  __attribute__((noinline)) void drain() {
    if (fresh_ == 0) return;
    if (text_) words_(text_, size_, lower_, starts_, lengths_, fresh_, tokens_ + held_);
    const size_t total = held_ + fresh_;
    const size_t windows = total >= n_ ? total - n_ + 1 : 0;
    keys_(tokens_, held_, fresh_, n_, powers_, block_);
    out_->insert(out_->end(), block_, block_ + windows);
    count_ += fresh_;
    // keep the last n - 1 tokens (fewer at the start) for the windows of the next block
    const size_t keep = std::min(total, n_ - 1);
    std::memmove(tokens_, tokens_ + total - keep, keep * sizeof(uint64_t));
    held_ = keep;
    fresh_ = 0;
  }
  size_t n_;
  std::vector<uint32_t>* out_;
  ShingleKeysKernel keys_;
  WordTokensKernel words_;
  const uint8_t* text_ = nullptr;
  size_t size_ = 0;
  bool lower_ = false;
  size_t count_ = 0;  // tokens drained so far
  size_t held_ = 0, fresh_ = 0;
  uint64_t powers_[64];
  uint64_t tokens_[64 + kBlock];
  uint32_t block_[kBlock];
  uint64_t starts_[kBlock], lengths_[kBlock];
};

// ---- ASCII tables, derived from the generated ones so both paths agree ---------------------------

struct AsciiTables {
  uint8_t lower[128];
  uint8_t flags[128];
  AsciiTables() {
    for (uint32_t c = 0; c < 128; ++c) {
      lower[c] = static_cast<uint8_t>(c + props(c).lower_delta);
      flags[c] = props(c).flags;
    }
  }
};
const AsciiTables kAscii;

// ---- NFKC ------------------------------------------------------------------------------------------

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp - kSBase < kSCount) {  // Hangul syllable: algorithmic
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const uint32_t* keys = unicode::kDecompKeys;
  const size_t nkeys = sizeof(unicode::kDecompKeys) / sizeof(keys[0]);
  const uint32_t* it = std::lower_bound(keys, keys + nkeys, cp);
  if (it == keys + nkeys || *it != cp) {
    out.push_back(cp);
    return;
  }
  const size_t i = static_cast<size_t>(it - keys);
  for (size_t j = unicode::kDecompIndex[i]; j < unicode::kDecompIndex[i + 1]; ++j)
    out.push_back(unicode::kDecompData[j]);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a - kLBase < kLCount && b - kVBase < kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - kTBase - 1 < kTCount - 1)
    return a + (b - kTBase);
  const uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  const uint64_t* keys = unicode::kCompKeys;
  const size_t nkeys = sizeof(unicode::kCompKeys) / sizeof(keys[0]);
  const uint64_t* it = std::lower_bound(keys, keys + nkeys, key);
  if (it == keys + nkeys || *it != key) return 0;
  return unicode::kCompValues[it - keys];
}

// NFKC of one segment (a stable starter, if any, then code points up to the next stable one) appended
// to `out`: full compatibility decomposition, canonical ordering, canonical composition.
void normalize_segment(const uint32_t* seg, size_t n, std::vector<uint32_t>& tmp,
                       std::vector<uint32_t>& out) {
  tmp.clear();
  for (size_t i = 0; i < n; ++i) decompose(seg[i], tmp);
  // Canonical ordering: stable sort of each run of non-starters by combining class, O(m log m) per
  // run (an insertion sort is quadratic: one text of a million combining marks took minutes).
  for (size_t i = 0; i < tmp.size();) {
    if (props(tmp[i]).ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < tmp.size() && props(tmp[j]).ccc != 0) ++j;
    if (j - i > 1)
      std::stable_sort(tmp.begin() + static_cast<ptrdiff_t>(i), tmp.begin() + static_cast<ptrdiff_t>(j),
                       [](uint32_t x, uint32_t y) { return props(x).ccc < props(y).ccc; });
    i = j;
  }
  // Canonical composition (UAX #15): a character combines with the last starter unless blocked.
  const size_t base = out.size();
  long starter = -1;
  int last_cc = 0;
  for (const uint32_t cp : tmp) {
    const int cc = props(cp).ccc;
    if (starter >= 0) {
      const bool adjacent = out.size() - 1 == static_cast<size_t>(starter);
      const bool blocked = !adjacent && (last_cc == 0 || last_cc >= cc);
      if (!blocked) {
        const uint32_t composed = compose_pair(out[static_cast<size_t>(starter)], cp);
        if (composed) {
          out[static_cast<size_t>(starter)] = composed;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out.size());
    out.push_back(cp);
    last_cc = cc;
  }
  (void)base;
}

template <typename CU>
void decode(const CU* s, size_t n, std::vector<uint32_t>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = s[i];
}

// The 8 code units at p as 8 ASCII bytes (little-endian in *bytes), when all 8 are ASCII: texts
// that are not pure ASCII are mostly ASCII still, and these runs are copied 8 at a time.
inline bool ascii8(const uint8_t* p, uint64_t* bytes) {
  const uint64_t v = load_le64(p);
  *bytes = v;
  return (v & 0x8080808080808080ull) == 0;
}
inline bool ascii8(const uint16_t* p, uint64_t* bytes) {
  const uint64_t a = load_le64(reinterpret_cast<const uint8_t*>(p));
  const uint64_t b = load_le64(reinterpret_cast<const uint8_t*>(p + 4));
  if ((a | b) & 0xFF80FF80FF80FF80ull) return false;
  auto pack4 = [](uint64_t x) {  // 4 units of 16 bits, each < 0x80, to 4 bytes
    x = (x | (x >> 8)) & 0x0000FFFF0000FFFFull;
    return (x | (x >> 16)) & 0xFFFFFFFFull;
  };
  *bytes = pack4(a) | (pack4(b) << 32);
  return true;
}
inline bool ascii8(const uint32_t* p, uint64_t* bytes) {
  uint64_t w[4];
  for (int q = 0; q < 4; ++q) w[q] = load_le64(reinterpret_cast<const uint8_t*>(p + 2 * q));
  if ((w[0] | w[1] | w[2] | w[3]) & 0xFFFFFF80FFFFFF80ull) return false;
  uint64_t out = 0;
  for (int q = 0; q < 4; ++q) out |= ((w[q] | (w[q] >> 24)) & 0xFFFFull) << (16 * q);
  *bytes = out;
  return true;
}

inline void store_le64(uint8_t* o, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  std::memcpy(o, &v, 8);
}

inline bool stable(uint32_t cp) { return cp < 0x80 || (flags_of(cp) & unicode::STABLE); }

// NFKC of the whole text: runs of stable code points are copied; each run of unstable ones is
// normalized with the stable starter before it (which it may combine with).
template <typename CU>
void nfkc(const CU* s, size_t n, std::vector<uint32_t>& tmp, std::vector<uint32_t>& seg,
          std::vector<uint32_t>& out) {
  out.clear();
  out.reserve(n + n / 8 + 16);
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n) {
      uint64_t run;
      if (s[j] < 0x80 && j + 8 <= n && ascii8(s + j, &run)) {
        j += 8;
      } else if (stable(s[j])) {
        ++j;
      } else {
        break;
      }
    }
    out.insert(out.end(), s + i, s + j);
    if (j == n) break;
    seg.clear();
    if (j > 0) {  // the stable starter before the run (every run ends before a stable code point)
      seg.push_back(out.back());
      out.pop_back();
    }
    while (j < n && !stable(s[j])) seg.push_back(s[j++]);
    normalize_segment(seg.data(), seg.size(), tmp, out);
    i = j;
  }
}

// ---- tokenizing ------------------------------------------------------------------------------------

// Word tokenizer over code points with their flags; `sink` gets begin(), add(cp) per code point of the
// word, end(). One definition serves hashing and the debug view.
template <typename Sink>
struct WordTokenizer {
  Sink& sink;
  bool in_word = false;
  bool single = false;  // the current word is one character of a script without spaces
  inline void feed(uint32_t cp, uint8_t f) {
    if (f & unicode::ALNUM) {
      if (in_word && !single && !(f & unicode::NOSPACE)) {
        sink.add(cp);
        return;
      }
      if (in_word) sink.end();
      sink.begin();
      sink.add(cp);
      in_word = true;
      single = (f & unicode::NOSPACE) != 0;
    } else if (in_word && (f & unicode::MARK)) {
      sink.add(cp);
    } else if (in_word) {
      sink.end();
      in_word = false;
    }
  }
  inline void finish() {
    if (in_word) sink.end();
    in_word = false;
  }
};

// Character tokens: every code point, white space runs collapsed to one space and trimmed when asked.
template <typename Sink>
struct CharTokenizer {
  Sink& sink;
  bool collapse;
  bool pending_space = false;
  bool any = false;
  inline void feed(uint32_t cp, uint8_t f) {
    if (collapse && (f & unicode::SPACE)) {
      pending_space = any;
      return;
    }
    if (pending_space) {
      sink.begin();
      sink.add(0x20);
      sink.end();
      pending_space = false;
    }
    sink.begin();
    sink.add(cp);
    sink.end();
    any = true;
  }
  inline void finish() {}
};

inline void append_utf8(uint32_t cp, std::vector<uint8_t>& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<uint8_t>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<uint8_t>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {  // lone surrogates too: encoded as CESU-style 3 bytes, never ambiguous
    out.push_back(static_cast<uint8_t>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<uint8_t>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  }
}

// Collects each token's UTF-8 bytes and hands its hash T to the roller.
struct HashSink {
  ShingleRoller& roller;
  std::vector<uint8_t>& bytes;
  inline void begin() { bytes.clear(); }
  inline void add(uint32_t cp) { append_utf8(cp, bytes); }
  inline void end() { roller.push(token_hash<false>(bytes.data(), bytes.size(), bytes.data() + bytes.size())); }
};

struct TextSink {
  std::u32string& text;
  inline void begin() {
    if (!text.empty()) text.push_back(U' ');
  }
  inline void add(uint32_t cp) { text.push_back(cp); }
  inline void end() {}
};

// ---- words of UTF-8 text, without a branch per byte ----------------------------------------------
//
// Per 64-byte block: W, a bit per byte inside a word, and S, a bit per forced word start (a character
// of a script without spaces, or the first letter after one). Pure ASCII blocks get W from one SIMD
// kernel call; blocks with multi-byte characters are classified code point by code point with the
// same rules as WordTokenizer. Word starts and ends then come from bit arithmetic, one step per word,
// and each word is hashed straight from the buffer.

struct WordState {
  bool in_word = false;
  bool single = false;
};

inline uint32_t decode_utf8(const uint8_t* p, size_t& len) {
  const uint8_t c = p[0];
  if (c < 0x80) {
    len = 1;
    return c;
  }
  if (c < 0xE0) {
    len = 2;
    return (static_cast<uint32_t>(c & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (c < 0xF0) {
    len = 3;
    return (static_cast<uint32_t>(c & 0x0F) << 12) | (static_cast<uint32_t>(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  len = 4;
  return (static_cast<uint32_t>(c & 0x07) << 18) | (static_cast<uint32_t>(p[1] & 0x3F) << 12) |
         (static_cast<uint32_t>(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

// Classifies the code points that start in [from, min(n, base + 64)); returns where the next block's
// first code point starts. Bits of a character running past the block go to `spill` (next block's W).
// `ascii` and `high` are the block's masks from the word-mask kernel: runs of ASCII bytes are classified
// from them a run at a time (an ASCII character is a letter or digit, or it ends a word; it is never a
// mark nor of a space-less script), the other code points one at a time.
inline size_t classify_block(const uint8_t* s, size_t n, size_t base, size_t from, WordState& st,
                             uint64_t ascii, uint64_t high, uint64_t& w, uint64_t& starts, uint64_t& spill) {
  const size_t limit = std::min(n, base + 64);
  size_t pos = from;
  while (pos < limit) {
    if (s[pos] < 0x80) {
      const size_t offset = pos - base;
      const size_t run = std::min<size_t>(limit - pos, high >> offset ? static_cast<size_t>(__builtin_ctzll(high >> offset))
                                                                    : 64 - offset);
      const uint64_t bits = run >= 64 ? ~uint64_t{0} : (uint64_t{1} << run) - 1;
      const uint64_t alnum = (ascii >> offset) & bits;
      uint64_t begin = alnum & ~(alnum << 1) & ~uint64_t{1};  // a letter after a non-letter in the run
      if ((alnum & 1) && (!st.in_word || st.single)) begin |= 1;  // the first, after the state before
      w |= alnum << offset;
      starts |= begin << offset;
      st.in_word = (alnum >> (run - 1)) & 1;
      st.single = false;
      pos += run;
      continue;
    }
    size_t len;
    const uint32_t cp = decode_utf8(s + pos, len);
    const uint8_t f = cp < 0x80 ? kAscii.flags[cp] : flags_of(cp);
    bool word = false;
    if (f & unicode::ALNUM) {
      word = true;
      if (!st.in_word || st.single || (f & unicode::NOSPACE)) {
        starts |= uint64_t{1} << (pos - base);
        st.in_word = true;
        st.single = (f & unicode::NOSPACE) != 0;
      }
    } else if (st.in_word && (f & unicode::MARK)) {
      word = true;
    } else {
      st.in_word = false;
    }
    if (word) {
      const size_t offset = pos - base;
      if (offset + len <= 64) {
        w |= ((uint64_t{1} << len) - 1) << offset;
      } else {
        w |= ~uint64_t{0} << offset;
        spill |= (uint64_t{1} << (offset + len - 64)) - 1;
      }
    }
    pos += len;
  }
  return pos;
}

// kLower: lower-case ASCII bytes while hashing (only for pure ASCII text; UTF-8 arrives lowered).
template <bool kLower>
void word_hashes(const uint8_t* s, size_t n, const Kernels& kernels, size_t shingle_size,
                 std::vector<uint32_t>& out) {
  const AsciiWordMaskKernel word_mask = kernels.ascii_word_mask;
  ShingleRoller tokens(shingle_size, out, kernels);
  const uint8_t* end = s + n;
  size_t open = SIZE_MAX;  // start of a word that runs into the next block
  uint64_t carry = 0;      // was the last byte of the previous block inside a word
  uint64_t spill = 0;
  size_t from = 0;  // where the next code point starts
  WordState st;
  alignas(64) uint8_t last[64];
  for (size_t base = 0; base < n; base += 64) {
    uint64_t high, w, forced = 0;
    if (n - base >= 64) {
      w = word_mask(s + base, &high);
    } else {
      std::memset(last, ' ', sizeof last);
      std::memcpy(last, s + base, n - base);
      w = word_mask(last, &high);
    }
    const uint64_t ascii = w;
    if ((high | spill) == 0) {
      if (st.in_word && st.single && (w & 1)) forced = 1;  // a letter right after a space-less one
      st.in_word = (w >> 63) != 0;
      st.single = false;
      from = base + 64;
    } else {
      w = spill;
      spill = 0;
      from = classify_block(s, n, base, from, st, ascii, high, w, forced, spill);
    }
    const uint64_t shifted = (w << 1) | carry;
    uint64_t starts = (w & ~shifted) | forced;
    uint64_t ends = (~w & shifted) | (forced & shifted);
    carry = w >> 63;
    for (;;) {
      if (open != SIZE_MAX) {
        if (!ends) break;
        const size_t e = base + static_cast<size_t>(__builtin_ctzll(ends));
        ends &= ends - 1;
        tokens.push_word(s, n, kLower, open, e - open);
        open = SIZE_MAX;
      }
      if (!starts) break;
      open = base + static_cast<size_t>(__builtin_ctzll(starts));
      starts &= starts - 1;
    }
  }
  if (open != SIZE_MAX) tokens.push_word(s, n, kLower, open, n - open);
  tokens.finish();
}

inline uint8_t* put_utf8(uint8_t* o, uint32_t cp) {
  if (cp < 0x80) {
    *o++ = static_cast<uint8_t>(cp);
  } else if (cp < 0x800) {
    *o++ = static_cast<uint8_t>(0xC0 | (cp >> 6));
    *o++ = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {  // lone surrogates too, as 3 bytes (like Python's surrogatepass)
    *o++ = static_cast<uint8_t>(0xE0 | (cp >> 12));
    *o++ = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    *o++ = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  } else {
    *o++ = static_cast<uint8_t>(0xF0 | (cp >> 18));
    *o++ = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
    *o++ = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    *o++ = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
  return o;
}

template <typename CU>
bool final_sigma(const CU* in, size_t n, size_t i) {  // CPython's Final_Sigma rule
  long j = static_cast<long>(i) - 1;
  while (j >= 0 && (flags_of(in[static_cast<size_t>(j)]) & unicode::CASE_IGNORABLE)) --j;
  if (j < 0 || !(flags_of(in[static_cast<size_t>(j)]) & unicode::CASED)) return false;
  size_t k = i + 1;
  while (k < n && (flags_of(in[k]) & unicode::CASE_IGNORABLE)) ++k;
  return k == n || !(flags_of(in[k]) & unicode::CASED);
}

// The lower case of a character whose str.lower() is more than one character (U+0130).
template <typename Emit>
void lower_special(uint32_t cp, Emit&& emit) {
  const uint32_t* keys = unicode::kLowerSpecialKeys;
  const size_t nkeys = sizeof(unicode::kLowerSpecialKeys) / sizeof(keys[0]);
  const uint32_t* it = std::lower_bound(keys, keys + nkeys, cp);
  if (it == keys + nkeys || *it != cp) {
    emit(cp);
    return;
  }
  for (const uint32_t v : unicode::kLowerSpecialValues[it - keys])
    if (v) emit(v);
}

// str.lower() as code points (the character-shingle and debug paths).
void lower_in(const std::vector<uint32_t>& in, std::vector<uint32_t>& out) {
  out.clear();
  out.reserve(in.size() + 4);
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t cp = in[i];
    if (cp < 0x80) {
      out.push_back(kAscii.lower[cp]);
      continue;
    }
    const Props& p = props(cp);
    if (!(p.flags & unicode::LOWER_SPECIAL))
      out.push_back(static_cast<uint32_t>(static_cast<int64_t>(cp) + p.lower_delta));
    else if (cp == 0x03A3)
      out.push_back(final_sigma(in.data(), n, i) ? 0x03C2 : 0x03C3);
    else
      lower_special(cp, [&](uint32_t v) { out.push_back(v); });
  }
}

// str.lower() (when asked) and UTF-8 encoding in one pass.
template <typename CU>
void lower_encode(const CU* in, size_t n, bool lowercase, ByteBuffer& out) {
  size_t capacity = 4 * n + 64;
  uint8_t* o = out.reserve(capacity);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t cp = in[i];
    if (cp < 0x80) {
      uint64_t run;
      if (i + 8 <= n && ascii8(in + i, &run)) {
        store_le64(o, lowercase ? ascii_lower8(run) : run);
        o += 8;
        i += 7;
        continue;
      }
      *o++ = lowercase ? kAscii.lower[cp] : static_cast<uint8_t>(cp);
      continue;
    }
    if (!lowercase) {
      o = put_utf8(o, cp);
      continue;
    }
    const Props& p = props(cp);
    if (!(p.flags & unicode::LOWER_SPECIAL)) {
      o = put_utf8(o, static_cast<uint32_t>(static_cast<int64_t>(cp) + p.lower_delta));
    } else if (cp == 0x03A3) {
      o = put_utf8(o, final_sigma(in, n, i) ? 0x03C2 : 0x03C3);
    } else {
      const size_t used = static_cast<size_t>(o - out.data.get());
      if (capacity - used < 4 * (n - i) + 64) {  // an expanding lower case (U+0130): grow, keep bytes
        ByteBuffer grown;
        capacity += 64 + capacity / 2;
        std::memcpy(grown.reserve(capacity), out.data.get(), used);
        out = std::move(grown);
        o = out.data.get() + used;
      }
      lower_special(cp, [&](uint32_t v) { o = put_utf8(o, v); });
    }
  }
  out.size = static_cast<size_t>(o - out.data.get());
}

template <typename CU>
bool needs_nfkc(const CU* s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < 0x80) {
      uint64_t run;
      if (i + 8 <= n && ascii8(s + i, &run)) i += 7;
      continue;
    }
    if (!stable(s[i])) return true;
  }
  return false;
}

// Word tokens of a non-ASCII text: NFKC only if some character needs it, lower + UTF-8, then words.
template <typename CU>
void general_word_hashes(const CU* s, size_t n, const TextOptions& o, const Kernels& kernels,
                         TextScratch& sc, std::vector<uint32_t>& out) {
  if (o.normalize && needs_nfkc(s, n)) {
    nfkc(s, n, sc.tmp, sc.seg, sc.a);
    lower_encode(sc.a.data(), sc.a.size(), o.lowercase, sc.utf8);
  } else {
    lower_encode(s, n, o.lowercase, sc.utf8);
  }
  word_hashes<false>(sc.utf8.data.get(), sc.utf8.size, kernels, static_cast<size_t>(o.size), out);
}

template <typename Tokenizer>
void tokenize_ascii(const uint8_t* s, size_t n, bool lowercase, Tokenizer& tok) {
  if (lowercase) {
    for (size_t i = 0; i < n; ++i) {
      const uint8_t c = kAscii.lower[s[i]];
      tok.feed(c, kAscii.flags[c]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) tok.feed(s[i], kAscii.flags[s[i]]);
  }
  tok.finish();
}

template <typename Tokenizer>
void tokenize_codepoints(const std::vector<uint32_t>& cps, Tokenizer& tok) {
  for (const uint32_t cp : cps) tok.feed(cp, cp < 0x80 ? kAscii.flags[cp] : flags_of(cp));
  tok.finish();
}

// The processed code points (NFKC and lower as asked) of a non-ASCII text.
template <typename CU>
const std::vector<uint32_t>& prepare(const CU* s, size_t n, const TextOptions& o, TextScratch& sc) {
  if (o.normalize)
    nfkc(s, n, sc.tmp, sc.seg, sc.a);
  else
    decode(s, n, sc.a);
  if (!o.lowercase) return sc.a;
  lower_in(sc.a, sc.b);
  return sc.b;
}

template <typename Sink>
void run_tokenizer(const TextView& t, const TextOptions& o, TextScratch& sc, Sink& sink) {
  auto go = [&](auto& tok) {
    if (t.ascii) {
      tokenize_ascii(static_cast<const uint8_t*>(t.data), t.length, o.lowercase, tok);
      return;
    }
    const std::vector<uint32_t>* cps;
    if (t.kind == 1)
      cps = &prepare(static_cast<const uint8_t*>(t.data), t.length, o, sc);
    else if (t.kind == 2)
      cps = &prepare(static_cast<const uint16_t*>(t.data), t.length, o, sc);
    else
      cps = &prepare(static_cast<const uint32_t*>(t.data), t.length, o, sc);
    tokenize_codepoints(*cps, tok);
  };
  if (o.char_shingles) {
    CharTokenizer<Sink> tok{sink, o.collapse_whitespace};
    go(tok);
  } else {
    WordTokenizer<Sink> tok{sink};
    go(tok);
  }
}

}  // namespace

void shingle_hashes(const TextView& text, const TextOptions& options, const Kernels& kernels,
                    TextScratch& scratch, std::vector<uint32_t>& out) {
  out.reserve(out.size() + text.length / 4 + 16);
  const size_t size = static_cast<size_t>(options.size);
  if (!options.char_shingles && text.ascii) {
    const uint8_t* s = static_cast<const uint8_t*>(text.data);
    if (options.lowercase)
      word_hashes<true>(s, text.length, kernels, size, out);
    else
      word_hashes<false>(s, text.length, kernels, size, out);
  } else if (!options.char_shingles) {
    if (text.kind == 1)
      general_word_hashes(static_cast<const uint8_t*>(text.data), text.length, options, kernels, scratch, out);
    else if (text.kind == 2)
      general_word_hashes(static_cast<const uint16_t*>(text.data), text.length, options, kernels, scratch, out);
    else
      general_word_hashes(static_cast<const uint32_t*>(text.data), text.length, options, kernels, scratch, out);
  } else {
    ShingleRoller roller(size, out, kernels);
    HashSink sink{roller, scratch.bytes};
    run_tokenizer(text, options, scratch, sink);
    roller.finish();
  }
}

std::u32string normalized_text(const TextView& text, const TextOptions& options) {
  // The words joined by single spaces (word mode), or the processed characters (char mode).
  std::u32string result;
  TextScratch scratch;
  TextSink sink{result};
  if (options.char_shingles) {
    struct CharSink {
      std::u32string& text;
      void begin() {}
      void add(uint32_t cp) { text.push_back(cp); }
      void end() {}
    } chars{result};
    run_tokenizer(text, options, scratch, chars);
  } else {
    run_tokenizer(text, options, scratch, sink);
  }
  return result;
}

const char* unicode_version() { return unicode::kUnicodeVersion; }

void word_tokens_serial(const uint8_t* text, size_t size, bool lower, const uint64_t* starts,
                        const uint64_t* lengths, size_t count, uint64_t* out) {
  const uint8_t* end = text + size;
  for (size_t i = 0; i < count; ++i)
    out[i] = lower ? token_hash<true>(text + starts[i], lengths[i], end)
                   : token_hash<false>(text + starts[i], lengths[i], end);
}

void shingle_keys_serial(uint64_t* tokens, size_t held, size_t fresh, size_t n, const uint64_t* powers,
                         uint32_t* out) {
  for (size_t j = held; j < held + fresh; ++j) tokens[j] = fmix64(tokens[j]);
  const size_t total = held + fresh;
  if (total < n) return;
  // the first window's sum, then rolled: one multiply-add in, one out per window
  uint64_t s = 0;
  for (size_t j = 0; j < n; ++j) s += tokens[j] * powers[j];
  const uint64_t top = powers[0] * kShingleP;  // P^n
  out[0] = shingle_key(s);
  for (size_t i = 1; i + n <= total; ++i) {
    s = s * kShingleP + tokens[i + n - 1] - tokens[i - 1] * top;
    out[i] = shingle_key(s);
  }
}

void TextScratch::trim(size_t limit) {
  auto drop = [limit](auto& v) {
    if (v.capacity() * sizeof(v[0]) > limit) std::decay_t<decltype(v)>().swap(v);
  };
  drop(a);
  drop(b);
  drop(seg);
  drop(tmp);
  drop(bytes);
  if (utf8.capacity > limit) utf8 = ByteBuffer();
}

}  // namespace neardup
