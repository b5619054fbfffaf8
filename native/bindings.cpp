// The only file that knows Python: argument checks, buffers in and out, the GIL released for the work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "neardup.hpp"

namespace py = pybind11;
using neardup::Kernels;
using neardup::TextOptions;
using neardup::TextView;

namespace {

const Kernels& kernels_for(const std::string& isa) {
  if (isa.empty()) return neardup::active_kernels();
  const Kernels* k = neardup::find_kernels(isa);
  if (!k) throw py::value_error("isa '" + isa + "' is not available on this CPU");
  return *k;
}

TextView view_of(PyObject* o) {
  if (!PyUnicode_Check(o)) throw py::type_error("expected str");
#if PY_VERSION_HEX < 0x030C0000
  if (PyUnicode_READY(o) != 0) throw py::error_already_set();
#endif
  TextView v;
  v.data = PyUnicode_DATA(o);
  v.length = static_cast<size_t>(PyUnicode_GET_LENGTH(o));
  v.kind = static_cast<int>(PyUnicode_KIND(o));
  v.ascii = PyUnicode_IS_ASCII(o) != 0;
  return v;
}

TextOptions options_of(bool char_mode, int size, bool normalize, bool lowercase, bool collapse) {
  if (size < 1 || size > 64) throw py::value_error("size must be from 1 to 64");
  TextOptions o;
  o.char_shingles = char_mode;
  o.size = size;
  o.normalize = normalize;
  o.lowercase = lowercase;
  o.collapse_whitespace = collapse;
  return o;
}

// Runs fn(i, scratch, hashes) for every document i < n, over `threads` threads, the GIL released by the
// caller. Per thread, buffers are kept between calls: growing them for every batch costs page faults.
template <typename Fn>
void for_each_document(size_t n, int threads, Fn&& fn) {
  auto work = [&](size_t begin, size_t end) {
    // Plain references taken once: code inlined below would otherwise look the thread-local
    // address up again at every use.
    thread_local neardup::TextScratch tls_scratch;
    thread_local std::vector<uint32_t> tls_hashes;
    neardup::TextScratch& scratch = tls_scratch;
    std::vector<uint32_t>& hashes = tls_hashes;
    for (size_t i = begin; i < end; ++i) fn(i, scratch, hashes);
    constexpr size_t kKeep = size_t{32} << 20;
    scratch.trim(kKeep);
    if (hashes.capacity() * sizeof(uint32_t) > kKeep) std::vector<uint32_t>().swap(hashes);
  };
  const size_t workers = std::min(static_cast<size_t>(threads), std::max<size_t>(n, 1));
  if (workers <= 1) {
    work(0, n);
    return;
  }
  // Interleaved blocks of documents, so one long text does not leave the other threads idle.
  // An exception must not escape a std::thread (that is std::terminate): the first one is kept,
  // the other workers stop taking blocks, and it is rethrown once every thread has joined.
  std::vector<std::thread> pool;
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  constexpr size_t kBlock = 8;
  auto worker = [&]() noexcept {
    try {
      for (;;) {
        const size_t begin = next.fetch_add(kBlock);
        if (begin >= n) return;
        work(begin, std::min(n, begin + kBlock));
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next.store(n);
    }
  };
  pool.reserve(workers - 1);
  for (size_t t = 1; t < workers; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no more threads to be had (limits, memory): the ones running finish the batch
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

void check_sketch_args(int num_perm, int threads) {
  if (num_perm < 16 || num_perm > 1024 || num_perm % 8 != 0)
    throw py::value_error("num_perm must be a multiple of 8 from 16 to 1024");
  if (threads < 1) throw py::value_error("threads must be >= 1");
}

// A tuple of the texts holds a reference to each: the views point into the str objects while the GIL
// is released, and another thread may empty or change the caller's list meanwhile.
void check_bins(int bins) {
  if (bins < 64 || bins > 4096 || bins % 64 != 0) throw py::value_error("bins must be a multiple of 64 from 64 to 4096");
}

std::vector<TextView> views_of(const py::tuple& items) {
  std::vector<TextView> views(items.size());
  for (size_t i = 0; i < items.size(); ++i) views[i] = view_of(items[i].ptr());
  return views;
}

py::array_t<uint32_t> signatures(const py::list& texts, int num_perm, bool char_mode, int size,
                                 uint64_t seed, bool normalize, bool lowercase, bool collapse,
                                 int threads, const std::string& isa) {
  check_sketch_args(num_perm, threads);
  const TextOptions options = options_of(char_mode, size, normalize, lowercase, collapse);
  const Kernels& kernels = kernels_for(isa);
  const py::tuple items(texts);
  const size_t n = items.size();
  const size_t k = static_cast<size_t>(num_perm);
  const std::vector<TextView> views = views_of(items);
  py::array_t<uint32_t> out({n, k});
  uint32_t* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    const neardup::HashFamily family = neardup::make_hash_family(num_perm, seed);
    for_each_document(n, threads, [&](size_t i, neardup::TextScratch& scratch, std::vector<uint32_t>& hashes) {
      neardup::text_signature(views[i], options, family, kernels, scratch, hashes, dst + i * k);
    });
  }
  return out;
}

// The estimate sketch: each text's MinHash signature (for the band keys) and `stride` bytes of bins (for
// verification) that `write_bins(hashes, value, out)` draws from the same shingle hashes, from
// one tokenization.
template <typename WriteBins>
py::tuple signatures_and_bins(const py::list& texts, int num_perm, const TextOptions& options, uint64_t seed,
                              int threads, const Kernels& kernels, size_t stride, WriteBins write_bins) {
  const py::tuple items(texts);
  const size_t n = items.size();
  const size_t k = static_cast<size_t>(num_perm);
  const std::vector<TextView> views = views_of(items);
  py::array_t<uint32_t> sigs({n, k});
  py::array_t<uint8_t> packed({n, stride});
  uint32_t* sig_dst = sigs.mutable_data();
  uint8_t* bin_dst = packed.mutable_data();
  {
    py::gil_scoped_release release;
    const neardup::HashFamily family = neardup::make_hash_family(num_perm, seed);
    for_each_document(n, threads, [&](size_t i, neardup::TextScratch& scratch, std::vector<uint32_t>& hashes) {
      thread_local std::vector<uint32_t> value;
      neardup::text_signature(views[i], options, family, kernels, scratch, hashes, sig_dst + i * k);
      write_bins(hashes, value, bin_dst + i * stride);
    });
  }
  return py::make_tuple(sigs, packed);
}

// The estimate sketch: the adaptive one-permutation bins (a mode byte, then two 2-bit planes or, for a
// short document, a bitmap and every shingle's code).
py::tuple sketch_adaptive(const py::list& texts, int num_perm, bool char_mode, int size, uint64_t seed,
                          bool normalize, bool lowercase, bool collapse, int threads,
                          const std::string& isa, int bins) {
  check_sketch_args(num_perm, threads);
  check_bins(bins);
  const Kernels& kernels = kernels_for(isa);
  const neardup::OphFamily oph = neardup::make_oph_family(static_cast<size_t>(bins), seed);
  return signatures_and_bins(
      texts, num_perm, options_of(char_mode, size, normalize, lowercase, collapse), seed, threads, kernels,
      neardup::adaptive_bytes(oph.bins),
      [&](const std::vector<uint32_t>& hashes, std::vector<uint32_t>& value, uint8_t* out) {
        neardup::adaptive_bins(hashes.data(), hashes.size(), oph, kernels, value, out);
      });
}

// The exact sketch: the MinHash signature and the sorted distinct shingle hashes of each text
// (concatenated; offsets[i]..offsets[i+1] are text i's).
py::tuple sketch_exact(const py::list& texts, int num_perm, bool char_mode, int size, uint64_t seed,
                       bool normalize, bool lowercase, bool collapse, int threads, const std::string& isa) {
  check_sketch_args(num_perm, threads);
  const TextOptions options = options_of(char_mode, size, normalize, lowercase, collapse);
  const Kernels& kernels = kernels_for(isa);
  const py::tuple items(texts);
  const size_t n = items.size();
  const size_t k = static_cast<size_t>(num_perm);
  const std::vector<TextView> views = views_of(items);
  py::array_t<uint32_t> sigs({n, k});
  uint32_t* sig_dst = sigs.mutable_data();
  std::vector<std::vector<uint32_t>> sets(n);
  {
    py::gil_scoped_release release;
    const neardup::HashFamily family = neardup::make_hash_family(num_perm, seed);
    for_each_document(n, threads, [&](size_t i, neardup::TextScratch& scratch, std::vector<uint32_t>& hashes) {
      neardup::text_signature(views[i], options, family, kernels, scratch, hashes, sig_dst + i * k);
      neardup::sorted_set(hashes);
      sets[i].assign(hashes.begin(), hashes.end());
    });
  }
  py::array_t<int64_t> offsets(n + 1);
  int64_t* off = offsets.mutable_data();
  off[0] = 0;
  for (size_t i = 0; i < n; ++i) off[i + 1] = off[i] + static_cast<int64_t>(sets[i].size());
  py::array_t<uint32_t> flat(static_cast<size_t>(off[n]));
  uint32_t* f = flat.mutable_data();
  for (size_t i = 0; i < n; ++i) std::copy(sets[i].begin(), sets[i].end(), f + off[i]);
  return py::make_tuple(sigs, flat, offsets);
}

std::vector<int64_t> checked_rows(const py::array_t<int64_t, py::array::c_style>& rows, bool use_rows, size_t total) {
  // The row indices are copied before they are checked: the kernel reads them with the GIL released,
  // when another thread could write into the caller's array after the check.
  std::vector<int64_t> row_index;
  if (use_rows) {
    row_index.assign(rows.data(), rows.data() + rows.shape(0));
    for (const int64_t row : row_index)
      if (row < 0 || static_cast<size_t>(row) >= total) throw py::value_error("row index out of range");
  }
  return row_index;
}

// One query sketch against rows of a candidate matrix, `stride` bytes each (`size` names that size in the
// messages): the shapes and rows checked, then `score(query, candidates, rows or null, n, out)` run with
// the GIL released.
template <typename Score>
py::array_t<float> score_rows(const py::array_t<uint8_t, py::array::c_style>& query,
                              const py::array_t<uint8_t, py::array::c_style>& candidates,
                              const py::array_t<int64_t, py::array::c_style>& rows, bool use_rows, size_t stride,
                              const std::string& size, Score&& score) {
  if (query.ndim() != 1 || static_cast<size_t>(query.shape(0)) != stride)
    throw py::value_error("query must be 1-D of " + size + " bytes");
  if (candidates.ndim() != 2 || static_cast<size_t>(candidates.shape(1)) != stride)
    throw py::value_error("candidates must be 2-D (n, " + size + ")");
  const size_t total = static_cast<size_t>(candidates.shape(0));
  const std::vector<int64_t> row_index = checked_rows(rows, use_rows, total);
  const size_t n = use_rows ? row_index.size() : total;
  py::array_t<float> out(n);
  float* dst = out.mutable_data();
  const uint8_t* q = query.data();
  const uint8_t* c = candidates.data();
  const int64_t* r = use_rows ? row_index.data() : nullptr;
  {
    py::gil_scoped_release release;
    score(q, c, r, n, dst);
  }
  return out;
}

py::array_t<float> adaptive_similarity(const py::array_t<uint8_t, py::array::c_style>& query,
                                       const py::array_t<uint8_t, py::array::c_style>& candidates,
                                       const py::array_t<int64_t, py::array::c_style>& rows, bool use_rows,
                                       int bins, const std::string& isa) {
  check_bins(bins);
  const neardup::AdaptiveSimilarityKernel kernel = kernels_for(isa).adaptive_similarity;
  return score_rows(query, candidates, rows, use_rows, neardup::adaptive_bytes(static_cast<size_t>(bins)),
                    "1 + bins/4", [&](const uint8_t* q, const uint8_t* c, const int64_t* r, size_t n, float* dst) {
                      kernel(q, c, static_cast<size_t>(bins), r, n, dst);
                    });
}

// Exact Jaccard of the sorted set `query` with sets[rows[j]] (flat + offsets) where it is >= floor;
// 0.0 where it is not (the merge stops as soon as the floor is out of reach).
py::array_t<float> exact_similarity(const py::array_t<uint32_t, py::array::c_style>& query,
                                    const py::array_t<uint32_t, py::array::c_style>& flat,
                                    const py::array_t<int64_t, py::array::c_style>& offsets,
                                    const py::array_t<int64_t, py::array::c_style>& rows, bool use_rows,
                                    double floor, const std::string& isa) {
  if (query.ndim() != 1 || flat.ndim() != 1 || offsets.ndim() != 1 || offsets.shape(0) < 1)
    throw py::value_error("query, flat and offsets must be 1-D (offsets: n + 1 entries)");
  if (!(floor >= 0.0 && floor <= 1.0)) throw py::value_error("floor must be from 0 to 1");
  const size_t total = static_cast<size_t>(offsets.shape(0) - 1);
  const int64_t* off = offsets.data();
  if (off[0] != 0 || off[total] != flat.shape(0)) throw py::value_error("offsets must run from 0 to len(flat)");
  const std::vector<int64_t> row_index = checked_rows(rows, use_rows, total);
  const size_t n = use_rows ? row_index.size() : total;
  // Only the sets that are read are checked: a check of every offset made each call cost as much as
  // the whole pool (one call per query document against a corpus of 25,000 sets: most of the time).
  // The offsets are copied with the row indices, for the same reason (the GIL is released below).
  std::vector<int64_t> bounds(2 * n);
  for (size_t j = 0; j < n; ++j) {
    const size_t row = use_rows ? static_cast<size_t>(row_index[j]) : j;
    bounds[2 * j] = off[row];
    bounds[2 * j + 1] = off[row + 1];
    if (off[row] < 0 || off[row + 1] < off[row] || off[row + 1] > flat.shape(0))
      throw py::value_error("offsets must not decrease, and stay within flat");
  }
  py::array_t<float> out(n);
  float* dst = out.mutable_data();
  const uint32_t* q = query.data();
  const size_t nq = static_cast<size_t>(query.shape(0));
  const uint32_t* f = flat.data();
  const neardup::IntersectKernel intersect = kernels_for(isa).intersect;
  {
    py::gil_scoped_release release;
    for (size_t j = 0; j < n; ++j) {
      const uint32_t* c = f + bounds[2 * j];
      const size_t nc = static_cast<size_t>(bounds[2 * j + 1] - bounds[2 * j]);
      if (j + 1 < n) {  // the next set's first lines, while this one is merged (random rows of a big pool)
        const char* next = reinterpret_cast<const char*>(f + bounds[2 * j + 2]);
        const size_t lines = std::min<size_t>(16, static_cast<size_t>(bounds[2 * j + 3] - bounds[2 * j + 2]) / 16 + 1);
        for (size_t l = 0; l < lines; ++l) __builtin_prefetch(next + 64 * l);
      }
      if (nq == 0 || nc == 0) {
        dst[j] = 0.0f;
        continue;
      }
      // J >= floor  <=>  |A n B| >= floor (|A| + |B|) / (1 + floor)
      const double bound = floor * static_cast<double>(nq + nc) / (1.0 + floor);
      const size_t need = static_cast<size_t>(std::ceil(bound - 1e-9));
      const size_t inter = intersect(q, nq, c, nc, need);
      dst[j] = inter < need ? 0.0f
                            : static_cast<float>(static_cast<double>(inter) / static_cast<double>(nq + nc - inter));
    }
  }
  return out;
}

py::array_t<float> similarity(const py::array_t<uint32_t, py::array::c_style>& query,
                              const py::array_t<uint32_t, py::array::c_style>& candidates,
                              const py::array_t<int64_t, py::array::c_style>& rows, bool use_rows,
                              const std::string& isa) {
  if (query.ndim() != 1) throw py::value_error("query must be 1-D");
  if (candidates.ndim() != 2) throw py::value_error("candidates must be 2-D (n, num_perm)");
  const size_t k = static_cast<size_t>(query.shape(0));
  if (static_cast<size_t>(candidates.shape(1)) != k)
    throw py::value_error("candidates and query have different numbers of slots");
  const size_t total = static_cast<size_t>(candidates.shape(0));
  const std::vector<int64_t> row_index = checked_rows(rows, use_rows, total);
  const size_t n = use_rows ? row_index.size() : total;
  const int64_t* r = use_rows ? row_index.data() : nullptr;
  const Kernels& kernels = kernels_for(isa);
  py::array_t<float> out(n);
  float* dst = out.mutable_data();
  const uint32_t* q = query.data();
  const uint32_t* c = candidates.data();
  {
    py::gil_scoped_release release;
    kernels.similarity(q, c, k, r, n, dst);
  }
  return out;
}

py::array_t<uint64_t> band_keys(const py::array_t<uint32_t, py::array::c_style>& sigs, int bands, int rows,
                                uint64_t salt) {
  if (sigs.ndim() != 2) throw py::value_error("signatures must be 2-D (n, num_perm)");
  const size_t n = static_cast<size_t>(sigs.shape(0));
  const size_t k = static_cast<size_t>(sigs.shape(1));
  if (bands < 1 || rows < 1 || static_cast<size_t>(bands) * static_cast<size_t>(rows) > k)
    throw py::value_error("bands*rows must be between 1 and num_perm");
  py::array_t<uint64_t> out({n, static_cast<size_t>(bands)});
  uint64_t* dst = out.mutable_data();
  const uint32_t* src = sigs.data();
  {
    py::gil_scoped_release release;
    neardup::band_keys(src, n, k, static_cast<size_t>(bands), static_cast<size_t>(rows), dst, salt);
  }
  return out;
}

py::str normalized_text(const py::str& text, bool char_mode, bool normalize, bool lowercase, bool collapse) {
  const TextOptions options = options_of(char_mode, 1, normalize, lowercase, collapse);
  const std::u32string out = neardup::normalized_text(view_of(text.ptr()), options);
  // Built from code points directly: lone surrogates pass through, as they came in.
  PyObject* result = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out.data(), static_cast<Py_ssize_t>(out.size()));
  if (!result) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(result);
}

}  // namespace

void register_passages(py::module_& m);  // native/passages.cpp
void register_alignment(py::module_& m);  // native/alignment.cpp

PYBIND11_MODULE(_native, m) {
  m.doc() = "neardup sketch core (use neardup.sketch, not this module)";
  neardup::active_kernels();  // resolve the dispatch table now: a bad NEARDUP_FORCE_ISA fails the import
  m.attr("UNICODE_VERSION") = neardup::unicode_version();
  m.def("active_isa", [] { return std::string(neardup::active_kernels().name); });
  m.def("available_isas", [] {
    std::vector<std::string> names;
    for (const Kernels* k : neardup::available_kernels()) names.emplace_back(k->name);
    return names;
  });
  m.def("signatures", &signatures, py::arg("texts"), py::arg("num_perm"), py::arg("char_mode"),
        py::arg("size"), py::arg("seed"), py::arg("normalize"), py::arg("lowercase"), py::arg("collapse"),
        py::arg("threads"), py::arg("isa"));
  m.def("similarity", &similarity, py::arg("query"), py::arg("candidates"), py::arg("rows"),
        py::arg("use_rows"), py::arg("isa"));
  m.def("band_keys", &band_keys, py::arg("signatures"), py::arg("bands"), py::arg("rows"), py::arg("salt"));
  m.def("sketch_exact", &sketch_exact, py::arg("texts"), py::arg("num_perm"), py::arg("char_mode"),
        py::arg("size"), py::arg("seed"), py::arg("normalize"), py::arg("lowercase"), py::arg("collapse"),
        py::arg("threads"), py::arg("isa"));
  m.def("sketch_adaptive", &sketch_adaptive, py::arg("texts"), py::arg("num_perm"), py::arg("char_mode"),
        py::arg("size"), py::arg("seed"), py::arg("normalize"), py::arg("lowercase"), py::arg("collapse"),
        py::arg("threads"), py::arg("isa"), py::arg("bins"));
  m.def("adaptive_similarity", &adaptive_similarity, py::arg("query"), py::arg("candidates"), py::arg("rows"),
        py::arg("use_rows"), py::arg("bins"), py::arg("isa"));
  m.def("exact_similarity", &exact_similarity, py::arg("query"), py::arg("flat"), py::arg("offsets"),
        py::arg("rows"), py::arg("use_rows"), py::arg("floor"), py::arg("isa"));
  m.def("normalized_text", &normalized_text, py::arg("text"), py::arg("char_mode"), py::arg("normalize"),
        py::arg("lowercase"), py::arg("collapse"));
  register_passages(m);
  register_alignment(m);
}
