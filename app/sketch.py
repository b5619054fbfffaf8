"""Typed Python face of the compiled sketch core (``app/_native``): signatures, band keys, similarity.

This is the only module that imports the compiled extension. It checks dtypes, shapes and contiguity
before handing buffers to C++, so a wrong argument is a ``ValueError`` that says what to pass, never a
crash. The parameter-choice math (S-curve, optimal bands) lives here too: it loops over (b, r) pairs,
never over shingles or signature slots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from neardup import _native

Shingle = Literal["word", "char"]
Isa = Literal["serial", "avx2", "avx512", "avx512dq"]

#: Seed of the hash family. Part of the on-disk format: changing it changes every signature.
DEFAULT_SEED = 1
#: Value of every slot of the signature of a text with no features (empty or word-less). No real
#: signature ever holds this value, so an empty signature never matches anything.
EMPTY_SLOT = 0xFFFFFFFF
MIN_PERM, MAX_PERM = 16, 1024
MAX_SHINGLE_SIZE = 64
#: Bits per bin of the estimate sketch's dense mode (two bit planes): a sketch of ``bins`` bins takes
#: ``1 + bins * BITS_PER_BIN // 8`` bytes (:func:`adaptive_sketches`).
BITS_PER_BIN = 2
#: Version of the Unicode tables compiled into the core (normalization, case, word characters).
UNICODE_VERSION: str = _native.UNICODE_VERSION

U32Array = npt.NDArray[np.uint32]
U64Array = npt.NDArray[np.uint64]
F32Array = npt.NDArray[np.float32]


def active_isa() -> str:
    """Instruction set the kernels dispatch to: ``serial``, ``avx2`` or ``avx512``."""
    return str(_native.active_isa())


def available_isas() -> list[str]:
    """Instruction sets this CPU (and this build) can run, best last; ``serial`` is always there."""
    return [str(name) for name in _native.available_isas()]


def _check_isa(isa: str | None) -> str:
    if isa is None:
        return ""
    if isa not in available_isas():
        raise ValueError(f"isa {isa!r} is not available here; choose one of {available_isas()}")
    return isa


def _check_num_perm(num_perm: int) -> None:
    if (
        not isinstance(num_perm, int)
        or isinstance(num_perm, bool)
        or not MIN_PERM <= num_perm <= MAX_PERM
        or num_perm % 8
    ):
        raise ValueError(f"num_perm must be a multiple of 8 from {MIN_PERM} to {MAX_PERM}, got {num_perm!r}")


def _check_texts(
    texts: Sequence[str], num_perm: int, shingle: str, size: int, seed: int, threads: int
) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of str, not one str: wrap it in a list")
    _check_num_perm(num_perm)
    if shingle not in ("word", "char"):
        raise ValueError(f"shingle must be 'word' or 'char', got {shingle!r}")
    if not isinstance(size, int) or not 1 <= size <= MAX_SHINGLE_SIZE:
        raise ValueError(f"size must be an integer from 1 to {MAX_SHINGLE_SIZE}, got {size!r}")
    if not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer from 0 to 2**64-1, got {seed!r}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    items = list(texts)
    for position, text in enumerate(items):
        if not isinstance(text, str):
            raise ValueError(f"texts[{position}] is {type(text).__name__}, expected str")
    return items


def signatures(
    texts: Sequence[str],
    *,
    num_perm: int = 128,
    shingle: Shingle = "word",
    size: int = 5,
    seed: int = DEFAULT_SEED,
    normalize: bool = True,
    lowercase: bool = True,
    collapse_whitespace: bool = True,
    threads: int = 1,
    isa: Isa | None = None,
) -> U32Array:
    """MinHash signatures of ``texts``: uint32 array of shape ``(len(texts), num_perm)``.

    Text is NFKC-normalized, lower-cased (``str.lower``), cut into words (runs of Unicode letters and
    digits, marks kept with their letter; each character of a script written without spaces is a word
    of its own) and then into word ``size``-grams, or into character ``size``-grams of the
    whitespace-collapsed text. A text with fewer than ``size`` words has one shingle of all of them; a
    text with none gets the empty signature (every slot ``EMPTY_SLOT``). The GIL is released while the
    core works; ``threads`` > 1 splits the batch over that many threads.
    """
    items = _check_texts(texts, num_perm, shingle, size, seed, threads)
    out: U32Array = _native.signatures(
        items,
        num_perm,
        shingle == "char",
        size,
        seed,
        normalize,
        lowercase,
        collapse_whitespace,
        threads,
        _check_isa(isa),
    )
    return out


def adaptive_sketches(
    texts: Sequence[str],
    *,
    num_perm: int = 128,
    shingle: Shingle = "word",
    size: int = 5,
    seed: int = DEFAULT_SEED,
    bins: int = 1024,
    threads: int = 1,
    isa: Isa | None = None,
) -> tuple[U32Array, npt.NDArray[np.uint8]]:
    """The estimate sketches of ``texts``: the MinHash signatures (``(n, num_perm)`` uint32, for band
    keys) and the adaptive one-permutation bins (``(n, 1 + bins / 4)`` uint8), from one tokenization
    (options as :func:`signatures`). Byte 0 is the mode: 0 (dense) for two bit planes of bins / 64
    little-endian words, each bin's 2-bit code 0 when it is empty, else 1 + its minimum mod 3; for a
    document of n distinct shingles with w = bins // n - 1 >= 3, min(w, 16) (sparse): the filled-bin
    bitmap, then every shingle in bin order (the bin's minimum first) as its value mod 3 * 2^(w - 2)
    in w bits and a bit saying whether the next one shares its bin (docs/design.md, "Stored
    formats"). A featureless text is mode 0, all zero."""
    items = _check_texts(texts, num_perm, shingle, size, seed, threads)
    _check_bins(bins)
    sigs, packed = _native.sketch_adaptive(
        items, num_perm, shingle == "char", size, seed, True, True, True, threads, _check_isa(isa), bins
    )
    return sigs, packed


def exact_sketches(
    texts: Sequence[str],
    *,
    num_perm: int = 128,
    shingle: Shingle = "word",
    size: int = 5,
    seed: int = DEFAULT_SEED,
    threads: int = 1,
    isa: Isa | None = None,
) -> tuple[U32Array, U32Array, npt.NDArray[np.int64]]:
    """The exact sketches of ``texts``: the MinHash signatures and the sorted distinct 32-bit shingle
    hashes of each text, concatenated (``flat[offsets[i]:offsets[i + 1]]`` are text ``i``'s)."""
    items = _check_texts(texts, num_perm, shingle, size, seed, threads)
    sigs, flat, offsets = _native.sketch_exact(
        items, num_perm, shingle == "char", size, seed, True, True, True, threads, _check_isa(isa)
    )
    return sigs, flat, offsets


def _check_bins(bins: int) -> None:
    if not isinstance(bins, int) or not 64 <= bins <= 4096 or bins % 64:
        raise ValueError(f"bins must be a multiple of 64 from 64 to 4096, got {bins!r}")


def _row_index(rows: npt.ArrayLike | None, total: int) -> tuple[npt.NDArray[np.int64], bool]:
    if rows is None:
        return np.empty(0, dtype=np.int64), False
    index = np.ascontiguousarray(np.asarray(rows), dtype=np.int64)
    if index.ndim != 1:
        raise ValueError("rows must be a 1-D sequence of row indices")
    if index.size and (index.min() < 0 or index.max() >= total):
        raise ValueError(f"rows must be indices from 0 to {total - 1}")
    return index, True


def adaptive_similarity(
    query: npt.NDArray[np.uint8],
    candidates: npt.NDArray[np.uint8],
    rows: npt.ArrayLike | None = None,
    *,
    bins: int = 1024,
    isa: Isa | None = None,
) -> F32Array:
    """Estimated Jaccard of the estimate sketch ``query`` (``1 + bins / 4`` bytes, as
    :func:`adaptive_sketches` makes them) with each row of ``candidates`` (or the ``rows`` of it),
    float32. Two short documents whose codes are both at least 6 bits wide: shingle by shingle (the
    common shingles, corrected for chance agreement of codes in a shared bin and rounded to a whole
    number, over the union); any other pair: over the bins filled on either side, the bins whose
    minima agree, corrected for chance agreement (1 / m, m the smaller of the two moduli) where both
    are filled; clamped to [0, 1]. The same floats on every ``isa``."""
    _check_bins(bins)
    stride = 1 + bins // 4
    q = np.ascontiguousarray(query, dtype=np.uint8).reshape(-1)
    matrix = np.ascontiguousarray(candidates, dtype=np.uint8).reshape(-1, stride)
    index, use_rows = _row_index(rows, matrix.shape[0])
    out: F32Array = _native.adaptive_similarity(q, matrix, index, use_rows, bins, _check_isa(isa))
    return out


def exact_similarity(
    query: U32Array,
    flat: U32Array,
    offsets: npt.ArrayLike,
    rows: npt.ArrayLike | None = None,
    *,
    floor: float = 0.0,
    isa: Isa | None = None,
) -> F32Array:
    """Exact Jaccard of the sorted set ``query`` with each set of ``flat``/``offsets`` (or the ``rows``
    of them) where it is at least ``floor``; 0.0 where it is below (the merge stops early there).
    ``query`` and every set must be sorted and without repeats (as ``exact_sketches`` makes them)."""
    if not isinstance(floor, (int, float)) or not 0.0 <= float(floor) <= 1.0:
        raise ValueError(f"floor must be a number from 0 to 1, got {floor!r}")
    off = np.ascontiguousarray(np.asarray(offsets), dtype=np.int64)
    q = np.ascontiguousarray(query, dtype=np.uint32)
    f = np.ascontiguousarray(flat, dtype=np.uint32)
    index, use_rows = _row_index(rows, max(len(off) - 1, 0))
    out: F32Array = _native.exact_similarity(q, f, off, index, use_rows, float(floor), _check_isa(isa))
    return out


def tokens(
    text: str,
    *,
    shingle: Shingle = "word",
    normalize: bool = True,
    lowercase: bool = True,
    collapse_whitespace: bool = True,
) -> list[str]:
    """The tokens the core cuts ``text`` into (words, or characters): to see what a signature is of."""
    if not isinstance(text, str):
        raise ValueError(f"text must be str, got {type(text).__name__}")
    if shingle not in ("word", "char"):
        raise ValueError(f"shingle must be 'word' or 'char', got {shingle!r}")
    joined: str = _native.normalized_text(text, shingle == "char", normalize, lowercase, collapse_whitespace)
    if shingle == "char":
        return list(joined)
    return joined.split(" ") if joined else []


def signature(text: str, **options: object) -> U32Array:
    """The signature of one text: uint32 array of shape ``(num_perm,)``. Options as ``signatures``."""
    matrix: U32Array = signatures([text], **options)  # type: ignore[arg-type]
    row: U32Array = matrix[0]
    return row


def _as_signature_matrix(name: str, value: object) -> U32Array:
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{name} must be a numpy uint32 array, got {type(value).__name__}")
    if value.dtype != np.uint32:
        raise ValueError(f"{name} must have dtype uint32, got {value.dtype}; use .astype(np.uint32)")
    if value.ndim == 1:
        value = value.reshape(1, -1)
    if value.ndim != 2:
        raise ValueError(f"{name} must be 1-D (one signature) or 2-D (n, num_perm), got {value.ndim}-D")
    return np.ascontiguousarray(value)


def is_empty(signatures: U32Array) -> npt.NDArray[np.bool_]:
    """Which rows are the empty signature (texts with no features: they never match anything)."""
    matrix = _as_signature_matrix("signatures", signatures)
    return np.asarray(matrix[:, 0] == EMPTY_SLOT) if matrix.shape[1] else np.ones(len(matrix), bool)


def similarity(
    query: U32Array,
    candidates: U32Array,
    rows: npt.ArrayLike | None = None,
    *,
    isa: Isa | None = None,
) -> F32Array:
    """Estimated Jaccard of ``query`` (shape ``(k,)``) with each row of ``candidates`` (``(n, k)``).

    With ``rows`` (integer indices into ``candidates``), only those rows are compared, in that order.
    Returns float32 of shape ``(n,)`` or ``(len(rows),)``: the fraction of equal slots; 0.0 wherever
    either side is the empty signature.
    """
    if not isinstance(query, np.ndarray) or query.dtype != np.uint32 or query.ndim != 1:
        raise ValueError("query must be a 1-D numpy uint32 array (one signature of num_perm slots)")
    matrix = _as_signature_matrix("candidates", candidates)
    if matrix.shape[1] != query.shape[0]:
        raise ValueError(
            f"candidates have {matrix.shape[1]} slots per row but query has {query.shape[0]}: "
            "compare signatures made with the same num_perm"
        )
    if rows is None:
        index = np.empty(0, dtype=np.int64)
        use_rows = False
    else:
        index = np.ascontiguousarray(np.asarray(rows), dtype=np.int64)
        if index.ndim != 1:
            raise ValueError("rows must be a 1-D sequence of row indices")
        if index.size and (index.min() < 0 or index.max() >= matrix.shape[0]):
            raise ValueError(f"rows must be indices from 0 to {matrix.shape[0] - 1}")
        use_rows = True
    out: F32Array = _native.similarity(np.ascontiguousarray(query), matrix, index, use_rows, _check_isa(isa))
    return out


def band_keys(signatures: U32Array, bands: int, rows: int, *, salt: int = 0) -> U64Array:
    """One 64-bit LSH bucket key per band: uint64 array of shape ``(n, bands)``.

    Band ``j`` hashes slots ``j*rows .. (j+1)*rows-1`` together with ``j`` itself (and ``salt``, a
    64-bit integer: keys made with different salts differ for the same slots), so equal rows in
    different bands give different keys. Empty signatures get key 0 in every band, which no real band
    ever has: callers skip them.
    """
    if not isinstance(salt, int) or isinstance(salt, bool) or not 0 <= salt < 2**64:
        raise ValueError(f"salt must be an integer from 0 to 2**64-1, got {salt!r}")
    matrix = _as_signature_matrix("signatures", signatures)
    if not isinstance(bands, int) or not isinstance(rows, int) or bands < 1 or rows < 1:
        raise ValueError(f"bands and rows must be positive integers, got bands={bands!r} rows={rows!r}")
    if bands * rows > matrix.shape[1]:
        raise ValueError(f"bands*rows = {bands * rows} exceeds the {matrix.shape[1]} slots of each signature")
    out: U64Array = _native.band_keys(matrix, bands, rows, salt)
    return out


# --- choosing (b, r): the S-curve P(s) = 1 - (1 - s^r)^b -------------------------------------------


def collision_probability(
    similarity: float | npt.ArrayLike, bands: int, rows: int
) -> npt.NDArray[np.float64]:
    """The S-curve: probability that two documents of Jaccard ``similarity`` share at least one band."""
    s = np.clip(np.asarray(similarity, dtype=np.float64), 0.0, 1.0)
    return np.asarray(1.0 - (1.0 - s**rows) ** bands)


def _error_probabilities_grid(
    threshold: float, bands: npt.NDArray[np.float64], rows: npt.NDArray[np.float64], points: int = 512
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    # Mean error probability over similarities uniform on each side of the threshold: the chance that
    # a pair below t becomes a candidate (fp), and that a pair at or above t does not (fn).
    below = (np.arange(points) + 0.5) / points * threshold
    above = threshold + (np.arange(points) + 0.5) / points * (1.0 - threshold)
    b = bands[..., None]
    r = rows[..., None]
    fp = (1.0 - (1.0 - below**r) ** b).mean(axis=-1)
    fn = ((1.0 - above**r) ** b).mean(axis=-1)
    return fp, fn


def error_probabilities(threshold: float, bands: int, rows: int) -> tuple[float, float]:
    """(false positive, false negative) probability of the banding for pairs drawn uniformly below and
    above ``threshold``: the mean of P(s) for s < t, and of 1 - P(s) for s >= t."""
    _check_threshold(threshold)
    fp, fn = _error_probabilities_grid(threshold, np.array(float(bands)), np.array(float(rows)))
    return float(fp), float(fn)


def _check_threshold(threshold: float) -> None:
    if not isinstance(threshold, (int, float)) or not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")


def recall_bands(threshold: float, num_perm: int, target: float, max_bands: int) -> tuple[int, int]:
    """The banding of the service's sketches: the largest ``rows`` (fewest chance candidates) for which some
    ``bands <= max_bands`` with ``bands * rows <= num_perm`` reach P(threshold) >= ``target``, with
    the fewest such bands. Verification on the sharper sketch removes the extra candidates, so the
    banding is chosen for recall at the threshold. When no banding reaches the target (low
    thresholds), the one of ``optimal_bands`` weighing misses 0.99 among at most ``max_bands``."""
    _check_threshold(threshold)
    _check_num_perm(num_perm)
    if not 0.0 < target < 1.0 or max_bands < 1:
        raise ValueError("target must be strictly between 0 and 1 and max_bands positive")
    t = float(threshold)
    for rows in range(num_perm, 0, -1):
        miss = 1.0 - t**rows
        if not 0.0 < miss < 1.0:
            continue
        bands = max(1, math.ceil(math.log(1.0 - target) / math.log(miss) - 1e-12))
        if bands <= max_bands and bands * rows <= num_perm:
            return bands, rows
    pairs = np.array(
        [(b, r) for b in range(1, min(max_bands, num_perm) + 1) for r in range(1, num_perm // b + 1)],
        dtype=np.float64,
    )
    fp, fn = _error_probabilities_grid(t, pairs[:, 0], pairs[:, 1])
    cost = 0.01 * fp + 0.99 * fn
    best = int(np.lexsort((pairs[:, 0], np.round(cost, 12)))[0])
    return int(pairs[best, 0]), int(pairs[best, 1])


def optimal_bands(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """The (bands, rows) with bands*rows <= num_perm minimizing ``fp_weight*fp + fn_weight*fn``.

    fp and fn are the *probabilities* of error of ``error_probabilities`` (mean of the S-curve's error
    on each side of the threshold), not areas under the curve, so the two sides are weighed fairly
    whatever the threshold. Ties go to fewer bands (less storage per document).
    """
    _check_threshold(threshold)
    _check_num_perm(num_perm)
    if fp_weight < 0 or fn_weight < 0 or fp_weight + fn_weight <= 0:
        raise ValueError("fp_weight and fn_weight must be >= 0 and not both 0")
    pairs = np.array(
        [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)], dtype=np.float64
    )
    fp, fn = _error_probabilities_grid(float(threshold), pairs[:, 0], pairs[:, 1])
    cost = fp_weight * fp + fn_weight * fn
    best = int(np.lexsort((pairs[:, 0], np.round(cost, 12)))[0])
    return int(pairs[best, 0]), int(pairs[best, 1])
