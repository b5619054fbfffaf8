"""Exact ground truth: every pair of corpus documents whose reference shingle sets have Jaccard >= 0.5.

The sets are those of ``tests/reference.py`` (NFKC, ``str.lower()``, words as runs of letters and
digits with combining marks kept and space-less scripts split per character, the set of word 5-grams;
fewer than 5 words: one shingle of all of them). Each shingle is stored as a 64-bit hash (Python's
tuple hash) only to make the sets small: the sets are exact, not sketched (a collision among the ~15
million distinct shingles has a probability of about 1e-5). All pairs come from an inverted index with
prefix filtering (Bayardo et al., "Scaling up all pairs similarity search", WWW 2007): tokens are
ranked rarest first, and a pair with Jaccard >= t must share a token among the first
``|x| - ceil(t |x|) + 1`` of each set; the size filter ``t |x| <= |y| <= |x| / t`` prunes more, and every
candidate pair is then counted exactly.

    python bench/truth.py                      # ~1-2 minutes: writes bench/data/truth.npz
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
import time
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
TRUTH_THRESHOLD = 0.5
SHINGLE_SIZE = 5

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


def _reference() -> Any:
    """tests/reference.py: the definition the C++ core matches bit for bit."""
    spec = importlib.util.spec_from_file_location("neardup_reference", ROOT / "tests" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _reference()
_PLAIN_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=65536)
def _special_char(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Mc", "Me") or reference._nospace(ch)


def _needs_reference(prepared: str) -> bool:
    """Whether the text has a character on which the regex words differ from the reference (a
    combining mark or a letter of a space-less script). Texts without any use the one-line regex."""
    if prepared.isascii():
        return False
    return any(_special_char(ch) for ch in set(prepared) if ord(ch) > 0x7F)


def words(text: str) -> list[str]:
    """The reference words of ``text`` (exactly ``reference.words``, faster on plain text)."""
    prepared = unicodedata.normalize("NFKC", text).lower()
    if _needs_reference(prepared):
        return list(reference.words(text))
    return _PLAIN_WORD.findall(prepared)


def shingle_tuples(text: str, size: int = SHINGLE_SIZE) -> set[tuple[str, ...]]:
    """The reference shingle set as tuples (slow path kept for brute-force checks)."""
    toks = words(text)
    if not toks:
        return set()
    if len(toks) < size:
        return {tuple(toks)}
    return set(zip(*(toks[i:] for i in range(size)), strict=False))


def shingle_set(text: str, size: int = SHINGLE_SIZE) -> U64:
    """The reference shingle set of ``text``: sorted unique 64-bit hashes of its word ``size``-grams."""
    toks = words(text)
    if not toks:
        return np.empty(0, dtype=np.uint64)
    grams = [tuple(toks)] if len(toks) < size else zip(*(toks[i:] for i in range(size)), strict=False)
    hashes = np.fromiter(map(hash, grams), dtype=np.int64)
    return np.unique(hashes.view(np.uint64))


def shingle_sets(texts: Sequence[str]) -> list[U64]:
    return [shingle_set(t) for t in texts]


def exact_jaccard(a: U64, b: U64) -> float:
    if len(a) == 0 and len(b) == 0:
        return 0.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def _ranked(sets: Sequence[U64]) -> tuple[list[I64], I64]:
    """Each set as token ranks sorted ascending, rarest tokens first (ties by hash), and the sizes."""
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    if sizes.sum() == 0:
        return [np.empty(0, dtype=np.int64) for _ in sets], sizes
    flat = np.concatenate(sets)
    uniq, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True)
    order = np.lexsort((uniq, counts))  # rarest first
    rank_of = np.empty(len(uniq), dtype=np.int64)
    rank_of[order] = np.arange(len(uniq))
    ranks = rank_of[inverse]
    out: list[I64] = []
    start = 0
    for size in sizes.tolist():
        out.append(np.sort(ranks[start : start + size]))
        start += size
    return out, sizes


def prefix_length(size: int, threshold: float) -> int:
    """Tokens of a set of ``size`` that a pair with Jaccard >= threshold must share one of."""
    if size == 0:
        return 0
    return size - math.ceil(threshold * size - 1e-9) + 1


def all_pairs(sets: Sequence[U64], threshold: float = TRUTH_THRESHOLD) -> dict[str, I64]:
    """Every pair (i < j) with Jaccard(sets[i], sets[j]) >= threshold, exactly.

    Returns arrays ``i``, ``j``, ``inter`` (|A & B|) and ``union`` (|A | B|), sorted by (i, j), plus
    ``candidates``: how many pairs the prefix and size filters left to count."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    ranked, sizes = _ranked(sets)
    n = len(sets)
    # Inverted index of the prefixes: (token rank, document) for each prefix token.
    prefix_docs, prefix_tokens = [], []
    for doc, toks in enumerate(ranked):
        p = prefix_length(len(toks), threshold)
        prefix_tokens.append(toks[:p])
        prefix_docs.append(np.full(p, doc, dtype=np.int64))
    tok = np.concatenate(prefix_tokens) if prefix_tokens else np.empty(0, dtype=np.int64)
    doc_of = np.concatenate(prefix_docs) if prefix_docs else np.empty(0, dtype=np.int64)
    order = np.lexsort((doc_of, tok))
    tok, doc_of = tok[order], doc_of[order]
    bounds = np.flatnonzero(np.diff(tok)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(tok)]])
    lengths = ends - starts
    codes: list[I64] = []
    # Groups of two (most of them): vectorized.
    two = starts[lengths == 2]
    if len(two):
        codes.append(doc_of[two] * n + doc_of[two + 1])
    for s, e in zip(starts[lengths > 2].tolist(), ends[lengths > 2].tolist(), strict=True):
        members = doc_of[s:e]
        a, b = np.triu_indices(len(members), k=1)
        codes.append(members[a] * n + members[b])
    if not codes:
        empty = np.empty(0, dtype=np.int64)
        return {"i": empty, "j": empty, "inter": empty, "union": empty, "candidates": np.array(0)}
    pairs = np.unique(np.concatenate(codes))
    ci, cj = pairs // n, pairs % n
    small, large = np.minimum(sizes[ci], sizes[cj]), np.maximum(sizes[ci], sizes[cj])
    keep = small >= threshold * large - 1e-9  # size filter
    ci, cj = ci[keep], cj[keep]
    # Exact overlap: mark the tokens of i once, count the marked tokens of each partner j.
    inter = np.empty(len(ci), dtype=np.int64)
    mark = np.zeros(int(max((t[-1] for t in ranked if len(t)), default=0)) + 1, dtype=bool)
    group_bounds = np.flatnonzero(np.diff(ci)) + 1
    for s, e in zip(
        np.concatenate([[0], group_bounds]).tolist(),
        np.concatenate([group_bounds, [len(ci)]]).tolist(),
        strict=True,
    ):
        if s == e:
            continue
        mine = ranked[int(ci[s])]
        mark[mine] = True
        for k in range(s, e):
            inter[k] = int(np.count_nonzero(mark[ranked[int(cj[k])]]))
        mark[mine] = False
    union = sizes[ci] + sizes[cj] - inter
    ok = inter >= threshold * union - 1e-9
    return {
        "i": ci[ok],
        "j": cj[ok],
        "inter": inter[ok],
        "union": union[ok],
        "candidates": np.array(len(ci)),
    }


