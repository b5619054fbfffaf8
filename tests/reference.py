"""Pure-Python reference of the signature format: the definition the C++ core must match bit for bit.

Slow and simple on purpose. Text -> features:
  NFKC (unicodedata), then str.lower(), then words: maximal runs of alphanumerics (str.isalnum) in
  which combining marks (Mn, Mc, Me) continue a word, and each alphanumeric of a script written
  without spaces (Han, Kana, Thai, ...) is a word of its own; then the set of word n-grams (fewer than
  n words: one shingle of all of them). Character mode: the text with white-space runs collapsed to one
  space and trimmed (" ".join(t.split())), then character n-grams.
  On text without combining marks or space-less scripts this is exactly
  re.findall(r"[^\\W_]+", NFKC(text).lower()), the definition of the issue.
Features -> signature: token hash T over each token's UTF-8 bytes, rolling polynomial shingle hash,
then h_i(x) = hi32(A_i * x + B_i mod 2^64) with (A_i, B_i) from splitmix64(seed); the min per slot.
"""

from __future__ import annotations

import math
import re
import unicodedata

import numpy as np

MASK64 = (1 << 64) - 1
EMPTY_SLOT = 0xFFFFFFFF

NOSPACE_RANGES = [
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x19E0, 0x19FF),
    (0x2E80, 0x2FDF),
    (0x3005, 0x3007),
    (0x3021, 0x3029),
    (0x3038, 0x303C),
    (0x3040, 0x30FF),
    (0x3100, 0x312F),
    (0x31A0, 0x31BF),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA000, 0xA4CF),
    (0xA9E0, 0xA9FF),
    (0xAA60, 0xAA7F),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x1B000, 0x1B16F),
    (0x20000, 0x3FFFF),
]


def _nospace(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in NOSPACE_RANGES)


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Mc", "Me")


def prepare(text: str, *, normalize: bool = True, lowercase: bool = True) -> str:
    if normalize:
        text = unicodedata.normalize("NFKC", text)
    if lowercase:
        text = text.lower()
    return text


def words(text: str, *, normalize: bool = True, lowercase: bool = True) -> list[str]:
    """The words of ``text`` under the definition above."""
    text = prepare(text, normalize=normalize, lowercase=lowercase)
    out: list[str] = []
    current: list[str] | None = None
    single = False
    for ch in text:
        if ch.isalnum():
            if current is not None and not single and not _nospace(ch):
                current.append(ch)
                continue
            if current is not None:
                out.append("".join(current))
            current = [ch]
            single = _nospace(ch)
        elif current is not None and _is_mark(ch):
            current.append(ch)
        elif current is not None:
            out.append("".join(current))
            current = None
    if current is not None:
        out.append("".join(current))
    return out


def plain_words(text: str) -> list[str]:
    """The issue's one-line definition, equal to ``words`` on text without marks or space-less scripts."""
    return re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower())


def char_tokens(
    text: str, *, normalize: bool = True, lowercase: bool = True, collapse: bool = True
) -> list[str]:
    text = prepare(text, normalize=normalize, lowercase=lowercase)
    if collapse:
        text = " ".join(text.split())
    return list(text)


def tokens(text: str, *, shingle: str = "word", **options: bool) -> list[str]:
    if shingle == "word":
        return words(text, **options)
    return char_tokens(text, **options)


def shingles(text: str, *, size: int = 5, shingle: str = "word", **options: bool) -> set[tuple[str, ...]]:
    """The feature set: token n-grams as tuples (one shingle of all tokens when there are fewer)."""
    toks = tokens(text, shingle=shingle, **options)
    if not toks:
        return set()
    if len(toks) < size:
        return {tuple(toks)}
    return {tuple(toks[i : i + size]) for i in range(len(toks) - size + 1)}


def jaccard(a: set[tuple[str, ...]], b: set[tuple[str, ...]]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


# ---- hashing ----------------------------------------------------------------------------------------

K0, K1, TOKEN_M = 0x243F6A8885A308D3, 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9
SHINGLE_P = 0x9FB21C651E98DF25


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    h ^= h >> 33
    return h


def token_hash(token: str) -> int:
    data = token.encode("utf-8", "surrogatepass")
    h = K0 ^ ((len(data) * K1) & MASK64)
    for i in range(0, len(data), 8):
        v = int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "little")
        h = ((h ^ v) * TOKEN_M) & MASK64
        h ^= h >> 32
    return fmix64(h)


def shingle_key(shingle: tuple[str, ...]) -> int:
    s = 0
    for tok in shingle:
        s = (s * SHINGLE_P + token_hash(tok)) & MASK64
    return fmix64(s) >> 32


