// The inner loops of passage alignment (neardup.domain.alignment says what they do and why; the
// constants come from there): the word-by-word walk along two texts' word nibbles, and the chaining of
// a text's hits on one stored document's selected k-grams into passages. Not a stored format: it
// changes answers, not bytes, and tests/domain/test_alignment*.py pin what it answers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <vector>

namespace py = pybind11;

namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using U64s = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using I64s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

struct Nibbles {
  const uint8_t* p;
  int64_t n;
};

struct Walked {
  int64_t agree, best, differ;
};

// From word q of the text and s of the source, in direction `step`, at most `limit` words (0: no limit),
// following a word inserted or dropped (this word and the next agree one word off); stop after `stop`
// differing words in a row (0: never).
Walked walk(Nibbles qn, Nibbles sn, int64_t q, int64_t s, int64_t step, int64_t limit, int64_t stop) {
  int64_t agree = 0, best = 0, misses = 0, run = 0, i = 0, shift = 0, agreed_at_best = 0;
  bool contiguous = true;
  while (!limit || i < limit) {
    ++i;
    const int64_t qi = q + step * i;
    int64_t si = s + step * (i + shift);
    if (qi < 0 || qi >= qn.n || si < 0 || si >= sn.n) break;
    if (qn.p[qi] != sn.p[si] && qi + step >= 0 && qi + step < qn.n) {
      for (int64_t d : {int64_t{1}, int64_t{-1}}) {
        const int64_t sj = si + step * d;
        if (sj >= 0 && sj < sn.n && sj + step >= 0 && sj + step < sn.n && qn.p[qi] == sn.p[sj] &&
            qn.p[qi + step] == sn.p[sj + step]) {
          shift += d;
          si = sj;
          break;
        }
      }
    }
    if (qn.p[qi] == sn.p[si]) {
      ++agree;
      misses = 0;
      ++run;
      if (contiguous || run >= 2) {
        best = i;
        agreed_at_best = agree;
      }
    } else {
      ++misses;
      run = 0;
      contiguous = false;
      if (stop && misses >= stop) break;
    }
  }
  return {agree, best, best - agreed_at_best};
}

Nibbles nibbles_of(const Bytes& a) { return {a.data(), static_cast<int64_t>(a.size())}; }

struct Chain {
  int64_t q0, s0, e0, q1, s1, e1, hits;
};

constexpr py::ssize_t kColumns = 11;

struct Hit {
  int64_t q, s, e;
  bool operator<(const Hit& o) const { return std::tie(q, s, e) < std::tie(o.q, o.s, o.e); }
};

struct Params {
  int64_t k, gap, drift, tries, max_active;
  double agreement;
  int64_t stop, min_words, single_hit_differing;
};

// The text's hits on the source's selected k-grams chained: the chains closed, in the order they closed,
// then those still open, oldest last hit first.
//   qkeys/qpos  the text's keys sorted, with the word of each occurrence kept (at most MAX_REPEATS a
//               key, in text order within one key)
//   skeys/sword the source's selected k-grams' keys and first words
std::vector<Chain> chain_hits(const uint64_t* qk, const int64_t* qp, size_t nq, const uint64_t* sk,
                              const int64_t* sw, size_t m, Nibbles qn, Nibbles sn, const Params& p) {
  std::vector<Hit> hits;
  for (size_t e = 0; e < m; ++e) {
    const auto [lo, hi] = std::equal_range(qk, qk + nq, sk[e]);
    for (auto it = lo; it != hi; ++it) hits.push_back({qp[it - qk], sw[e], static_cast<int64_t>(e)});
  }
  std::sort(hits.begin(), hits.end());
  std::vector<Chain> chains;
  std::vector<size_t> done, active;  // indices into chains; active sorted by q1, ties in arrival order
  std::vector<std::pair<int64_t, size_t>> reachable;
  for (const Hit& h : hits) {
    if (!active.empty() && h.q - chains[active.front()].q1 > p.gap) {
      size_t kept = 0;
      for (size_t c : active) {
        if (h.q - chains[c].q1 > p.gap)
          done.push_back(c);
        else
          active[kept++] = c;
      }
      active.resize(kept);
    }
    reachable.clear();
    for (size_t j = 0; j < active.size(); ++j) {
      const Chain& c = chains[active[j]];
      const int64_t dq = h.q - c.q1, ds = h.s - c.s1;
      if (dq > 0 && ds > 0 && ds <= p.gap && std::llabs(dq - ds) <= p.drift)
        reachable.emplace_back(dq + std::llabs(dq - ds), j);
    }
    std::sort(reachable.begin(), reachable.end());  // the nearest first: at most `tries` walked
    size_t best = SIZE_MAX;
    for (size_t t = 0; t < reachable.size() && static_cast<int64_t>(t) < p.tries; ++t) {
      const Chain& c = chains[active[reachable[t].second]];
      const int64_t words = h.q - (c.q1 + p.k);
      if (words <= 0 || static_cast<double>(walk(qn, sn, c.q1 + p.k - 1, c.s1 + p.k - 1, 1, words, 0).agree) >=
                            p.agreement * static_cast<double>(words)) {
        best = reachable[t].second;
        break;
      }
    }
    if (best == SIZE_MAX) {
      chains.push_back({h.q, h.s, h.e, h.q, h.s, h.e, 1});
      active.push_back(chains.size() - 1);
      if (static_cast<int64_t>(active.size()) > p.max_active) {
        done.push_back(active.front());
        active.erase(active.begin());
      }
    } else {
      const size_t c = active[best];
      chains[c].q1 = h.q;
      chains[c].s1 = h.s;
      chains[c].e1 = h.e;
      chains[c].hits += 1;
      // Its last hit moved to q, past every other chain's but those whose last hit is q too: it goes
      // before them (where a stable sort by last hit puts it).
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(best));
      size_t at = active.size();
      while (at > 0 && chains[active[at - 1]].q1 == h.q) --at;
      active.insert(active.begin() + static_cast<std::ptrdiff_t>(at), c);
    }
  }
  done.insert(done.end(), active.begin(), active.end());
  std::vector<Chain> out;
  out.reserve(done.size());
  for (size_t c : done) out.push_back(chains[c]);
  return out;
}