def brute_force_pairs(sets: Sequence[set[Any]], threshold: float = TRUTH_THRESHOLD) -> set[tuple[int, int]]:
    """All pairs by comparing every pair of Python sets: the check of ``all_pairs`` on small inputs."""
    out = set()
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            a, b = sets[i], sets[j]
            if a or b:
                union = len(a | b)
                if len(a & b) >= threshold * union - 1e-9:
                    out.add((i, j))
    return out


def save(path: Path, ids: Sequence[str], sizes: I64, pairs: dict[str, I64], info: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        ids=np.array(ids),
        sizes=sizes.astype(np.int32),
        i=pairs["i"].astype(np.int32),
        j=pairs["j"].astype(np.int32),
        inter=pairs["inter"].astype(np.int32),
        union=pairs["union"].astype(np.int32),
        info=np.array(json.dumps(info)),
    )


def load_truth(path: Path = DATA / "truth.npz") -> dict[str, Any]:
    with np.load(path) as data:
        out = {k: data[k] for k in data.files}
    out["info"] = json.loads(str(out["info"]))
    out["ids"] = [str(x) for x in out["ids"]]
    return out


def build(
    texts: Sequence[str], ids: Sequence[str], threshold: float = TRUTH_THRESHOLD
) -> tuple[list[U64], dict[str, I64], dict[str, Any]]:
    started = time.perf_counter()
    sets = shingle_sets(texts)
    shingled = time.perf_counter()
    pairs = all_pairs(sets, threshold)
    done = time.perf_counter()
    jac = pairs["inter"] / np.maximum(pairs["union"], 1)
    info = {
        "threshold": threshold,
        "documents": len(texts),
        "empty_documents": int(sum(len(s) == 0 for s in sets)),
        "shingles_total": int(sum(len(s) for s in sets)),
        "pairs": len(pairs["i"]),
        "identical_pairs": int((pairs["inter"] == pairs["union"]).sum()),
        "pairs_at_least": {f"{t:.1f}": int((jac >= t - 1e-9).sum()) for t in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)},
        "candidates_counted": int(pairs["candidates"]),
        "seconds_shingling": round(shingled - started, 2),
        "seconds_all_pairs": round(done - shingled, 2),
        "definition": "tests/reference.py word 5-gram sets, 64-bit hashed; Jaccard = |A&B| / |A|B|",
    }
    return sets, pairs, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DATA / "corpus.jsonl")
    parser.add_argument("--output", type=Path, default=DATA / "truth.npz")
    parser.add_argument("--threshold", type=float, default=TRUTH_THRESHOLD)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import corpus as corpus_module

    docs = corpus_module.load(args.corpus)
    sets, pairs, info = build([d["text"] for d in docs], [d["id"] for d in docs], args.threshold)
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    save(args.output, [d["id"] for d in docs], sizes, pairs, info)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
