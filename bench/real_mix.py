"""Documents with the size mix of real text, and near-duplicate groups among them, from corpus.jsonl.

Real web pages, essays and papers are not 4 KB chunks: their sizes spread over more than an order of
magnitude. A corpus document of 1-60 KB is kept whole, as written (man pages, documentation pages,
source files: mean ~9.5 KB); a longer one (a book-length manual, a changelog) is cut at paragraph
boundaries into pieces of sizes drawn from a log-normal law (median MEDIAN_BYTES, sigma SIGMA), and
pieces outside 1-60 KB are left out; shorter documents are left out. Where more
documents are asked for than the corpus has pieces, the rest are near-duplicates of pieces (the
corpus's own releases of a file are near-duplicates too): a base drawn with Zipf-like weights, so that
most pieces have no copy, some a few and a few of them hundreds (a page mirrored across sites, a
licence in every package), each copy with 0-5% of its words edited plus case and white-space noise
(mutations.py). Everything is shuffled with a fixed seed: the same corpus gives the same documents.

``python bench/bench_passages.py --chunk-bytes 0`` (and bench_service.py's ``build_documents`` with
``chunk_bytes`` 0) use it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import mutations

MEDIAN_BYTES = 8_000
SIGMA = 0.8
MIN_BYTES, MAX_BYTES = 1_000, 60_000
#: Zipf exponent of how often a piece is the base of a near-duplicate.
ZIPF = 0.6
EDIT_RATES = (0.0, 0.01, 0.02, 0.05)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def pieces(
    docs: Sequence[tuple[str, str]], cut: Callable[[str, int], list[str]], seed: int
) -> list[tuple[str, str]]:
    """(id, text) of every document of 1-60 KB, and of every piece of 1-60 KB of the longer ones, each
    cut at its own drawn target size."""
    rng = random.Random(f"sizes:{seed}")
    out = []
    for doc_id, text in docs:
        target = int(math.exp(rng.gauss(math.log(MEDIAN_BYTES), SIGMA)))
        parts = [text] if utf8_size(text) <= MAX_BYTES else cut(text, target)
        for k, part in enumerate(parts):
            if MIN_BYTES <= utf8_size(part) <= MAX_BYTES:
                out.append((f"{doc_id}#{k}" if len(parts) > 1 else doc_id, part))
    return out


def near_duplicates(base: Sequence[tuple[str, str]], count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` near-duplicates of pieces of ``base`` (Zipf-like choice of the copied piece)."""
    if count <= 0 or not base:
        return []
    rng = random.Random(f"copies:{seed}")
    order = list(range(len(base)))
    rng.shuffle(order)  # which pieces are copied most: at random, not the corpus's first ones
    weights = [1 / (rank + 1) ** ZIPF for rank in range(len(base))]
    chosen = rng.choices(order, weights=weights, k=count)
    vocabulary = sorted({w for i in order[:2_000] for w in base[i][1].split()[:500] if w.isalpha()}) or [
        "word"
    ]
    out, seen = [], dict.fromkeys(range(len(base)), 0)
    for i in chosen:
        seen[i] += 1
        rate = rng.choice(EDIT_RATES)
        text, _ = mutations.mutate(base[i][1], rate, random.Random(f"{seed}:{i}:{seen[i]}"), vocabulary)
        out.append((f"{base[i][0]}~{seen[i]}", text))
    return out


def family(doc_id: str) -> str:
    """The file a piece comes from, whatever its release: a project's releases hold near-copies of the
    same files (``pypi/<project>/<version>/<path>``)."""
    parts = doc_id.split("#", 1)[0].split("/")
    return "/".join(parts[:2] + parts[3:]) if parts[0] == "pypi" and len(parts) > 3 else "/".join(parts)


def hold_out(
    base: list[tuple[str, str]], count: int, seed: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``count`` pieces taken out with every other piece of their files' families (kept out of the
    stored documents too, so that their other releases do not make them copied text), and the rest."""
    if count <= 0:
        return [], base
    families: dict[str, list[int]] = {}
    for i, (doc_id, _) in enumerate(base):
        families.setdefault(family(doc_id), []).append(i)
    names = sorted(families)
    random.Random(f"held:{seed}").shuffle(names)
    out: set[int] = set()
    kept: list[tuple[str, str]] = []
    for name in names:
        if len(kept) >= count:
            break
        out.update(families[name])
        kept += [base[i] for i in families[name]][: count - len(kept)]
    return kept, [p for i, p in enumerate(base) if i not in out]


def documents(
    docs: Sequence[tuple[str, str]],
    count: int,
    cut: Callable[[str, int], list[str]],
    seed: int = 1,
    held_out: int = 0,
) -> tuple[list[tuple[str, str]], dict[str, object]]:
    """``count`` documents (fewer pieces: the rest near-duplicates), shuffled, the last ``held_out`` of
    them pieces that neither the others nor their near-duplicates come from (text for the submitted
    texts of a passage benchmark); and how they were made."""
    base = pieces(docs, cut, seed)
    random.Random(seed).shuffle(base)
    kept, base = hold_out(base, held_out, seed)
    stored = count - len(kept)
    copies = near_duplicates(base, stored - len(base), seed)
    out = base[:stored] + copies
    random.Random(seed + 1).shuffle(out)
    out += kept
    info = {
        "how": f"corpus.jsonl documents of {MIN_BYTES:,}-{MAX_BYTES:,} bytes whole, longer ones cut at "
        f"paragraph boundaries to sizes drawn from a log-normal law (median {MEDIAN_BYTES:,} bytes, sigma "
        f"{SIGMA}), pieces of {MIN_BYTES:,}-{MAX_BYTES:,} bytes; "
        f"{len(copies):,} near-duplicates of pieces (Zipf {ZIPF} choice of the base, {EDIT_RATES} of the "
        "words edited, case and white-space noise); shuffled with a fixed seed",
        "pieces": len(base) + len(kept),
        "near_duplicates": len(copies),
    }
    return out, info