struct Span {
  int64_t first, last;  // words of the text
  bool overlaps(const Span& o) const { return first <= o.last && o.first <= last; }
};

// The passages kept, as rows (q0, s0, e0, q1, s1, e1, hits, then the walks past its ends: words back
// from the first hit and differing words among them, words ahead of the last hit's k-gram and differing
// words among them), in text order. Chains are taken most hits first (then the earliest first hit, then
// the order they closed); a chain is kept when its walks (each stopping after `stop` differing words in
// a row) extend it to at least `min_words` words, it rests on more than one hit or its walks differ in
// at most `single_hit_differing` words, and it overlaps no chain kept before it. A chain whose hits overlap a
// kept one is not walked: extended, it would overlap too. Then kept chains one right after the other in
// both texts are joined (below).
py::array_t<int64_t> passage_align(const U64s& qkeys, const I64s& qpos, const U64s& skeys, const I64s& sword,
                                   const Bytes& qn_, const Bytes& sn_, const Params& p) {
  const size_t nq = static_cast<size_t>(qkeys.size()), m = static_cast<size_t>(skeys.size());
  if (static_cast<size_t>(qpos.size()) != nq) throw py::value_error("qkeys and qpos differ in length");
  if (static_cast<size_t>(sword.size()) != m) throw py::value_error("skeys and sword differ in length");
  const Nibbles qn = nibbles_of(qn_), sn = nibbles_of(sn_);
  struct Kept {
    Chain c;
    Walked back, ahead;
    Span span;
  };
  std::vector<Kept> kept;
  {
    py::gil_scoped_release released;
    std::vector<Chain> chains =
        chain_hits(qkeys.data(), qpos.data(), nq, skeys.data(), sword.data(), m, qn, sn, p);
    std::vector<size_t> order(chains.size());
    for (size_t i = 0; i < chains.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::make_pair(-chains[a].hits, chains[a].q0) < std::make_pair(-chains[b].hits, chains[b].q0);
    });
    const auto overlapping = [&](const Span& s) {
      return std::any_of(kept.begin(), kept.end(), [&](const Kept& k) { return k.span.overlaps(s); });
    };
    for (size_t i : order) {
      const Chain& c = chains[i];
      const int64_t last = c.q1 + p.k - 1;
      if (overlapping({c.q0, last})) continue;
      const Walked back = walk(qn, sn, c.q0, c.s0, -1, 0, p.stop);
      const Walked ahead = walk(qn, sn, last, c.s1 + p.k - 1, 1, 0, p.stop);
      const Span span{c.q0 - back.best, last + ahead.best};
      if (span.last - span.first + 1 < p.min_words) continue;
      if (c.hits == 1 && back.differ + ahead.differ > p.single_hit_differing) continue;
      if (overlapping(span)) continue;
      kept.push_back({c, back, ahead, span});
    }
    std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) { return a.span.first < b.span.first; });
    // One span per passage: a passage whose chain broke (an edit the walks and the chaining did not get
    // past) is two kept spans, one after the other in both texts; they are joined where the words
    // between them are at most `gap` in each text and differ in number by at most `drift`.
    size_t joined = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      if (joined > 0) {
        Kept& a = kept[joined - 1];
        const Kept& b = kept[i];
        const int64_t text_gap = b.span.first - a.span.last - 1;
        const int64_t source_gap = (b.c.s0 - b.back.best) - (a.c.s1 + p.k - 1 + a.ahead.best) - 1;
        if (source_gap >= 0 && text_gap <= p.gap && source_gap <= p.gap &&
            std::llabs(text_gap - source_gap) <= p.drift) {
          a.c.q1 = b.c.q1;
          a.c.s1 = b.c.s1;
          a.c.e1 = b.c.e1;
          a.c.hits += b.c.hits;
          a.ahead = b.ahead;
          a.span.last = b.span.last;
          continue;
        }
      }
      kept[joined++] = kept[i];
    }
    kept.resize(joined);
  }
  py::array_t<int64_t> out({static_cast<py::ssize_t>(kept.size()), kColumns});
  int64_t* o = out.mutable_data();
  for (const Kept& k : kept) {
    const Chain& x = k.c;
    for (int64_t v : {x.q0, x.s0, x.e0, x.q1, x.s1, x.e1, x.hits, k.back.best, k.back.differ, k.ahead.best,
                      k.ahead.differ})
      *o++ = v;
  }
  return out;
}

}  // namespace

void register_alignment(py::module_& m) {
  py::class_<Params>(m, "AlignParams")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, double, int64_t, int64_t, int64_t>(),
           py::arg("k"), py::arg("gap"), py::arg("drift"), py::arg("tries"), py::arg("max_active"),
           py::arg("agreement"), py::arg("stop"), py::arg("min_words"),
           py::arg("single_hit_differing"));
  m.def("passage_align", &passage_align, py::arg("qkeys"), py::arg("qpos"), py::arg("skeys"), py::arg("sword"),
        py::arg("qn"), py::arg("sn"), py::arg("params"),
        "the passages a text shares with one source: rows (q0, s0, e0, q1, s1, e1, hits, words back, differing "
        "back, words ahead, differing ahead) in text order");
}
