// The only file that knows Python: argument checks, buffers in and out, the GIL released for the work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
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

py::array_t<uint32_t> signatures(const py::list& texts, int num_perm, bool char_mode, int size,
                                 uint64_t seed, bool normalize, bool lowercase, bool collapse,
                                 int threads, const std::string& isa) {
  if (num_perm < 16 || num_perm > 1024 || num_perm % 8 != 0)
    throw py::value_error("num_perm must be a multiple of 8 from 16 to 1024");
  if (threads < 1) throw py::value_error("threads must be >= 1");
  const TextOptions options = options_of(char_mode, size, normalize, lowercase, collapse);
  const Kernels& kernels = kernels_for(isa);
  // A tuple of the texts holds a reference to each: the views below point into the str objects while
  // the GIL is released, and another thread may empty or change the caller's list meanwhile.
  const py::tuple items(texts);
  const size_t n = items.size();
  const size_t k = static_cast<size_t>(num_perm);
  std::vector<TextView> views(n);
  for (size_t i = 0; i < n; ++i) views[i] = view_of(items[i].ptr());
  py::array_t<uint32_t> out({n, k});
  uint32_t* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    const neardup::HashFamily family = neardup::make_hash_family(num_perm, seed);
    auto work = [&](size_t begin, size_t end) {
      // Per thread and kept between calls: growing buffers for every batch costs page faults.
      // Plain references taken once: code inlined below would otherwise look the thread-local
      // address up again at every use.
      thread_local neardup::TextScratch tls_scratch;
      thread_local std::vector<uint32_t> tls_hashes;
      neardup::TextScratch& scratch = tls_scratch;
      std::vector<uint32_t>& hashes = tls_hashes;
      for (size_t i = begin; i < end; ++i)
        neardup::text_signature(views[i], options, family, kernels, scratch, hashes, dst + i * k);
      constexpr size_t kKeep = size_t{32} << 20;
      scratch.trim(kKeep);
      if (hashes.capacity() * sizeof(uint32_t) > kKeep) std::vector<uint32_t>().swap(hashes);
    };
    const size_t workers = std::min(static_cast<size_t>(threads), std::max<size_t>(n, 1));
    if (workers <= 1) {
      work(0, n);
    } else {
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
  const size_t n = use_rows ? static_cast<size_t>(rows.shape(0)) : total;
  // The row indices are copied before they are checked: the kernel reads them with the GIL released,
  // when another thread could write into the caller's array after the check.
  std::vector<int64_t> row_index;
  if (use_rows) {
    row_index.assign(rows.data(), rows.data() + n);
    for (const int64_t row : row_index)
      if (row < 0 || static_cast<size_t>(row) >= total) throw py::value_error("row index out of range");
  }
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

py::array_t<uint64_t> band_keys(const py::array_t<uint32_t, py::array::c_style>& sigs, int bands, int rows) {
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
    neardup::band_keys(src, n, k, static_cast<size_t>(bands), static_cast<size_t>(rows), dst);
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
  m.def("band_keys", &band_keys, py::arg("signatures"), py::arg("bands"), py::arg("rows"));
  m.def("normalized_text", &normalized_text, py::arg("text"), py::arg("char_mode"), py::arg("normalize"),
        py::arg("lowercase"), py::arg("collapse"));
  register_passages(m);
}