def splitmix64(seed: int, count: int) -> list[int]:
    out, state = [], seed & MASK64
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        out.append(z ^ (z >> 31))
    return out


def hash_family(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    values = splitmix64(seed, 2 * num_perm)
    a = np.array([values[2 * i] | 1 for i in range(num_perm)], dtype=np.uint64)
    b = np.array([values[2 * i + 1] for i in range(num_perm)], dtype=np.uint64)
    return a, b


def signature(
    text: str, *, num_perm: int = 128, seed: int = 1, size: int = 5, shingle: str = "word", **options: bool
) -> np.ndarray:
    keys = sorted({shingle_key(s) for s in shingles(text, size=size, shingle=shingle, **options)})
    if not keys:
        return np.full(num_perm, EMPTY_SLOT, dtype=np.uint32)
    a, b = hash_family(num_perm, seed)
    x = np.array(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        values = (a[:, None] * x[None, :] + b[:, None]) >> np.uint64(32)
    sig: np.ndarray = values.min(axis=1).astype(np.uint32)
    sig[sig == EMPTY_SLOT] = EMPTY_SLOT - 1
    return sig


def band_keys(sig: np.ndarray, bands: int, rows: int) -> list[int]:
    if int(sig[0]) == EMPTY_SLOT:
        return [0] * bands
    out = []
    for j in range(bands):
        h = ((j + 1) * 0x9E3779B97F4A7C15) & MASK64
        for t in range(rows):
            h = ((h ^ int(sig[j * rows + t])) * 0xBF58476D1CE4E5B9) & MASK64
            h ^= h >> 31
        h = fmix64(h)
        out.append(h or 1)
    return out


# ---- the stored sketches: exact mode's shingle keys, the estimate sketch's bins ---------------------

OPH_SALT = 0x6F70682D76322D31
EXACT_SALT = 0x6E6431642D763200
ESTIMATE_SALT = 0x6E6431642D763300


def shingle_keys(text: str, *, size: int = 5, shingle: str = "word", **options: bool) -> list[int]:
    """The sorted distinct 32-bit shingle hashes: what exact mode stores."""
    return sorted({shingle_key(s) for s in shingles(text, size=size, shingle=shingle, **options)})


def oph_bins(
    text: str, *, bins: int = 1024, bits: int = 2, seed: int = 1, size: int = 5, shingle: str = "word"
) -> bytes:
    """One-permutation hashing, each bin a ``bits``-bit code (0: empty; else 1 + its minimum mod
    2^bits - 1), as ``bits`` bit planes of little-endian 64-bit words."""
    keys = shingle_keys(text, size=size, shingle=shingle)
    out = bytearray(bins * bits // 8)
    salt = splitmix64(seed ^ OPH_SALT, 1)[0]
    value: dict[int, int] = {}
    for x in keys:
        v = fmix64(x ^ salt)
        b = ((v >> 32) * bins) >> 32
        value[b] = min(value.get(b, 1 << 32), v & 0xFFFFFFFF)
    words = bins // 64
    for i, v in value.items():
        code = v % ((1 << bits) - 1) + 1
        for p in range(bits):
            if (code >> p) & 1:
                bit = p * words * 64 + i  # plane p, word i // 64, bit i % 64, little-endian words
                out[bit // 8] |= 1 << (bit % 8)
    return bytes(out)


def oph_similarity(a: bytes, b: bytes, bins: int, bits: int) -> float:
    """The estimate of two ``oph_bins``: agreeing filled bins, corrected for chance, over bins filled
    on either side."""
    words = bins // 64

    def codes(data: bytes) -> list[int]:
        n = int.from_bytes(data, "little")
        return [sum(((n >> (p * words * 64 + i)) & 1) << p for p in range(bits)) for i in range(bins)]

    ca, cb = codes(a), codes(b)
    either = sum(1 for x, y in zip(ca, cb, strict=True) if x or y)
    both = sum(1 for x, y in zip(ca, cb, strict=True) if x and y)
    equal = sum(1 for x, y in zip(ca, cb, strict=True) if x and x == y)
    if not either:
        return 0.0
    chance = 1 / ((1 << bits) - 1)
    return min(1.0, max(0.0, (equal - chance * both) / (1 - chance) / either))


def salted_band_keys(sig: np.ndarray, bands: int, rows: int, salt: int = EXACT_SALT) -> list[int]:
    if int(sig[0]) == EMPTY_SLOT:
        return [0] * bands
    out = []
    for j in range(bands):
        h = (((j + 1) * 0x9E3779B97F4A7C15) & MASK64) ^ salt
        for t in range(rows):
            h = ((h ^ int(sig[j * rows + t])) * 0xBF58476D1CE4E5B9) & MASK64
            h ^= h >> 31
        h = fmix64(h)
        out.append(h or 1)
    return out


def estimate_band_keys(sig: np.ndarray, bands: int, rows: int) -> list[int]:
    return salted_band_keys(sig, bands, rows, ESTIMATE_SALT)


def _oph_keys(text: str, bins: int, seed: int, size: int, shingle: str) -> list[tuple[int, int]]:
    """The distinct (bin, 32-bit value) of the shingles, sorted: bins in order, each bin's minimum first."""
    salt = splitmix64(seed ^ OPH_SALT, 1)[0]
    keyed = set()
    for x in shingle_keys(text, size=size, shingle=shingle):
        v = fmix64(x ^ salt)
        keyed.add((((v >> 32) * bins) >> 32, v & 0xFFFFFFFF))
    return sorted(keyed)


def estimate_sketch(
    text: str, *, bins: int = 1024, seed: int = 1, size: int = 5, shingle: str = "word"
) -> bytes:
    """The estimate sketch: a mode byte, then bins / 4 bytes. With n distinct (bin, value) of the shingles and
    w = bins // n - 1 >= 3: mode min(w, 16), the filled-bin bitmap (little-endian 64-bit words), then
    every shingle in bin order (within a bin by its 32-bit value) as its value mod 3 * 2^(w - 2) in w
    bits and 1 bit (1: the next shingle is in the same bin), a little-endian bit stream. Otherwise
    mode 0 and the 2-bit planes of ``oph_bins``."""
    keys = _oph_keys(text, bins, seed, size, shingle)
    width = bins // len(keys) - 1 if keys else 0
    if width < 3:
        return b"\x00" + oph_bins(text, bins=bins, bits=2, seed=seed, size=size, shingle=shingle)
    width = min(width, 16)
    modulus = 3 << (width - 2)
    bitmap = sum(1 << b for b in {b for b, _ in keys})
    stream, pos = 0, 0
    for k, (b, low) in enumerate(keys):
        more = k + 1 < len(keys) and keys[k + 1][0] == b
        stream |= ((low % modulus) | (int(more) << width)) << pos
        pos += width + 1
    return bytes([width]) + bitmap.to_bytes(bins // 8, "little") + stream.to_bytes(bins // 8, "little")


def estimate_similarity(a: bytes, b: bytes, bins: int) -> float:
    """The estimate of two ``estimate_sketch``. Both sparse with widths >= 6: shingle by shingle (pairs of
    one shingle of each in the bins filled on both sides, those agreeing at the smaller modulus less
    the 1 / modulus of the others expected to agree by chance, over the union). Otherwise the b-bit
    estimate on the bins' minima at the smaller modulus (3 for mode 0). The shingle-by-shingle count
    of common shingles is rounded to a whole number."""
    words = bins // 64

    def decode(data: bytes) -> tuple[list[tuple[int, int]], dict[int, int], int, int]:
        body = int.from_bytes(data[1:], "little")
        if data[0] == 0:
            mins = {}
            for i in range(bins):
                code = ((body >> i) & 1) | (((body >> (words * 64 + i)) & 1) << 1)
                if code:
                    mins[i] = code - 1
            return [], mins, 3, 0
        width = data[0]
        stream = body >> bins
        elements, mins, pos = [], {}, 0
        for i in range(bins):
            if not (body >> i) & 1:
                continue
            more = True
            while more:
                code = (stream >> pos) & ((1 << (width + 1)) - 1)
                pos += width + 1
                more = bool(code >> width)
                mins.setdefault(i, code & ((1 << width) - 1))
                elements.append((i, code & ((1 << width) - 1)))
        return elements, mins, 3 << (width - 2), width

    ea, ma, mod_a, wa = decode(a)
    eb, mb, mod_b, wb = decode(b)
    m = min(mod_a, mod_b)
    chance = 1 / m
    if min(wa, wb) >= 6:
        pairs = equal = 0
        for i, x in ea:
            for j, y in eb:
                if i == j:
                    pairs += 1
                    equal += x % m == y % m
        common = math.floor((equal - chance * pairs) / (1 - chance) + 0.5)
        union = len(ea) + len(eb) - common
        return min(1.0, max(0.0, common / union)) if union > 0 else 0.0
    either = len(ma.keys() | mb.keys())
    both = ma.keys() & mb.keys()
    equal = sum(1 for i in both if ma[i] % m == mb[i] % m)
    if not either:
        return 0.0
    return min(1.0, max(0.0, (equal - chance * len(both)) / (1 - chance) / either))
