// Passage fingerprints (docs/design.md, "Passages"): the words of a text with their code point offsets
// in the text *as given* (no NFKC here, so an offset is a Python str index), the hash of every word
// k-gram, and the k-grams sampled from it. Part of the passage format (passage blobs): changing
// anything here changes stored fingerprints (pinned by tests/native/test_passages.py).
//
//   words    maximal runs of alphanumerics (str.isalnum), combining marks continue a word, each
//            alphanumeric of a script written without spaces is a word of its own (as in text.cpp)
//   token    T(w) = fmix64 of a fold of w's code points, each lower-cased by the one-to-one part of
//            str.lower() (the lower_delta of the Unicode tables)
//   k-gram   K_j = fmix64(sum_i T(w_{j+i}) * P^(k-1-i) mod 2^64), words j .. j+k-1
//   nibble   the top 4 bits of each word's T
//   sample   the k-grams j = phase, phase + w, phase + 2w, ... are selected, phase = fmix64(x ^ salt)
//            mod w where x is the XOR of every K_j; a text of m <= phase k-grams selects phase mod m.
//            Every w consecutive k-grams hold a selected one.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "neardup.hpp"
#include "unicode_tables.inc"

namespace py = pybind11;

namespace {

constexpr uint64_t kTokenSeed = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kTokenMul = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kGramMul = 0x100000001B3ULL * 2 + 1;  // odd
constexpr uint64_t kPhaseSalt = 0x6E64706861736531ULL;  // "ndphase1"
// The first byte of every passage blob (fingerprints.BLOB_FORMAT).
constexpr uint8_t kBlobFormat = 3;

inline const neardup::unicode::Props& props(uint32_t cp) {
  namespace u = neardup::unicode;
  if (cp >= 0x110000) cp = 0xFFFF;
  return u::kProps[u::kStage2[(static_cast<uint32_t>(u::kStage1[cp >> u::kBlockShift]) << u::kBlockShift) |
                              (cp & ((1u << u::kBlockShift) - 1))]];
}

struct Words {
  std::vector<uint32_t> starts, ends;
  std::vector<uint64_t> hashes;
};

template <typename CU>
void words_of(const CU* s, size_t n, Words& out) {
  namespace u = neardup::unicode;
  bool in_word = false, single = false;
  uint64_t h = 0;
  auto finish = [&](size_t end) {
    out.ends.push_back(static_cast<uint32_t>(end));
    out.hashes.push_back(neardup::fmix64(h));
    in_word = false;
  };
  for (size_t i = 0; i < n; ++i) {
    const uint32_t cp = static_cast<uint32_t>(s[i]);
    const auto& p = props(cp);
    const uint8_t f = p.flags;
    if (f & u::ALNUM) {
      if (in_word && (single || (f & u::NOSPACE))) finish(i);
      if (!in_word) {
        out.starts.push_back(static_cast<uint32_t>(i));
        h = kTokenSeed;
        in_word = true;
        single = (f & u::NOSPACE) != 0;
      }
    } else if (!(in_word && (f & u::MARK))) {
      if (in_word) finish(i);
      continue;
    }
    const uint32_t lower = static_cast<uint32_t>(static_cast<int64_t>(cp) + p.lower_delta);
    h = (h ^ lower) * kTokenMul;
    h ^= h >> 29;
  }
  if (in_word) finish(n);
}

struct Fingerprints {
  Words words;
  std::vector<uint64_t> grams;
  std::vector<uint32_t> selected;
};

void fingerprint(const py::str& text, int k, int w, Fingerprints& out) {
  if (k < 1 || k > 64 || w < 1 || w > 255) throw py::value_error("need 1 <= k <= 64 and 1 <= w <= 255");
  PyObject* o = text.ptr();
  const Py_ssize_t n = PyUnicode_GET_LENGTH(o);
  if (n >= (Py_ssize_t{1} << 32) - 1) throw py::value_error("text too long for 32-bit offsets");
  Words& words = out.words;
  const void* data = PyUnicode_DATA(o);
  switch (PyUnicode_KIND(o)) {
    case PyUnicode_1BYTE_KIND: words_of(static_cast<const uint8_t*>(data), n, words); break;
    case PyUnicode_2BYTE_KIND: words_of(static_cast<const uint16_t*>(data), n, words); break;
    default: words_of(static_cast<const uint32_t*>(data), n, words); break;
  }
  const size_t nw = words.starts.size();
  const size_t m = nw >= static_cast<size_t>(k) ? nw - k + 1 : 0;
  out.grams.resize(m);
  uint64_t* g = out.grams.data();
  uint64_t top = 1;  // P^(k-1)
  for (int i = 1; i < k; ++i) top *= kGramMul;
  uint64_t roll = 0;
  for (size_t i = 0; i < nw; ++i) {
    if (i >= static_cast<size_t>(k)) roll -= words.hashes[i - k] * top;
    roll = roll * kGramMul + words.hashes[i];
    if (i + 1 >= static_cast<size_t>(k)) g[i + 1 - k] = neardup::fmix64(roll);
  }
  // Sampling: every w-th k-gram from a phase the text's k-grams give (so two copies of one passage in
  // different documents mostly sample different k-grams of it, and a posting fills up only when
  // about w x its cap documents hold the passage). Any w consecutive k-grams hold one sampled k-gram;
  // a text shorter than w k-grams past its phase keeps one.
  if (m == 0) return;
  uint64_t fold = 0;
  for (size_t j = 0; j < m; ++j) fold ^= g[j];
  const size_t win = static_cast<size_t>(w);
  const size_t phase = static_cast<size_t>(neardup::fmix64(fold ^ kPhaseSalt) % win);
  if (phase >= m) {
    out.selected.push_back(static_cast<uint32_t>(phase % m));
    return;
  }
  for (size_t j = phase; j < m; j += win) out.selected.push_back(static_cast<uint32_t>(j));
}

template <typename T>
py::array_t<T> array_of(const std::vector<T>& v) {
  py::array_t<T> a(v.size());
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// (word starts, word ends, k-gram hashes, selected k-gram indices, word nibbles) of a str.
py::tuple passage_features(const py::str& text, int k, int w) {
  Fingerprints f;
  fingerprint(text, k, w, f);
  const size_t nw = f.words.starts.size();
  py::array_t<uint8_t> nibbles(nw);  // the top 4 bits of each word's T: edges are found word by word
  uint8_t* nb = nibbles.mutable_data();
  for (size_t i = 0; i < nw; ++i) nb[i] = static_cast<uint8_t>(f.words.hashes[i] >> 60);
  return py::make_tuple(array_of(f.words.starts), array_of(f.words.ends), array_of(f.grams), array_of(f.selected),
                        nibbles);
}

void put_varint(std::string& out, uint32_t v) {  // unsigned LEB128: 7 bits a byte, low first
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// The passage blob (neardup.domain.fingerprints documents it); b"" below k words:
//   u8 3 | varint words | varint m | m x 4-byte key (the hash's low 32 bits) | m x u8 word step
//   | m x varint start step (code points from the previous selected k-gram's start) | m x varint length
//   | nibbles
py::bytes passage_blob(const py::str& text, int k, int w) {
  Fingerprints f;
  fingerprint(text, k, w, f);
  const auto& sel = f.selected;
  if (sel.empty()) return py::bytes();
  const size_t m = sel.size(), nw = f.words.starts.size();
  std::string out;
  out.reserve(11 + 10 * m + (nw + 1) / 2);
  out.push_back(static_cast<char>(kBlobFormat));
  put_varint(out, static_cast<uint32_t>(nw));
  put_varint(out, static_cast<uint32_t>(m));
  for (uint32_t j : sel)
    for (size_t i = 0; i < 4; ++i) out.push_back(static_cast<char>((f.grams[j] >> (8 * i)) & 0xFF));
  uint32_t previous = 0;
  for (uint32_t j : sel) {
    out.push_back(static_cast<char>(j - previous));  // sampling keeps steps <= w <= 255
    previous = j;
  }
  uint32_t previous_start = 0;
  for (uint32_t j : sel) {
    const uint32_t start = f.words.starts[j];
    put_varint(out, start - previous_start);  // selected k-grams are in text order
    previous_start = start;
  }
  for (uint32_t j : sel) put_varint(out, f.words.ends[j + k - 1] - f.words.starts[j]);
  for (size_t i = 0; i < nw; i += 2) {
    const uint8_t lo = static_cast<uint8_t>(f.words.hashes[i] >> 60);
    const uint8_t hi = i + 1 < nw ? static_cast<uint8_t>(f.words.hashes[i + 1] >> 60) : 0;
    out.push_back(static_cast<char>(lo | (hi << 4)));
  }
  return py::bytes(out);
}

// A blob's positions: from byte `at`, m varint start steps then m varint lengths. Returns
// (starts, lengths) as int64 arrays (the steps summed) and the offset past them.
py::tuple passage_positions(const py::bytes& blob, size_t m, size_t at) {
  std::string_view b = blob;
  py::array_t<int64_t> starts(m), lengths(m);
  int64_t* out[2] = {starts.mutable_data(), lengths.mutable_data()};
  for (int part = 0; part < 2; ++part) {
    int64_t total = 0;
    for (size_t e = 0; e < m; ++e) {
      uint64_t v = 0;
      for (int shift = 0;; shift += 7) {
        if (at >= b.size() || shift > 35) throw py::value_error("truncated passage blob");
        const uint8_t byte = static_cast<uint8_t>(b[at++]);
        v |= static_cast<uint64_t>(byte & 0x7F) << shift;
        if (byte < 0x80) break;
      }
      total = part == 0 ? total + static_cast<int64_t>(v) : static_cast<int64_t>(v);
      out[part][e] = total;
    }
  }
  return py::make_tuple(starts, lengths, at);
}

}  // namespace

void register_passages(py::module_& m) {
  m.def("passage_blob", &passage_blob, py::arg("text"), py::arg("k"), py::arg("w"),
        "the passage blob of a str; b'' below k words");
  m.def("passage_positions", &passage_positions, py::arg("blob"), py::arg("m"), py::arg("at"),
        "a blob's varint start steps and lengths from byte `at`: (starts, lengths, offset past them)");
  m.def("passage_features", &passage_features, py::arg("text"), py::arg("k"), py::arg("w"),
        "(word starts, word ends, k-gram hashes, sampled k-gram indices, word nibbles) of a str; offsets in code points");
}
